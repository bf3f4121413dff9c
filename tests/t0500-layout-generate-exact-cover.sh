#!/bin/sh
# Generated Megatron and vLLM maps are exact covers for T in {1,2,4,8},
# GQA with K < T and K >= T, dense and MoE; Megatron refuses K % T != 0.
set -u
: "${DCR_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DCR_BUILD:=$DCR_SRC}"
L=$(command -v dcr-layout || echo "$DCR_BUILD/dcr-layout")
D="$DCR_SRC/tests/layout"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for cfg in llama-gqa qwen2-kv8 qwen3-moe qwen2-moe; do
	for fw in megatron vllm; do
		for T in 1 2 4 8; do
			for E in 1 2; do
				case $cfg in *moe*) ;; *) [ "$E" = 1 ] || continue ;; esac
				[ "$fw" = vllm ] && [ "$E" != 1 ] && E=$T
				map="$tmp/$cfg-$fw-$T-$E.json"
				"$L" generate --config "$D/$cfg.json" --framework $fw --tp $T --ep $E \
					-o "$map" 2>"$tmp/err"
				rc=$?
				if [ $rc = 128 ]; then
					# Only the documented refusals.
					grep -q "divisible\|divide one another" "$tmp/err" ||
						fail "$cfg $fw T=$T E=$E: $(cat "$tmp/err")"
					continue
				fi
				[ $rc = 0 ] || fail "$cfg $fw T=$T E=$E: generate exit $rc"
				"$L" check "$map" >"$tmp/out" ||
					fail "$cfg $fw T=$T E=$E: check exit $?: $(cat "$tmp/out")"
				grep -qx "complete yes" "$tmp/out" || fail "$cfg $fw T=$T: not complete"
				grep -qx "uncovered 0" "$tmp/out" || fail "$cfg $fw T=$T: uncovered"
				echo "ok $cfg $fw T=$T E=$E"
			done
		done
	done
done

# K=2 < T=4: megatron refuses (query groups are never split), vLLM replicates.
"$L" generate --config "$D/llama-gqa.json" --framework megatron --tp 4 -o "$tmp/x.json" 2>"$tmp/err"
[ $? = 128 ] || fail "megatron K<T was not refused"
grep -q "^dcr-layout: error: megatron needs num_key_value_heads (2) divisible" "$tmp/err" ||
	fail "megatron K<T message: $(cat "$tmp/err")"
[ ! -e "$tmp/x.json" ] || fail "refused map was written"
"$L" generate --config "$D/llama-gqa.json" --framework vllm --tp 8 --all -o "$tmp/v8.json" || fail "vllm T=8"
"$L" check "$tmp/v8.json" >"$tmp/out" || fail "vllm T=8 check"
# 8 ranks, K=2: each of the 2 KV heads' k and v rows held by 4 ranks (3 extra
# copies), norms on all 8 ranks (7 extra copies).
grep -qx "replicated 336" "$tmp/out" || fail "replicas: $(cat "$tmp/out")"

# One rank's map: exact over its stored tensors, not complete.
for r in 0 3; do
	"$L" generate --config "$D/qwen3-moe.json" --framework megatron --tp 2 --ep 2 --rank $r \
		-o "$tmp/r$r.json" || fail "rank $r generate"
	"$L" check "$tmp/r$r.json" >"$tmp/out" || fail "rank $r check"
	grep -qx "complete no" "$tmp/out" || fail "rank map claims completeness"
	grep -qx "ranks 4" "$tmp/out" || fail "rank map world size"
done
"$L" generate --config "$D/qwen3-moe.json" --framework megatron --tp 2 --ep 2 --rank 4 \
	-o "$tmp/r4.json" 2>/dev/null
[ $? = 128 ] || fail "rank outside the world accepted"
exit 0
