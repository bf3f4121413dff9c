#!/bin/sh
# Added and removed tensors (first, middle and last by name, in single-file
# and sharded checkpoints, together with ordinary changes) round-trip
# bit-identical, and a tensor removed and another added in one delta. A
# touched tensor of a rebuilt file is written into the staged file by the
# journal's check: its ranges that no item meets too, from the receiver's
# bytes (a 4 MiB tensor changed in three elements, in items of 4096). A
# NEW that holds no tensors is refused: a delta to it would empty every
# receiver.
. "$DCR_SRC/tests/lib-dcr.sh"

for files in 1 3; do
	rm -rf "$T/a" "$T/b"
	$MKST new --files $files "$T/a" m.0:BF16:32 m.1:BF16:16x4 m.2:F32:9 m.3:I64:3 m.4:BF16:128
	cp -r "$T/a" "$T/b"
	$MKST rm "$T/b" m.0 m.2
	$MKST add "$T/b" a.new:BF16:7
	$MKST add "$T/b" m.25:F32:3x3
	$MKST add "$T/b" z.last:U8:0x5
	$MKST xor "$T/b" m.4 0=1 127=3
	differs "$T/a" "$T/b"
	roundtrip "$T/a" "$T/b"
	roundtrip "$T/b" "$T/a"
	# remove every tensor but one, and add them all back
	cp -r "$T/a" "$T/c"
	$MKST rm "$T/c" m.0 m.1 m.2 m.3
	roundtrip "$T/a" "$T/c"
	roundtrip "$T/c" "$T/a"
	rm -rf "$T/c"
	say "ok: added and removed tensors, $files file(s)"
done

rm -rf "$T/a" "$T/b" "$T/rt"
$MKST new "$T/a" m.big:BF16:2048x1024 m.small:F32:64
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" m.big 1=1 200000=80 2000000=4
$MKST add "$T/b" m.new:BF16:5
cp -r "$T/a" "$T/rt"
run 0 dcr-diff --chunk 4096 "$T/a" "$T/b" -o "$T/d"
run 0 dcr-apply "$T/rt" "$T/d"
same "$T/rt" "$T/b"
say "ok: a rebuilt file's tensor changed in three places"

# a NEW without tensors (a wrong path, a trainer that has not written
# yet) is refused, delta or dense copy, and -o leaves no file; from an
# empty BASE the empty delta is fine
mkdir "$T/none"
run 128 dcr-diff -o "$T/d0" "$T/a" "$T/none"
grep -q "'$T/none' holds no tensors (no .safetensors files in it)" "$T/err" || fail "no reason: $(cat "$T/err")"
[ ! -e "$T/d0" ] || fail "a delta was written to an empty NEW"
run 128 dcr-diff --dense "$T/none"
grep -q "holds no tensors" "$T/err" || fail "no reason: $(cat "$T/err")"
mkdir "$T/none2"
roundtrip "$T/none2" "$T/none"
say "ok: a NEW without tensors refused"
