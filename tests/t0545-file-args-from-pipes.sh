#!/bin/bash
# File arguments may be pipes: a layout map (dcr-diff --layout, dcr-apply
# --layout, dcr-layout check), the canonical target digests of dcr-diff
# --merge, the config of dcr-layout generate and the delta of dcr-apply, each given as a bash process
# substitution <(...), are read to their end like the regular files they
# stand for (never sized with stat, where a pipe reads as empty), and give
# the same results.
if [ -z "${BASH_VERSION:-}" ]; then
	command -v bash >/dev/null 2>&1 || { echo "SKIP: bash is missing (process substitution)"; exit 77; }
	exec bash "$0" "$@"
fi
. "$(dirname "$0")/lib-layout.sh"

cfg=llama-gqa
pair $cfg
w="$tmp/w"
ranks $cfg 2 1 "$w" || fail "megatron T=2 $cfg"
rankdiffs "$w" "$w/t0" "$w/t1"
merge "$w" $cfg

# dcr-layout check of a map through a pipe
"$B/dcr-layout" check -q <(cat "$w/map.json") || fail "dcr-layout check <(map)"

# dcr-diff --layout <(map): the same changes as with the map's file
mkdir "$w/p"
for r in 0 1; do
	"$B/dcr-diff" --layout <(cat "$w/map.json") --rank $r "$w/t0/rank-$r" "$w/t1/rank-$r" \
		-o "$w/p/r-$r.delta" || fail "dcr-diff --layout <(map) rank $r"
	same_changes "$w/p/r-$r.delta" "$w/r-$r.delta" || fail "rank $r: --layout <(map) changed the delta"
done

# dcr-diff --merge --target-digests <(dcr-verify --tensors NEW): a full delta
"$B/dcr-diff" --merge --target-digests <("$B/dcr-verify" --tensors "$tmp/$cfg/c1") \
	--base-id "$(cat "$tmp/$cfg/base-id")" "$w"/p/r-*.delta -o "$w/p/full.delta" ||
	fail "dcr-diff --merge --target-digests <(dcr-verify --tensors NEW)"
same_changes "$w/p/full.delta" "$w/full.delta" || fail "--target-digests <(...) changed the merge"

# dcr-apply R <(delta): the canonical base becomes the canonical target
rm -rf "$tmp/a"
cp -r "$tmp/$cfg/c0" "$tmp/a"
"$B/dcr-apply" -q "$tmp/a" <(cat "$w/p/full.delta") || fail "dcr-apply R <(delta)"
"$B/dcr-verify" -q "$tmp/a" --against "$tmp/$cfg/c1" || fail "dcr-apply R <(delta): not the target"

# dcr-apply --layout <(map): a serving rank placed through a pipe
s="$tmp/s"
"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp 2 -o "$s.map" ||
	fail "generate the serving map"
$SLICE slice "$D/$cfg.json" "$tmp/$cfg/c0" --framework vllm --tp 2 -o "$s/0" || fail "slice"
$SLICE slice "$D/$cfg.json" "$tmp/$cfg/c1" --framework vllm --tp 2 -o "$s/1" || fail "slice"
for r in 0 1; do
	"$B/dcr-apply" -q --layout <(cat "$s.map") --rank $r "$s/0/rank-$r" <(cat "$w/full.delta") ||
		fail "dcr-apply --layout <(map) rank $r"
done
same_shards "$s/0" "$s/1" >/dev/null || fail "dcr-apply --layout <(map): serving shards differ"

# dcr-layout generate --config <(config) gives the map the file gives; a
# config of more than 16 MiB through a pipe is refused, not cut
"$B/dcr-layout" generate --config <(cat "$D/$cfg.json") --framework vllm --tp 2 -o "$s.pipe.map" ||
	fail "generate --config <(config)"
cmp -s "$s.map" "$s.pipe.map" || fail "generate --config <(config) wrote another map"
"$B/dcr-layout" generate --config <(head -c 20000000 /dev/zero) --framework vllm --tp 2 \
	-o "$s.big.map" 2>"$tmp/err" && fail "a 20 MB config was taken"
grep -q "too large" "$tmp/err" || fail "no 'too large' for a long pipe: $(cat "$tmp/err")"
echo "ok: maps, target digests and deltas through pipes"
exit 0
