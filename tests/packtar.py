#!/usr/bin/env python3
"""packtar.py - take a pack tar stream apart and put it back together
wrong, for dcr's transport tests (tests/t06*.sh).

usage: packtar.py SRC DST OP [ARGS...]
  swap I J          exchange entries I and J (0-based, in stream order)
  dup I             entry I again, right after itself
  drop I            leave entry I out
  flip I OFF        flip bit 6 of byte OFF of entry I
  cut I N           keep only the first N bytes of entry I (a valid tar
                    entry of N bytes: the payload itself is truncated)
  rename I NAME     entry I under another name
  take I SRC2 J     entry I replaced by entry J of the pack stream SRC2
  kind I KIND [TO]  entry I, under its name, made a symlink or hardlink to
                    TO, a dir or a fifo (KIND), with no data
The output is a plain ustar stream, as libarchive and tar(1) read it.
"""
import io
import sys
import tarfile


def main():
    src, dst, op, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with tarfile.open(src) as t:
        ents = [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
    kinds = {}  # entry index -> (tarfile type, link target)
    if op == 'swap':
        i, j = int(args[0]), int(args[1])
        ents[i], ents[j] = ents[j], ents[i]
    elif op == 'dup':
        i = int(args[0])
        ents.insert(i + 1, ents[i])
    elif op == 'drop':
        del ents[int(args[0])]
    elif op == 'flip':
        i, k = int(args[0]), int(args[1])
        b = bytearray(ents[i][1])
        b[k] ^= 0x40
        ents[i] = (ents[i][0], bytes(b))
    elif op == 'cut':
        i, n = int(args[0]), int(args[1])
        ents[i] = (ents[i][0], ents[i][1][:n])
    elif op == 'rename':
        i = int(args[0])
        ents[i] = (args[1], ents[i][1])
    elif op == 'take':
        i, j = int(args[0]), int(args[2])
        with tarfile.open(args[1]) as t:
            m = t.getmembers()[j]
            ents[i] = (m.name, t.extractfile(m).read())
    elif op == 'kind':
        i = int(args[0])
        types = {'symlink': tarfile.SYMTYPE, 'hardlink': tarfile.LNKTYPE,
                 'dir': tarfile.DIRTYPE, 'fifo': tarfile.FIFOTYPE}
        kinds[i] = (types[args[1]], args[2] if len(args) > 2 else '')
        ents[i] = (ents[i][0], b'')
    else:
        sys.exit('packtar.py: unknown operation ' + op)
    with tarfile.open(dst, 'w', format=tarfile.USTAR_FORMAT) as t:
        for k, (name, data) in enumerate(ents):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            if k in kinds:
                ti.type, ti.linkname = kinds[k]
            t.addfile(ti, io.BytesIO(data))


if __name__ == '__main__':
    main()
