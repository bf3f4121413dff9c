#!/bin/sh
# Names and words from input reached the terminal raw, escape sequences
# included. Now every message on stderr, and every name a listing prints on
# stdout (but with -z), shows a control byte, DEL, a C1 control or a byte
# that is not UTF-8 as \xNN (\t, \n, \r, \\), while UTF-8 names pass
# unchanged: a tar entry's name in dcr-apply's refusal, an HTTP reason
# phrase and error body in dcr-pull's, tensor names in dcr-verify and
# dcr-pack --list.
. "$DCR_SRC/tests/lib-xfer.sh"
ESC=$(printf '\033')
raw() { # FILE: it holds no ESC, BEL or CSI byte
	! LC_ALL=C grep -q "$(printf '[\033\007\233]')" "$1" || { cat -v "$1"; fail "raw control bytes in $1"; }
}
# a tar entry named with an OSC sequence (sets a terminal's title)
python3 - "$T/evil.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    ti = tarfile.TarInfo("\x1b]0;owned\x07\x1b[2J")
    ti.size = 1
    t.addfile(ti, io.BytesIO(b"x"))
PY
mkdir "$T/r"
python3 "$DCR_SRC/tests/mkst.py" new "$T/r" t:BF16:8
expect_fail 128 dcr-apply "$T/r" "$T/evil.tar"
raw "$T/err"
contains "$ERR" "unexpected entry '\\x1b]0;owned\\x07\\x1b[2J'"
expect_fail 128 dcr-push "$T/evil.tar" "$T/store/v1"
raw "$T/err"

# a server's reason phrase and body
start_py lie lie-server.py reason
expect_fail 128 dcr-pull -q --retries 0 "http://127.0.0.1:$PORT/s/v1"
raw "$T/err"
contains "$ERR" "\\x1b[31m"

# tensor names: an ESC, a C1 CSI (U+009B), a tab; and UTF-8 that passes
mkdir "$T/a" "$T/b"
python3 - "$T/a/model.safetensors" "$T/b/model.safetensors" <<'PY'
import json, struct, sys
def write(path, names):
    hdr, off = {}, 0
    for n in names:
        hdr[n] = {"dtype": "U8", "shape": [4], "data_offsets": [off, off + 4]}
        off += 4
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"\1" * off)
evil = ["caf\u00e9.w", "x\x1b[2J", "y\u009b31m", "z\tq"]
write(sys.argv[1], evil)
write(sys.argv[2], evil[:1])
PY
run_ok dcr-verify --tensors "$T/a"
raw "$T/out"
grep -q "x\\\\x1b\\[2J" "$T/out" || fail "the ESC name is not quoted: $(cat -v "$T/out")"
grep -q 'y\\xc2\\x9b31m' "$T/out" || fail "the CSI name is not quoted: $(cat -v "$T/out")"
grep -q 'z\\tq' "$T/out" || fail "the tab is not quoted: $(cat -v "$T/out")"
grep -q "$(printf 'caf\303\251.w')" "$T/out" || fail "a UTF-8 name was mangled: $(cat -v "$T/out")"
run_ok dcr-verify --tensors -z "$T/a"
LC_ALL=C grep -q "$ESC" "$T/out" || fail "-z output is not raw"
rc=0
dcr-verify "$T/b" --against "$T/a" >"$T/out" 2>"$T/err" || rc=$?
[ $rc = 1 ] || fail "dcr-verify --against exited $rc"
raw "$T/out"
run_ok dcr-diff -o "$T/d" "$T/a" "$T/b"
run_ok dcr-pack -o "$T/p" "$T/d"
run_ok dcr-pack --list "$T/p"
raw "$T/out"
grep -q 'removed x\\x1b\[2J' "$T/out" || fail "a removed name is not quoted: $(cat -v "$T/out")"
run_ok dcr-pack --list --porcelain "$T/p"
raw "$T/out"
