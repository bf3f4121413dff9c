#!/bin/sh
# Residual path: fp32 Megatron training shards of a bf16 checkpoint. Each
# rank converts old and new stored values (round to nearest even, as the
# exporting framework does), compares the converted bits and sends
# overwrites: the merged deltas carry exactly the elements whose exported
# bf16 value changed (none of the fp32 changes below bf16 resolution), and
# the full merge turns the exported base into the exported target; with
# Megatron's zero-centered gamma (dcr-layout generate --zero-centered-gamma)
# too. The export is computed independently by tests/layout-step.py.
. "$(dirname "$0")/lib-layout.sh"

cfg=qwen2-kv8
pair $cfg
c="$tmp/$cfg"
$STEP export "$c/c0" -o "$c/e0" || fail "export c0"
$STEP export "$c/c1" -o "$c/e1" || fail "export c1"
"$B/dcr-verify" --tensors "$c/e1" >"$c/edigests" || fail "digests"
"$B/dcr-diff" --codec plain --no-cache "$c/e0" "$c/e1" -o "$c/ecanon.delta" || fail "canonical diff"
"$DUMP" "$c/ecanon.delta" | cut -f1,2 | sort >"$tmp/want" || fail dump
[ -s "$tmp/want" ] || fail "the exported checkpoints do not differ"
for T in 1 2 4; do
	w="$tmp/w"
	rm -rf "$w"
	mkdir -p "$w"
	"$B/dcr-layout" generate --config "$D/$cfg.json" --framework megatron --tp $T \
		--stored-dtype F32 -o "$w/map.json" || fail "map T=$T"
	$SLICE slice "$D/$cfg.json" "$c/c0" --framework megatron --tp $T -o "$w/b0" || fail slice
	$SLICE slice "$D/$cfg.json" "$c/c1" --framework megatron --tp $T -o "$w/b1" || fail slice
	$STEP widen "$w/b0" -o "$w/t0" || fail widen
	$STEP widen --jitter "$w/b1" -o "$w/t1" || fail widen
	for r in $(cd "$w/t0" && ls -d rank-* | sed 's/rank-//'); do
		"$B/dcr-diff" --stats --layout "$w/map.json" --rank $r "$w/t0/rank-$r" "$w/t1/rank-$r" \
			-o "$w/r-$r.delta" 2>"$tmp/err" || fail "rank $r: $(cat "$tmp/err")"
		cat "$tmp/err" >>"$tmp/stats"
	done
	"$B/dcr-diff" --merge "$w"/r-*.delta -o "$w/partial.delta" || fail merge
	"$DUMP" "$w/partial.delta" >"$tmp/got.full" || fail dump
	grep -qv '	set	' "$tmp/got.full" && fail "T=$T: a residual change went as XOR"
	cut -f1,2 "$tmp/got.full" | sort >"$tmp/got"
	cmp -s "$tmp/got" "$tmp/want" ||
		fail "T=$T: changed elements differ from the export's: $(diff "$tmp/got" "$tmp/want" | head -3)"
	"$B/dcr-diff" --merge --target-digests "$c/edigests" --base-id "$("$B/dcr-verify" "$c/e0")" \
		"$w"/r-*.delta -o "$w/full.delta" || fail "full merge"
	rm -rf "$tmp/a"
	cp -r "$c/e0" "$tmp/a"
	"$B/dcr-apply" -q "$tmp/a" "$w/full.delta" || fail "T=$T: apply"
	"$B/dcr-verify" -q "$tmp/a" --against "$c/e1" || fail "T=$T: exported base + merge != exported target"
	echo "ok T=$T: $(wc -l <"$tmp/got") overwrites"
done
# placing into fp32 serving shards is residual too: overwrites of the
# widened new values, which is exactly the fp32 copy of the exported target
s="$tmp/s"
"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp 4 --stored-dtype F32 \
	-o "$s.map" || fail "vllm F32 map"
$SLICE slice "$D/$cfg.json" "$c/e0" --framework vllm --tp 4 -o "$s/b0" || fail slice
$SLICE slice "$D/$cfg.json" "$c/e1" --framework vllm --tp 4 -o "$s/b1" || fail slice
$STEP widen --exact "$s/b0" -o "$s/0" || fail widen
$STEP widen --exact "$s/b1" -o "$s/1" || fail widen
for r in 0 1 2 3; do
	"$B/dcr-apply" -q --layout "$s.map" --rank $r "$s/0/rank-$r" "$w/partial.delta" ||
		fail "apply --layout F32 rank $r"
done
same_shards "$s/0" "$s/1" >/dev/null || fail "fp32 serving shards differ after placement"
echo "ok placement into fp32 serving shards"

# fp32 changes that vanish in the conversion were seen and not sent
grep -q 'stored values changed' "$tmp/stats" || fail "no stats"
sed -n 's/.*, \([0-9]*\) residual unchanged after conversion.*/\1/p' "$tmp/stats" | grep -qv '^0$' ||
	fail "no sub-bf16 fp32 change was seen: $(cat "$tmp/stats")"

# Megatron's zero-centered gamma (--zero-centered-gamma: norm weights stored
# as gamma - 1): each rank adds 1 in fp32 and rounds to bf16 as the export
# does, and the merged deltas take the exported base to the exported target;
# a map made without the option gives norms off by one, which the target
# digests refuse
z="$tmp/z"
$STEP export --zero-centered "$c/c0" -o "$z/e0" || fail "export zc c0"
$STEP export --zero-centered "$c/c1" -o "$z/e1" || fail "export zc c1"
"$B/dcr-verify" --tensors "$z/e1" >"$z/edigests" || fail "digests"
$SLICE slice "$D/$cfg.json" "$c/c0" --framework megatron --tp 2 -o "$z/b0" || fail slice
$SLICE slice "$D/$cfg.json" "$c/c1" --framework megatron --tp 2 -o "$z/b1" || fail slice
$STEP widen --zero-centered "$z/b0" -o "$z/t0" || fail widen
$STEP widen --zero-centered "$z/b1" -o "$z/t1" || fail widen
# zc_refit [--zero-centered-gamma]: the map so made, each rank's diff of the
# zero-centered shards (both must work), then the merge to the exported
# target applied to a copy of the exported base: its status
zc_refit() {
	"$B/dcr-layout" generate --config "$D/$cfg.json" --framework megatron --tp 2 \
		--stored-dtype F32 "$@" -o "$z/map.json" || fail "map $*"
	for r in 0 1; do
		"$B/dcr-diff" --layout "$z/map.json" --rank $r "$z/t0/rank-$r" "$z/t1/rank-$r" \
			-o "$z/r-$r.delta" || fail "zc rank $r $*"
	done
	rm -rf "$tmp/a"
	cp -r "$z/e0" "$tmp/a"
	"$B/dcr-diff" --merge --target-digests "$z/edigests" --base-id "$("$B/dcr-verify" "$z/e0")" \
		"$z"/r-*.delta -o "$z/full.delta" &&
		"$B/dcr-apply" -q "$tmp/a" "$z/full.delta" &&
		"$B/dcr-verify" -q "$tmp/a" --against "$z/e1"
}
zc_refit --zero-centered-gamma || fail "zero-centered: exported base + merge != exported target"
! zc_refit 2>/dev/null || fail "a map without --zero-centered-gamma reached the zero-centered target"
echo "ok zero-centered gamma: exported base + merge == exported target"
exit 0
