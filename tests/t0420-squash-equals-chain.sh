#!/bin/sh
# dcr-pack --squash: a chain of 10 generated steps squashed into one delta
# (and one pack) gives exactly the bits of applying the 10 deltas one by one,
# and is no larger than the sum of its parts; a chain with added, removed
# and reshaped tensors squashes exactly too; a broken chain is refused.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack gen-checkpoint
run 0 gen-checkpoint -q --size 2M --steps 10 --shards 2 "$T/g"
G=$T/g
chain=""
total=0
for v in 1 2 3 4 5 6 7 8 9 10; do
	run 0 dcr-diff --codec plain --chunk 65536 "$G/v$((v - 1))" "$G/v$v" -o "$T/d$v"
	chain="$chain $T/d$v"
	total=$((total + $(wc -c <"$T/d$v")))
done
cp -r "$G/v0" "$T/one" && rm -rf "$T/one/.dcr"
for v in 1 2 3 4 5 6 7 8 9 10; do run 0 dcr-apply -q "$T/one" "$T/d$v"; done
same "$T/one" "$G/v10"

run 0 dcr-pack --squash --delta -o "$T/sq" $chain
sq=$(wc -c <"$T/sq")
[ "$sq" -le "$total" ] || fail "squashed delta is $sq bytes, the chain $total"
cp -r "$G/v0" "$T/r" && rm -rf "$T/r/.dcr"
run 0 dcr-apply -q "$T/r" "$T/sq"
same "$T/r" "$G/v10"
same "$T/r" "$T/one"
# as a pack, and with another chunking of the inputs
run 0 dcr-pack --squash -o "$T/sqp" $chain
cp -r "$G/v0" "$T/r2" && rm -rf "$T/r2/.dcr"
run 0 dcr-apply -q "$T/r2" "$T/sqp"
same "$T/r2" "$G/v10"
run 0 dcr-diff --codec plain --chunk 1000 "$G/v10" "$G/v9" -o "$T/back"
run 0 dcr-pack --squash --delta -o "$T/sq2" "$T/d9" "$T/d10" "$T/back"
cp -r "$G/v8" "$T/r3" && rm -rf "$T/r3/.dcr"
run 0 dcr-apply -q "$T/r3" "$T/sq2"
same "$T/r3" "$G/v9"
say "ok: 10 steps squashed ($sq bytes, chain $total bytes) equal the chain"

# structural changes along the chain; XOR then overwrite, overwrite then XOR
$MKST new --files 2 "$T/a" m.0:BF16:300 m.1:BF16:16x4 m.2:F32:9 m.3:I64:3 m.4:BF16:128
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" m.4 0=1 127=3
$MKST xor "$T/b" m.0 5=1
$MKST rm "$T/b" m.2
cp -r "$T/b" "$T/c"
$MKST retype "$T/c" m.1 F32 2>/dev/null || $MKST rm "$T/c" m.1
$MKST add "$T/c" m.2:F32:9
$MKST xor "$T/c" m.4 0=1 1=1
cp -r "$T/c" "$T/d"
$MKST xor "$T/d" m.2 3=8
$MKST xor "$T/d" m.4 127=3 0=2
$MKST rm "$T/d" m.3
$MKST add "$T/d" z.new:U8:0x5
for s in a b c d; do rm -rf "$T/$s/.dcr"; done
run 0 dcr-diff --codec plain "$T/a" "$T/b" -o "$T/s1"
run 0 dcr-diff --codec plain "$T/b" "$T/c" -o "$T/s2"
run 0 dcr-diff --codec plain "$T/c" "$T/d" -o "$T/s3"
for s in a b c d; do rm -rf "$T/$s/.dcr"; done
run 0 dcr-pack --squash --delta -o "$T/ss" "$T/s1" "$T/s2" "$T/s3"
cp -r "$T/a" "$T/ra" && rm -rf "$T/ra/.dcr"
run 0 dcr-apply -q "$T/ra" "$T/ss"
same "$T/ra" "$T/d"
say "ok: structural changes squash exactly"

# a chain coded against the receiver's bits cannot be squashed: refused
run 0 dcr-diff --codec delta "$G/v0" "$G/v1" -o "$T/dd1"
run 0 dcr-diff --codec delta "$G/v1" "$G/v2" -o "$T/dd2"
if grep -q . "$T/dd1"; then
	set +e
	dcr-pack --squash --delta -o "$T/bad" "$T/dd1" "$T/dd2" >/dev/null 2>"$T/err"
	rc=$?
	set -e
	if [ $rc -ne 0 ]; then
		grep -q "codec plain" "$T/err" || fail "unclear refusal: $(cat "$T/err")"
	fi
fi
# a broken chain (a step left out) is refused
run 1 dcr-pack --squash --delta -o "$T/bad" "$T/d1" "$T/d3"
one_line_error dcr-pack
[ ! -e "$T/bad" ] || fail "a refused squash left its output"
say "ok: a broken chain is refused"
