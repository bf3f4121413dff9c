#!/bin/sh
# Every input fuzzing found (tests/fuzz/regress/: a DELTA-coded item whose
# exponent field was shifted by 64, an HTTP answer resumed past its range,
# ...) runs through the fuzz harness's parsers in this build without a
# crash or, in a sanitized build, a sanitizer report; and the packs
# scripts/fuzz seeds its apply target with (a step from the harness's own
# tensors, tests/fuzz/apply-base.py: default codec, plain, dense) apply
# whole to what the harness holds, and the deltas it seeds its place
# target with place whole into the harness's serving ranks (every codec
# over the replica, plain into one rank alone), and the producers'
# summaries it seeds its summary target with join, so that the fuzzer
# starts past every check.
. "$DCR_SRC/tests/lib-dcr.sh"
R="$DCR_BUILD/tests/fuzz-replay"
[ -x "$R" ] || skip "tests/fuzz-replay is not built"
n=0
# (sanitized, an allocation above 2 GiB is a finding, as it is to the
# fuzzer's -rss_limit_mb=2048: the input claimed memory it did not carry)
for f in "$DCR_SRC"/tests/fuzz/regress/*; do
	[ -f "$f" ] || continue
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=2048" run 0 "$R" "$f"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no reproducer in tests/fuzz/regress"
say "$n reproducers ran clean"

# flip FILE: byte 100 of the safetensors file's data (its first tensor's)
# changed
flip() {
	run 0 python3 -c '
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[8 + struct.unpack_from("<Q", b)[0] + 100] ^= 1
open(p, "wb").write(b)' "$1"
}

# refuses IN PATTERN WHAT: the harness, told that IN must go through,
# aborts with a line that matches PATTERN
refuses() {
	rc=0
	DCR_FUZZ_APPLY_MUST=1 "$R" "$1" >/dev/null 2>"$T/err" || rc=$?
	[ $rc -ne 0 ] || fail "$3 went through"
	grep -q "$2" "$T/err" || { cat "$T/err"; fail "$3: not refused for '$2'"; }
}

need dcr-diff dcr-pack python3
run 0 python3 "$DCR_SRC/tests/fuzz/apply-base.py" "$T/a"
! cmp -s "$T/a/v0/model.safetensors" "$T/a/v1/model.safetensors" || fail "apply-base.py wrote no step"
run 0 dcr-diff --no-cache -o "$T/d" "$T/a/v0" "$T/a/v1"
run 0 dcr-diff --no-cache --codec plain -o "$T/dp" "$T/a/v0" "$T/a/v1"
run 0 dcr-diff --dense -o "$T/dd" "$T/a/v1"
for d in d dp dd; do
	run 0 dcr-pack -s 4K "$T/$d"
	mv "$T/out" "$T/$d.tar"
	{ printf '\013'; cat "$T/$d.tar"; } >"$T/$d.in"
	DCR_FUZZ_APPLY_MUST=1 run 0 "$R" "$T/$d.in"
done
# a step from other bits (a byte of model.a's base changed) does not: the
# check can fail
flip "$T/a/v0/model.safetensors"
run 0 dcr-diff --no-cache -o "$T/dx" "$T/a/v0" "$T/a/v1"
run 0 dcr-pack -s 4K "$T/dx"
mv "$T/out" "$T/dx.tar"
{ printf '\013'; cat "$T/dx.tar"; } >"$T/dx.in"
refuses "$T/dx.in" "fuzz: apply: .*model.a" "a step from other bits to the harness's tensors"
say "the apply target's seeds apply whole"

# place: the first byte after the target's picks rank 0, rank 1 or the
# replica
run 0 python3 "$DCR_SRC/tests/fuzz/apply-base.py" --place "$T/p"
for c in auto delta classed plain; do
	run 0 dcr-diff --no-cache --codec $c -o "$T/p-$c" "$T/p/v0" "$T/p/v1"
	modes=2
	[ $c != plain ] || modes="0 1 2"
	for m in $modes; do
		{ printf '\014'; printf "\\$(printf %o $m)"; cat "$T/p-$c"; } >"$T/p-$c-$m.in"
		DCR_FUZZ_APPLY_MUST=1 run 0 "$R" "$T/p-$c-$m.in"
	done
done
# a rank alone refuses what is coded against bits it holds only part of,
# and the replica a step from other bits
{ printf '\014\000'; cat "$T/p-delta"; } >"$T/px.in"
refuses "$T/px.in" "fuzz: place: 'model.a' .*hold only part of it" \
	"rank 0 alone, items coded against bits it holds only part of"
flip "$T/p/v0/model.safetensors"
run 0 dcr-diff --no-cache -o "$T/px" "$T/p/v0" "$T/p/v1"
{ printf '\014\002'; cat "$T/px"; } >"$T/px.in"
refuses "$T/px.in" "fuzz: place: " "a step from other bits to the harness's ranks"
say "the place target's seeds place whole"

# summary: the two producers' summaries of one step of a pair of Megatron
# tensor-parallel ranks build back to the same bytes and join; swapped,
# they do not
command -v dcr-layout >/dev/null 2>&1 || skip "dcr-layout is not on PATH"
L="$DCR_SRC/tests/layout/llama-gqa.json"
run 0 python3 -S "$DCR_SRC/tests/layout-slice.py" canon "$L" -o "$T/sc0" --seed 7
run 0 python3 -S "$DCR_SRC/tests/layout-step.py" step "$T/sc0" -o "$T/sc1" --rate 0.05 --seed 8
run 0 dcr-layout generate --config "$L" --framework megatron --tp 2 -o "$T/smap.json"
for c in 0 1; do
	run 0 python3 -S "$DCR_SRC/tests/layout-slice.py" slice "$L" "$T/sc$c" --framework megatron \
		--tp 2 -o "$T/st$c"
done
base=$(state_id "$T/sc0")
for r in 0 1; do
	run 0 dcr-diff --layout "$T/smap.json" --rank $r --base-id "$base" -o "$T/sd$r" \
		"$T/st0/rank-$r" "$T/st1/rank-$r"
	run 0 dcr-pack --producer $r/2 -s 4K -o "$T/sp$r" "$T/sd$r"
	{ printf '\015\000'; cat "$T/sp$r/summary-00000$r.dcrs"; } >"$T/s$r.in"
	run 0 "$R" "$T/s$r.in"
done
# joined A B: the harness's input that joins summaries A and B
joined() {
	printf '\015\001'
	python3 -c 'import os, struct, sys; sys.stdout.buffer.write(struct.pack("<I", os.path.getsize(sys.argv[1])))' "$1"
	cat "$1" "$2"
}
joined "$T/sp0/summary-000000.dcrs" "$T/sp1/summary-000001.dcrs" >"$T/sj.in"
DCR_FUZZ_APPLY_MUST=1 run 0 "$R" "$T/sj.in"
joined "$T/sp1/summary-000001.dcrs" "$T/sp0/summary-000000.dcrs" >"$T/sx.in"
refuses "$T/sx.in" "fuzz: summary: summary 0 is producer 1 of 2" "two summaries swapped"
say "the summary target's seeds join"
