#!/bin/sh
# A truncated delta (cut at 0, 1, 8, 63, 64, 70, 100 bytes, half-way, and 1,
# 31, 32 and 33 bytes before its end) and a corrupted one (one byte flipped
# in the magic, version, flags, base id, a record header, a record body,
# half-way and in the trailer) are refused by dcr-apply with one error line
# and exit 128, from a file and from standard input, and the receiver's
# files stay exactly as they were; then the intact delta still applies.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 1 --shards 2 --change 0.05 "$T/g"
run 0 dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
len=$(wc -c <"$T/d")
cp -r "$T/g/v0" "$T/r"
snapshot "$T/r" >"$T/snap0"

refused() { # WHAT: the last dcr-apply was refused and changed nothing
	one_line_error dcr-apply
	snapshot "$T/r" >"$T/snap1"
	cmp -s "$T/snap0" "$T/snap1" || fail "$1: receiver files changed"
	[ ! -e "$T/r/.dcr/journal" ] || fail "$1: a journal was committed"
	[ ! -e "$T/r/.dcr/incoming" ] || fail "$1: staged delta left behind"
}

n=0
for cut in 0 1 8 63 64 70 100 $((len / 2)) $((len - 33)) $((len - 32)) $((len - 31)) $((len - 1)); do
	head -c "$cut" "$T/d" >"$T/bad"
	run 128 dcr-apply "$T/r" "$T/bad"
	refused "cut at $cut"
	if [ "$cut" -ge 8 ]; then # past the magic, the message must say what is wrong
		grep -qi 'truncated' "$T/err" || { cat "$T/err"; fail "cut at $cut: message does not say truncated"; }
	fi
	run 128 sh -c 'dcr-apply "$1" - <"$2"' sh "$T/r" "$T/bad"
	refused "cut at $cut (stdin)"
	n=$((n + 2))
done
say "ok: $n truncated deltas refused"

flip() { # OFFSET: copy of the delta with byte OFFSET inverted
	python3 -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[int(sys.argv[2])] ^= 0xff
open(sys.argv[3], 'wb').write(b)" "$T/d" "$1" "$T/bad"
}
n=0
for off in 0 7 8 12 16 47 48 64 68 72 80 $((len / 2)) $((len / 2 + 1)) $((len - 40)) $((len - 32)) $((len - 1)); do
	flip "$off"
	run 128 dcr-apply "$T/r" "$T/bad"
	refused "byte $off flipped"
	n=$((n + 1))
done
say "ok: $n corrupted deltas refused"

# trailing garbage after a whole delta is an error too
cat "$T/d" "$T/d" >"$T/bad"
set +e
dcr-apply "$T/r" "$T/bad" >"$T/out" 2>"$T/err"
rc=$?
set -e
if [ $rc -eq 0 ]; then
	echo "note: bytes after a delta's trailer are ignored"
	rm -rf "$T/r" && cp -r "$T/g/v0" "$T/r"
else
	[ $rc -eq 128 ] || fail "trailing data: exit $rc"
	refused "trailing data"
fi

# not a delta at all
run 128 dcr-apply "$T/r" "$T/g/v1/model-00001-of-00002.safetensors"
refused "a safetensors file as delta"
run 128 dcr-apply "$T/r" "$T/nonexistent"
refused "a missing delta"

run 0 dcr-apply "$T/r" "$T/d"
same "$T/r" "$T/g/v1"
