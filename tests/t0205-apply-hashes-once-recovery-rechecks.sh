#!/bin/sh
# dcr-apply hashes each touched tensor once, before the commit point, and
# says how many it verified, and how many of them it hashed from the
# items as they were resolved, without reading them again; --recheck hashes them again after the write
# and verifies the same tensors. A recovery (a journal committed by a run
# that was killed) always hashes after the write: a byte of a touched
# tensor changed behind the journal's back (one no overwrite restores) is
# found there, and the receiver is not declared at the target; that
# failure, and a journal corrupted on disk, name the way out (move the
# journal aside, apply a dense copy), which ends at the target.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 1 --change 0.05 "$T/g"
run 0 dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
# tensors whose bytes differ, counted here
touched=$(python3 - "$T/g/v0/model.safetensors" "$T/g/v1/model.safetensors" <<'EOF'
import json, struct, sys
a, b = (open(p, 'rb').read() for p in sys.argv[1:3])
n = struct.unpack('<Q', a[:8])[0]
head = json.loads(a[8:8 + n])
print(sum(1 for k, t in head.items() if k != '__metadata__' and
          a[8 + n + t['data_offsets'][0]:8 + n + t['data_offsets'][1]] !=
          b[8 + n + t['data_offsets'][0]:8 + n + t['data_offsets'][1]]))
EOF
)
[ "$touched" -gt 0 ] || fail "the step touches no tensor"

verified() { sed -n 's/.*items, \([0-9]*\) tensors verified.*/\1/p' "$T/err"; }
# of those, how many the check took from the resolved items (refit/prehash.h)
prehashed() { sed -n 's/.*tensors verified (\([0-9]*\) hashed from their items).*/\1/p' "$T/err"; }

cp -r "$T/g/v0" "$T/a"
run 0 dcr-apply "$T/a" "$T/d"
v=$(verified)
[ "$v" = "$touched" ] || { cat "$T/err" >&2; fail "default apply verified '$v' tensors, $touched are touched"; }
# dcr-diff writes each tensor's items in order: every touched tensor's
# digest is put together as its items are resolved, none read again
v=$(prehashed)
[ "$v" = "$touched" ] || { cat "$T/err" >&2; fail "default apply hashed '$v' tensors from their items, $touched are touched"; }
same "$T/a" "$T/g/v1"

# the same as a pack of several payloads, and with two tensors' items
# taking turns (tests/hostile interleave), which the check still takes
# from the items
run 0 dcr-pack -q -s 64K -o "$T/p" "$T/d"
"$DCR_BUILD/tests/hostile" interleave "$T/d" "$T/dx" || fail "hostile interleave exited $?"
for d in p dx; do
	rm -rf "$T/a"
	cp -r "$T/g/v0" "$T/a"
	run 0 dcr-apply "$T/a" "$T/$d"
	v=$(verified)
	[ "$v" = "$touched" ] || { cat "$T/err" >&2; fail "apply of $d verified '$v' tensors, $touched are touched"; }
	v=$(prehashed)
	[ "$v" = "$touched" ] || { cat "$T/err" >&2; fail "apply of $d hashed '$v' tensors from their items, $touched are touched"; }
	same "$T/a" "$T/g/v1"
done

cp -r "$T/g/v0" "$T/b"
run 0 dcr-apply --recheck "$T/b" "$T/d"
v=$(verified)
[ "$v" = "$touched" ] || { cat "$T/err" >&2; fail "--recheck verified '$v' tensors, $touched are touched"; }
same "$T/b" "$T/g/v1"

# killed after the commit point: the first fault that leaves a journal
crash_committed "$T/g/v0" "$T/d" "$T/c"
cp -r "$T/c" "$T/c2"
cp -r "$T/c" "$T/c3"
# a byte the step leaves alone, inside a tensor it touches, flipped
python3 - "$T/g/v0/model.safetensors" "$T/g/v1/model.safetensors" "$T/c/model.safetensors" <<'EOF'
import json, struct, sys
a, b, c = (open(p, 'rb').read() for p in sys.argv[1:4])
n = struct.unpack('<Q', a[:8])[0]
head = json.loads(a[8:8 + n])
for name, t in sorted(head.items()):
    if name == '__metadata__':
        continue
    lo, hi = (8 + n + x for x in t['data_offsets'])
    if a[lo:hi] == b[lo:hi]:
        continue
    at = next(i for i in range(lo, hi) if a[i] == b[i])
    with open(sys.argv[3], 'r+b') as f:
        f.seek(at)
        f.write(bytes([a[at] ^ 0xff]))
    break
else:
    sys.exit('no touched tensor')
EOF
run 128 dcr-apply --recover "$T/c"
one_line_error dcr-apply
grep -q "does not match its target digest after apply" "$T/err" || { cat "$T/err" >&2; fail "the recovery did not hash after the write"; }
[ -e "$T/c/.dcr/journal" ] || fail "the journal is gone after a failed recovery"
# every apply would stop there again: the message names the way out, and
# following it ends at the target
way_out() {
	grep -q "move '$1/.dcr/journal' aside, then restore them from a dense copy" "$T/err" ||
		{ cat "$T/err" >&2; fail "no way out named"; }
	mv "$1/.dcr/journal" "$T/journal.bad"
	run 0 dcr-diff --dense -o "$T/dense" "$T/g/v1"
	run 0 dcr-apply "$1" "$T/dense"
	same "$1" "$T/g/v1"
}
way_out "$T/c"
# a journal corrupt in its middle (a disk's bit rot): refused before
# anything is written, with the same way out
python3 -c 'import os, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(os.path.getsize(p) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x10]))' "$T/c3/.dcr/journal"
before=$(snapshot "$T/c3")
run 128 dcr-apply --recover "$T/c3"
one_line_error dcr-apply
[ "$(snapshot "$T/c3")" = "$before" ] || fail "a corrupt journal was replayed"
way_out "$T/c3"
# the same crash without the flipped byte recovers to the target
run 0 dcr-apply --recover "$T/c2"
same "$T/c2" "$T/g/v1"
say "ok: $touched tensors verified once, with --recheck, and a recovery rechecks (fault $FAULT)"
