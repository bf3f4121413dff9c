#!/bin/sh
# A map plus the canonical checkpoint reproduces, byte for byte, every rank's
# shards as cut by an independent slicing script (tests/layout-slice.py):
# Megatron and vLLM, T in {1,2,4,8}, GQA with K < T and K >= T, dense and MoE.
set -u
: "${DCR_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DCR_BUILD:=$DCR_SRC}"
L=$(command -v dcr-layout || echo "$DCR_BUILD/dcr-layout")
D="$DCR_SRC/tests/layout"
S="$DCR_SRC/tests/layout-slice.py"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

one() { # one CFG FW T E
	rm -rf "$tmp/m" "$tmp/s"
	"$L" generate --config "$D/$1.json" --framework $2 --tp $3 --ep $4 -o "$tmp/map.json" \
		2>/dev/null || return 0 # refusals are t0500's business
	"$L" materialize --map "$tmp/map.json" --canonical "$tmp/c-$1" -o "$tmp/m" ||
		fail "$1 $2 T=$3 E=$4: materialize exit $?"
	python3 "$S" slice "$D/$1.json" "$tmp/c-$1" --framework $2 --tp $3 --ep $4 -o "$tmp/s" ||
		fail "$1 $2 T=$3 E=$4: slicing script exit $?"
	python3 "$S" compare "$tmp/m" "$tmp/s" >/dev/null ||
		fail "$1 $2 T=$3 E=$4: materialized shards differ from sliced shards"
	echo "ok $1 $2 T=$3 E=$4"
	n=$((n + 1))
}

n=0
for cfg in llama-gqa qwen2-kv8 qwen3-moe qwen2-moe; do
	python3 "$S" canon "$D/$cfg.json" -o "$tmp/c-$cfg" || fail "canon $cfg"
	for T in 1 2 4 8; do
		one $cfg megatron $T 1
		one $cfg vllm $T 1
		case $cfg in *moe*)
			one $cfg megatron $T 2
			[ $T = 1 ] || one $cfg vllm $T $T ;;
		esac
	done
done
# Every case above that the frameworks allow ran (K < T on megatron does not).
[ $n = 38 ] || fail "ran $n cases"

# The comparison bites: a map that swaps layer 0's k and v sources is still
# an exact cover but gives other bytes.
"$L" generate --config "$D/llama-gqa.json" --framework vllm --tp 2 -o "$tmp/map.json" || fail gen
sed -e 's/layers\.0\.self_attn\.k_proj/SWAP/' -e 's/layers\.0\.self_attn\.v_proj/layers.0.self_attn.k_proj/' \
	-e 's/SWAP/layers.0.self_attn.v_proj/' "$tmp/map.json" >"$tmp/bad.json"
cmp -s "$tmp/map.json" "$tmp/bad.json" && fail "sed changed nothing"
rm -rf "$tmp/m" "$tmp/s"
"$L" materialize --map "$tmp/bad.json" --canonical "$tmp/c-llama-gqa" -o "$tmp/m" || fail "bad materialize"
python3 "$S" slice "$D/llama-gqa.json" "$tmp/c-llama-gqa" --framework vllm --tp 2 -o "$tmp/s" || fail slice
python3 "$S" compare "$tmp/m" "$tmp/s" 2>"$tmp/err" >/dev/null && fail "a wrong map reproduced the shards"
grep -q "qkv_proj.weight: bytes differ" "$tmp/err" || fail "compare message: $(cat "$tmp/err")"

# Materialize refuses a map that is not an exact cover, and a canonical
# checkpoint that does not match the map.
sed '0,/"soff": 160, "dims": \[\[32, 1, 1\]\]/s//"soff": 159, "dims": [[32, 1, 1]]/' "$tmp/map.json" >"$tmp/ovl.json"
cmp -s "$tmp/map.json" "$tmp/ovl.json" && fail "sed changed nothing (ovl)"
"$L" materialize --map "$tmp/ovl.json" --canonical "$tmp/c-llama-gqa" -o "$tmp/o" 2>"$tmp/err"
[ $? = 128 ] || fail "overlapping map materialized"
grep -q "not an exact cover" "$tmp/err" || fail "ovl message: $(cat "$tmp/err")"
"$L" materialize --map "$tmp/map.json" --canonical "$tmp/c-qwen3-moe" -o "$tmp/o" 2>"$tmp/err"
[ $? = 128 ] || fail "mismatched checkpoint accepted"
grep -q "does not match\|has no tensor" "$tmp/err" || fail "mismatch message: $(cat "$tmp/err")"
exit 0
