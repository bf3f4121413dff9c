#!/bin/sh
# The target digests joined from the training ranks' digest parts equal,
# for every tensor, the digests dcr-verify --tensors computes on the
# gathered canonical target, and the joined state id equals its state id:
# Megatron layouts of generated dense GQA and MoE configurations at
# T in {1, 2, 4, 8} (where Megatron allows the KV heads), with expert
# parallelism for the MoE ones. Both ways of joining: the manifest that
# dcr-push --finalize writes from the producers' summaries, and the full
# delta dcr-diff --merge writes from the ranks' partial deltas (no
# --target-digests), which dcr-apply then verifies end to end.
. "$DCR_SRC/tests/lib-producers.sh"
n=0
for cfg in llama-gqa qwen2-kv8 qwen2-moe qwen3-moe; do
	pair $cfg
	"$B/dcr-verify" --tensors "$T/$cfg/c1" | sort >"$T/$cfg/digests" || fail "verify --tensors $cfg"
	for TP in 1 2 4 8; do
		for E in 1 2; do
			case $cfg:$E in *moe*:*|*:1) ;; *) continue ;; esac
			w="$T/w"
			rm -rf "$w"
			mkdir -p "$w"
			"$B/dcr-layout" generate --config "$D/$cfg.json" --framework megatron --tp $TP \
				--ep $E -o "$w/map.json" 2>/dev/null || continue
			ranks $cfg $TP $E "$w"
			S="$T/store-$cfg-$TP-$E"
			producers "$w" $cfg $NR "$S"
			run_ok "$B/dcr-push" --finalize --producers $NR "$S"
			"$B/dcr-pack" --list --porcelain "$S" >"$T/list" || fail "list $S"
			awk -F'\t' '$1 == "tensor" { print $6 "\t" $2 }' "$T/list" | sort >"$T/joined"
			cmp -s "$T/joined" "$T/$cfg/digests" ||
				fail "$cfg T=$TP E=$E: joined digests differ: $(diff "$T/joined" "$T/$cfg/digests" | head -4)"
			[ "$(awk -F'\t' '$1 == "manifest" { print $4 }' "$T/list")" = "$(cat "$T/$cfg/new-id")" ] ||
				fail "$cfg T=$TP E=$E: the joined state id is not the target's"
			# the merge joins the same parts into a full delta
			for r in $(seq 0 $((NR - 1))); do
				"$B/dcr-diff" --layout "$w/map.json" --rank $r --base-id "$(cat "$T/$cfg/base-id")" \
					"$w/t0/rank-$r" "$w/t1/rank-$r" -o "$w/r-$r.delta" || fail "rank $r"
			done
			run_ok "$B/dcr-diff" --merge "$w"/r-*.delta -o "$w/full.delta"
			rm -rf "$T/a"
			cp -r "$T/$cfg/c0" "$T/a"
			run_ok "$B/dcr-apply" -q "$T/a" "$w/full.delta"
			[ "$("$B/dcr-verify" "$T/a")" = "$(cat "$T/$cfg/new-id")" ] ||
				fail "$cfg T=$TP E=$E: the merged delta does not reach the target"
			# one rank's delta missing: the merge refuses, naming the gap
			# (or, when the rank alone held some tensors, that they are missing)
			if [ $NR -gt 1 ]; then
				rm "$w/r-$((NR - 1)).delta"
				expect_fail 128 "$B/dcr-diff" --merge "$w"/r-*.delta -o "$w/bad.delta"
				case $ERR in
				*"do not cover it once"* | *"a rank's delta is missing"*) ;;
				*) fail "$cfg T=$TP E=$E: merge without rank $((NR - 1)): $ERR" ;;
				esac
			fi
			rm -rf "$S"
			echo "ok $cfg T=$TP E=$E"
			n=$((n + 1))
		done
	done
done
[ $n = 18 ] || fail "ran $n cases"
exit 0
