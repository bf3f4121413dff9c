#!/bin/sh
# Partial deltas are refused by plain dcr-apply; a merge refuses two inputs
# that disagree on an element and carries agreeing duplicates once; and
# dcr-apply --layout killed at every durable step, then rerun, still gives
# exactly the serving shards of the new checkpoint (no XOR placed twice).
. "$(dirname "$0")/lib-layout.sh"

cfg=llama-gqa
pair $cfg
c="$tmp/$cfg"
w="$tmp/w"
ranks $cfg 2 1 "$w" || fail ranks
rankdiffs "$w" "$w/t0" "$w/t1"
merge "$w" $cfg

# plain dcr-apply refuses a partial delta and leaves the receiver alone
cp -r "$c/c0" "$tmp/a"
"$B/dcr-apply" "$tmp/a" "$w/partial.delta" 2>"$tmp/err"
[ $? = 128 ] || fail "plain dcr-apply took a partial delta"
grep -q "is a partial delta" "$tmp/err" || fail "message: $(cat "$tmp/err")"
"$B/dcr-verify" -q "$tmp/a" --against "$c/c0" || fail "refused apply changed the receiver"
"$B/dcr-apply" "$tmp/a" "$w/r-0.delta" 2>/dev/null && fail "plain dcr-apply took a rank delta"

# a merge carries agreeing duplicates once and refuses disagreeing ones
"$B/dcr-diff" --merge "$w/r-0.delta" "$w/r-0.delta" "$w/r-1.delta" -o "$tmp/dup.delta" ||
	fail "merge with a repeated input"
same_changes "$tmp/dup.delta" "$w/partial.delta" || fail "duplicates were not collapsed"
$STEP step "$c/c0" -o "$tmp/c2" --rate 0.05 --seed 9 || fail step
$SLICE slice "$D/$cfg.json" "$tmp/c2" --framework megatron --tp 2 -o "$tmp/t2" || fail slice
"$B/dcr-diff" --layout "$w/map.json" --rank 0 "$w/t0/rank-0" "$tmp/t2/rank-0" -o "$tmp/other.delta" ||
	fail "rank diff"
"$B/dcr-diff" --merge "$w/r-0.delta" "$tmp/other.delta" -o "$tmp/bad.delta" 2>"$tmp/err"
[ $? = 128 ] || fail "merge took disagreeing inputs"
grep -q "disagree on element" "$tmp/err" || fail "message: $(cat "$tmp/err")"
[ -e "$tmp/bad.delta" ] && fail "a failed merge left its output"

# a bad line after a good one in the target digests is refused, not a crash
{ head -n 1 "$c/digests"; echo bad; } >"$tmp/bad-digests"
"$B/dcr-diff" --merge --target-digests "$tmp/bad-digests" --base-id "$(cat "$c/base-id")" \
	"$w"/r-*.delta -o "$tmp/bd.delta" 2>"$tmp/err"
[ $? = 128 ] && grep -q "want 'HEX<TAB>NAME'" "$tmp/err" || fail "bad target digests: $(cat "$tmp/err")"

# a rank the map does not have; files that are not the rank's shards
"$B/dcr-diff" --layout "$w/map.json" --rank 5 "$w/t0/rank-0" "$w/t1/rank-0" >/dev/null 2>"$tmp/err"
[ $? = 128 ] && grep -q "has no rank 5" "$tmp/err" || fail "rank 5: $(cat "$tmp/err")"
"$B/dcr-diff" --layout "$w/map.json" --rank 0 "$w/t0/rank-0" "$c/c1" >/dev/null 2>"$tmp/err"
[ $? = 128 ] || fail "a canonical checkpoint passed for rank 0's shards"
"$B/dcr-diff" --layout "$w/map.json" "$w/t0/rank-0" "$w/t1/rank-0" >/dev/null 2>&1
[ $? = 129 ] || fail "--layout without --rank is not a usage error"

"$B/dcr-diff" --layout -h >"$tmp/out" && grep -q "^usage: dcr-diff --layout" "$tmp/out" ||
	fail "dcr-diff --layout -h"
"$B/dcr-apply" --layout -h >"$tmp/out" && grep -q "^usage: dcr-apply --layout" "$tmp/out" ||
	fail "dcr-apply --layout -h"

# crash at every durable step of a placement, then rerun
"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp 4 -o "$tmp/v.map" || fail map
$SLICE slice "$D/$cfg.json" "$c/c0" --framework vllm --tp 4 -o "$tmp/v0" || fail slice
$SLICE slice "$D/$cfg.json" "$c/c1" --framework vllm --tp 4 -o "$tmp/v1" || fail slice
n=1
while :; do
	rm -rf "$tmp/s"
	cp -r "$tmp/v0" "$tmp/s"
	DCR_FAULT_AT=$n "$B/dcr-apply" -q --layout "$tmp/v.map" --rank 0 "$tmp/s/rank-0" \
		"$w/partial.delta" 2>/dev/null
	st=$?
	[ $st = 0 ] && break
	[ $st = 137 ] || fail "step $n: exit $st"
	"$B/dcr-apply" -q --layout "$tmp/v.map" --rank 0 "$tmp/s/rank-0" "$w/partial.delta" ||
		fail "rerun after a crash at step $n"
	for r in 1 2 3; do
		"$B/dcr-apply" -q --layout "$tmp/v.map" --rank $r "$tmp/s/rank-$r" "$w/partial.delta" ||
			fail "rank $r"
	done
	same_shards "$tmp/s" "$tmp/v1" >/dev/null || fail "crash at step $n: wrong shards after rerun"
	n=$((n + 1))
	[ $n -lt 200 ] || fail "no end of steps"
done
[ $n -gt 3 ] || fail "only $n steps: the fault hook did not bite"
echo "ok: killed at each of $((n - 1)) steps, rerun gives the new shards"
exit 0
