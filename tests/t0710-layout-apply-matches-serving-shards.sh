#!/bin/sh
# dcr-apply --layout places the merged canonical delta of the training ranks
# into every vLLM serving rank of the base, and gives exactly the serving
# shards of the new checkpoint (both cut by an independent slicing script):
# T in {1,2,4,8}, GQA with K < T (KV heads replicated) and K >= T, MoE with
# and without expert parallelism; partial and full deltas alike. A second
# apply of the same delta changes nothing.
. "$(dirname "$0")/lib-layout.sh"

n=0
for cfg in llama-gqa qwen2-kv8 qwen2-moe qwen3-moe; do
	pair $cfg
	w="$tmp/w-$cfg"
	ranks $cfg 2 1 "$w" || fail "megatron T=2 $cfg"
	rankdiffs "$w" "$w/t0" "$w/t1"
	merge "$w" $cfg
	for T in 1 2 4 8; do
		es=1
		case $cfg in *moe*) [ $T = 1 ] || es="1 $T" ;; esac
		for E in $es; do
			s="$tmp/s"
			rm -rf "$s"
			"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp $T --ep $E \
				-o "$s.map" 2>/dev/null || continue # refusals are t0500's business
			$SLICE slice "$D/$cfg.json" "$tmp/$cfg/c0" --framework vllm --tp $T --ep $E -o "$s/0" ||
				fail "slice"
			$SLICE slice "$D/$cfg.json" "$tmp/$cfg/c1" --framework vllm --tp $T --ep $E -o "$s/1" ||
				fail "slice"
			# the full delta on even configurations, the partial one on odd
			d="$w/partial.delta"
			[ $((n % 2)) = 0 ] && d="$w/full.delta"
			r=0
			while [ $r -lt $T ]; do
				"$B/dcr-apply" -q --layout "$s.map" --rank $r "$s/0/rank-$r" "$d" ||
					fail "$cfg T=$T E=$E: apply --layout rank $r"
				r=$((r + 1))
			done
			same_shards "$s/0" "$s/1" >/dev/null ||
				fail "$cfg T=$T E=$E: placed serving shards differ from the new checkpoint's"
			"$B/dcr-apply" --layout "$s.map" --rank 0 "$s/0/rank-0" "$d" 2>"$tmp/err" ||
				fail "$cfg T=$T E=$E: second apply"
			grep -q "already holds this delta" "$tmp/err" || fail "second apply: $(cat "$tmp/err")"
			same_shards "$s/0" "$s/1" >/dev/null || fail "$cfg T=$T E=$E: second apply changed bits"
			echo "ok $cfg T=$T E=$E ($(basename "$d"))"
			n=$((n + 1))
		done
	done
done
[ $n = 20 ] || fail "ran $n cases"

# the comparison bites: the delta placed on the wrong rank gives other bits
s="$tmp/s"
rm -rf "$s"
"$B/dcr-layout" generate --config "$D/llama-gqa.json" --framework vllm --tp 2 -o "$s.map" || fail map
$SLICE slice "$D/llama-gqa.json" "$tmp/llama-gqa/c0" --framework vllm --tp 2 -o "$s/0" || fail slice
$SLICE slice "$D/llama-gqa.json" "$tmp/llama-gqa/c1" --framework vllm --tp 2 -o "$s/1" || fail slice
"$B/dcr-apply" -q --layout "$s.map" --rank 1 "$s/0/rank-0" "$tmp/w-llama-gqa/partial.delta" ||
	fail "apply to another rank"
"$B/dcr-apply" -q --layout "$s.map" --rank 0 "$s/0/rank-1" "$tmp/w-llama-gqa/partial.delta" ||
	fail "apply to another rank"
same_shards "$s/0" "$s/1" >/dev/null 2>&1 && fail "ranks swapped, yet the shards match"
exit 0
