#!/bin/sh
# A replica decodes the default codecs' items by gathering each item's old
# canonical bits, and which of them it has found, into two buffers it
# reuses. Sized by their sum, a BF16 item after a shorter F32 one (fewer
# bytes, more elements) overflowed the second by hundreds of bytes (the
# place fuzz target's find; ASan names the heap write). Items of F32, BF16,
# U8, F64 and F16 tensors of growing and shrinking sizes, through a map
# that splits two of them across two ranks: every codec's delta gives the
# replica exactly the ranks materialized from the new checkpoint.
. "$DCR_SRC/tests/lib-dcr.sh"

# name:dtype:elements, in name order (the order of the delta's items)
specs="a:F32:1000 b:BF16:1500 c:U8:4000 d:F64:300 e:BF16:2000 f:F16:3000 g:F32:700"
$MKST new "$T/c0" $specs || fail "mkst new"
cp -r "$T/c0" "$T/c1"
# about 3% of each tensor changed, the last element too (an item's range
# runs to its last change)
for s in $specs; do
	name=${s%%:*}
	n=$(echo "$s" | cut -d: -f3)
	set --
	i=3
	while [ $i -lt "$n" ]; do set -- "$@" "$i=1"; i=$((i + 33)); done
	$MKST xor "$T/c1" "$name" "$@" "$((n - 1))=1" || fail "mkst xor $name"
done

# the map: b and f split in halves across the ranks, the rest on rank 0
# or rank 1 whole
python3 -S - "$T/map" $specs <<'EOF'
import json, sys
out, specs = sys.argv[1], [s.split(":") for s in sys.argv[2:]]
m = {"dcr_layout": 1, "tp": 2, "world": 2, "complete": True, "canonical": [], "stored": []}
for k, (name, dt, n) in enumerate(specs):
    n = int(n)
    m["canonical"].append({"name": name, "dtype": dt, "shape": [n]})
    def piece(coff, cnt):
        return {"kind": "affine", "canon": name, "coff": coff, "soff": 0, "dims": [[cnt, 1, 1]]}
    if name in ("b", "f"):
        h = n // 2
        m["stored"].append({"rank": 0, "name": name, "dtype": dt, "shape": [h], "pieces": [piece(0, h)]})
        m["stored"].append({"rank": 1, "name": name, "dtype": dt, "shape": [n - h], "pieces": [piece(h, n - h)]})
    else:
        m["stored"].append({"rank": k % 2, "name": name, "dtype": dt, "shape": [n], "pieces": [piece(0, n)]})
json.dump(m, open(out, "w"))
EOF
run 0 dcr-layout check "$T/map"
run 0 dcr-layout materialize --map "$T/map" --canonical "$T/c0" -o "$T/s0"
run 0 dcr-layout materialize --map "$T/map" --canonical "$T/c1" -o "$T/s1"

for codec in auto delta classed plain; do
	run 0 dcr-diff --no-cache --codec $codec -o "$T/$codec.delta" "$T/c0" "$T/c1"
	rm -rf "$T/s"
	cp -r "$T/s0" "$T/s"
	run 0 dcr-apply --layout "$T/map" --replica "$T/s" "$T/$codec.delta"
	for r in 0 1; do
		$MKST same "$T/s/rank-$r" "$T/s1/rank-$r" || fail "$codec: rank $r differs from the new checkpoint's"
	done
	say "ok: $codec"
done
