#!/bin/sh
# dcr-pack --squash --base CKPT composes deltas made with dcr-diff's default
# codecs, whose XOR items are coded against the receiver's bits: a chain of
# 10 generated steps squashed against its base checkpoint gives exactly the
# bits of applying the 10 deltas one by one and is no larger than the sum of
# its parts; without --base the squash is refused with a message naming
# --base; a base that is not the chain's is refused; other chunkings,
# backward steps and structural changes squash exactly too.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack gen-checkpoint
run 0 gen-checkpoint -q --size 2M --steps 10 --shards 2 "$T/g"
G=$T/g
chain=""
total=0
for v in 1 2 3 4 5 6 7 8 9 10; do
	# the default codec (auto); every other step with smaller items
	chunk=65536
	[ $((v % 2)) = 0 ] && chunk=40000
	run 0 dcr-diff --chunk $chunk "$G/v$((v - 1))" "$G/v$v" -o "$T/d$v"
	chain="$chain $T/d$v"
	total=$((total + $(wc -c <"$T/d$v")))
done

# without the base: refused, naming the way out
run 128 dcr-pack --squash --delta -o "$T/bad" $chain
one_line_error dcr-pack
grep -q -- "--base" "$T/err" || fail "refusal does not name --base: $(cat "$T/err")"
[ ! -e "$T/bad" ] || fail "a refused squash left its output"

run 0 dcr-pack --squash --base "$G/v0" --delta -o "$T/sq" $chain
sq=$(wc -c <"$T/sq")
[ "$sq" -le "$total" ] || fail "squashed delta is $sq bytes, the chain $total"
cp -r "$G/v0" "$T/r" && rm -rf "$T/r/.dcr"
run 0 dcr-apply -q "$T/r" "$T/sq"
same "$T/r" "$G/v10"
# as a pack too
run 0 dcr-pack --squash --base "$G/v0" -o "$T/sqp" $chain
cp -r "$G/v0" "$T/r2" && rm -rf "$T/r2/.dcr"
run 0 dcr-apply -q "$T/r2" "$T/sqp"
same "$T/r2" "$G/v10"
say "ok: 10 default-codec steps squashed with --base ($sq bytes, chain $total bytes)"

# deltas from pipes (read twice: kept in a temporary file), one on
# standard input: the same tensors as from files
mkfifo "$T/fifo"
timeout 120 sh -c 'cat "$1" >"$2"' sh "$T/d2" "$T/fifo" & # no writer left behind on a failure
cat "$T/d3" | run 0 dcr-pack --squash --base "$G/v0" --delta -o "$T/sqpipe" "$T/d1" "$T/fifo" /dev/stdin
wait
cp -r "$G/v0" "$T/rp" && rm -rf "$T/rp/.dcr"
run 0 dcr-apply -q "$T/rp" "$T/sqpipe"
same "$T/rp" "$G/v3"

# the squashed delta is itself a default-codec delta against v0: a second
# squash with the same base composes it with one more step back
run 0 dcr-diff "$G/v10" "$G/v9" -o "$T/back"
run 0 dcr-pack --squash --base "$G/v0" --delta -o "$T/sq2" "$T/sq" "$T/back"
cp -r "$G/v0" "$T/r3" && rm -rf "$T/r3/.dcr"
run 0 dcr-apply -q "$T/r3" "$T/sq2"
same "$T/r3" "$G/v9"

# a base that is not the chain's: refused, nothing written
run 1 dcr-pack --squash --base "$G/v1" --delta -o "$T/bad" $chain
one_line_error dcr-pack
[ ! -e "$T/bad" ] || fail "a refused squash left its output"
run 129 dcr-pack --base "$G/v0" -o "$T/bad" "$T/d1"
say "ok: a wrong base is refused"

# structural changes along a default-codec chain
$MKST new --files 2 "$T/a" m.0:BF16:3000 m.1:BF16:64x40 m.2:F32:900 m.3:I64:3 m.4:BF16:1280
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" m.4 0=1 127=3 500=1 501=1 502=2
$MKST xor "$T/b" m.0 5=1 6=1 7=1 2000=3
$MKST rm "$T/b" m.2
cp -r "$T/b" "$T/c"
$MKST rm "$T/c" m.1
$MKST add "$T/c" m.1:F32:64x40
$MKST add "$T/c" m.2:F32:900
$MKST xor "$T/c" m.4 0=1 1=1 1000=4
cp -r "$T/c" "$T/d"
$MKST xor "$T/d" m.2 3=8
$MKST xor "$T/d" m.1 3=1 4=1
$MKST xor "$T/d" m.4 127=3 0=2
$MKST rm "$T/d" m.3
$MKST add "$T/d" z.new:U8:0x5
for s in a b c d; do rm -rf "$T/$s/.dcr"; done
run 0 dcr-diff --codec classed "$T/a" "$T/b" -o "$T/s1"
run 0 dcr-diff --codec delta "$T/b" "$T/c" -o "$T/s2"
run 0 dcr-diff "$T/c" "$T/d" -o "$T/s3"
for s in a b c d; do rm -rf "$T/$s/.dcr"; done
run 0 dcr-pack --squash --base "$T/a" --delta -o "$T/ss" "$T/s1" "$T/s2" "$T/s3"
cp -r "$T/a" "$T/ra" && rm -rf "$T/ra/.dcr"
run 0 dcr-apply -q "$T/ra" "$T/ss"
same "$T/ra" "$T/d"
say "ok: structural changes squash exactly with --base"
