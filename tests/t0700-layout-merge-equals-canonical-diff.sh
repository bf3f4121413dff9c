#!/bin/sh
# The union of the training ranks' canonical deltas (dcr-diff --layout per
# rank, dcr-diff --merge) equals the canonical dcr-diff element for element,
# and with the canonical target digests it is a full delta that turns the
# canonical base into the canonical target: Megatron shards cut by an
# independent slicing script, T in {1,2,4,8} (where Megatron allows the
# KV heads), dense GQA and MoE with expert parallelism.
. "$(dirname "$0")/lib-layout.sh"

n=0
for cfg in llama-gqa qwen2-kv8 qwen2-moe qwen3-moe; do
	pair $cfg
	"$B/dcr-diff" --codec plain --no-cache "$tmp/$cfg/c0" "$tmp/$cfg/c1" -o "$tmp/$cfg/canon.delta" ||
		fail "canonical diff $cfg"
	for T in 1 2 4 8; do
		for E in 1 2; do
			case $cfg:$E in *moe*:*|*:1) ;; *) continue ;; esac
			w="$tmp/w"
			ranks $cfg $T $E "$w" || continue
			rankdiffs "$w" "$w/t0" "$w/t1"
			merge "$w" $cfg
			same_changes "$w/partial.delta" "$tmp/$cfg/canon.delta" ||
				fail "$cfg T=$T E=$E: merged changes differ from the canonical diff: $(diff "$tmp/dump-a.s" "$tmp/dump-b.s" | head -5)"
			same_changes "$w/full.delta" "$tmp/$cfg/canon.delta" ||
				fail "$cfg T=$T E=$E: full merge differs"
			rm -rf "$tmp/a"
			cp -r "$tmp/$cfg/c0" "$tmp/a"
			"$B/dcr-apply" -q "$tmp/a" "$w/full.delta" || fail "$cfg T=$T E=$E: apply of the full merge"
			"$B/dcr-verify" -q "$tmp/a" --against "$tmp/$cfg/c1" ||
				fail "$cfg T=$T E=$E: canonical base + merge != canonical target"
			echo "ok $cfg T=$T E=$E: $(wc -l <"$tmp/dump-a") changes"
			n=$((n + 1))
		done
	done
done
# every case that Megatron allows ran (K < T is refused on Megatron)
[ $n = 18 ] || fail "ran $n cases"

# the comparison bites: one rank's delta missing loses changes
w="$tmp/w"
ranks qwen2-kv8 4 1 "$w" || fail "ranks"
rankdiffs "$w" "$w/t0" "$w/t1"
rm "$w/r-3.delta"
merge_only() { "$B/dcr-diff" --merge "$w"/r-*.delta -o "$w/partial.delta" || fail merge; }
merge_only
same_changes "$w/partial.delta" "$tmp/qwen2-kv8/canon.delta" && fail "three of four ranks gave every change"
exit 0
