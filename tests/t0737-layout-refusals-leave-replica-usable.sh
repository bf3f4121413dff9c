#!/bin/sh
# dcr-apply --layout refuses with one line, nothing of the ranks' files
# changed, and the replica still takes the next good delta:
#   - a delta that removes a tensor, one with a byte after its trailer, a
#     rank the map lacks (128). A removing delta used to leave its
#     resolution behind as an unfinished placement that no delta passed.
#   - a rank whose files lack a tensor of the map, or hold one of another
#     shape (128; the replica used to blame the delta's codec for it), a
#     replica without one of the map's ranks (128).
#   - after a placement, a delta of another base (1, naming both states;
#     the replica used to decode its items against the wrong bits and
#     call the payload malformed).
#   - another delta while one is half placed, killed at every durable
#     step (1, "apply that one again first"); the rerun ends at the new
#     shards.
# --rank takes only --codec plain deltas (a rank holds part of the bits).
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 2 "$T/g"
run 0 dcr-layout generate --config "$T/g/v0/config.json" --framework vllm --tp 2 -o "$T/map"
for v in 0 1 2; do
	run 0 dcr-layout materialize --map "$T/map" --canonical "$T/g/v$v" -o "$T/s$v"
done
run 0 dcr-diff -o "$T/d01" "$T/g/v0" "$T/g/v1"
run 0 dcr-diff -o "$T/d02" "$T/g/v0" "$T/g/v2"
run 0 dcr-diff -o "$T/d12" "$T/g/v1" "$T/g/v2"
run 0 dcr-diff --codec plain -o "$T/p01" "$T/g/v0" "$T/g/v1"
run 0 dcr-diff --codec plain -o "$T/p02" "$T/g/v0" "$T/g/v2"
cp -r "$T/g/v0" "$T/rmv"
$MKST rm "$T/rmv" model.layers.1.mlp.down_proj.weight || fail "mkst rm"
run 0 dcr-diff -o "$T/drm" "$T/g/v0" "$T/rmv"
{ cat "$T/d01" && printf x; } >"$T/dtr"
{ cat "$T/p01" && printf x; } >"$T/ptr"

shards() { for _r in "$1"/rank-*; do snapshot "$_r"; done; }
fresh() {
	rm -rf "$T/s"
	cp -r "$T/s0" "$T/s"
}
# refused STATUS WHY ARGS...: dcr-apply --layout MAP ARGS exits STATUS
# with one line matching the extended regular expression WHY; the shards
# are as they were (unless RECOVERS is set)
refused() {
	_st=$1 _why=$2
	shift 2
	_b=$(shards "$T/s")
	run "$_st" dcr-apply --layout "$T/map" "$@"
	one_line_error dcr-apply
	grep -Eq -- "$_why" "$T/err" || { cat "$T/err" >&2; fail "$*: not refused for '$_why'"; }
	[ -n "${RECOVERS:-}" ] || [ "$(shards "$T/s")" = "$_b" ] || fail "$*: the shards changed"
}
# takes DELTA N: the replica takes DELTA and holds the shards of vN
takes() {
	run 0 dcr-apply -q --layout "$T/map" --replica "$T/s" "$1"
	[ "$(shards "$T/s")" = "$(shards "$T/s$2")" ] || fail "$1: not the shards of v$2"
}

fresh
refused 128 "drm removes a tensor; placement through a layout map cannot" --replica "$T/s" "$T/drm"
refused 128 "drm removes a tensor" --rank 0 "$T/s/rank-0" "$T/drm"
refused 128 "dtr has bytes after its trailer" --replica "$T/s" "$T/dtr"
refused 128 "ptr has bytes after its trailer" --rank 0 "$T/s/rank-0" "$T/ptr"
refused 128 "the layout map has no rank 5" --rank 5 "$T/s/rank-0" "$T/p01"
takes "$T/d01" 1
say "ok: refused deltas leave the replica usable"

t=model.layers.0.mlp.down_proj.weight
fresh
$MKST rm "$T/s/rank-1" $t || fail "mkst rm"
refused 128 "receiver '[^']*rank-1' has no tensor '$t' \(rank 1 of the map\)" --replica "$T/s" "$T/d01"
refused 128 "receiver '[^']*rank-1' has no tensor '$t'" --rank 1 "$T/s/rank-1" "$T/p01"
fresh
$MKST retype "$T/s/rank-1" $t:BF16:128x175 || fail "mkst retype"
refused 128 "receiver '[^']*rank-1': tensor '$t' does not match the map \(dtype or shape\)" \
	--replica "$T/s" "$T/d01"
refused 128 "receiver '[^']*rank-1': tensor '$t' does not match the map" --rank 1 "$T/s/rank-1" "$T/p01"
fresh
rm -rf "$T/s/rank-1"
refused 128 "cannot open receiver '[^']*rank-1': No such file or directory" --replica "$T/s" "$T/d01"
say "ok: ranks that do not match the map"

fresh
takes "$T/d01" 1
refused 1 "replica '[^']*rank-0' holds canonical state [0-9a-f]{12}, the delta's base is [0-9a-f]{12}" \
	--replica "$T/s" "$T/d02"
refused 1 "receiver '[^']*rank-0' holds canonical state [0-9a-f]{12}, the delta's base is" \
	--rank 0 "$T/s/rank-0" "$T/p02"
run 0 dcr-apply --layout "$T/map" --replica "$T/s" "$T/d01"
grep -q "already holds this delta" "$T/err" || { cat "$T/err" >&2; fail "d01 again is not 'already'"; }
takes "$T/d12" 2
say "ok: another base, named"

n=1 half=0
while :; do
	fresh
	st=0
	DCR_FAULT_AT=$n dcr-apply -q --layout "$T/map" --replica "$T/s" "$T/d01" 2>/dev/null || st=$?
	[ $st = 0 ] && break
	[ $st = 137 ] || fail "step $n: exit $st"
	if [ -e "$T/s/rank-0/.dcr/layout-resolved.src" ]; then
		# (a rank killed mid-apply is first rolled forward, as any
		# dcr-apply does: its files may change; killed after every rank
		# placed it, the replica is at v1, and d02 of another base)
		RECOVERS=1 refused 1 "replica '[^']*rank-0' (has an unfinished placement of another delta \([0-9a-f]{12}\): apply that one again first|holds canonical state [0-9a-f]{12}, the delta's base is)" \
			--replica "$T/s" "$T/d02"
		! grep -q "unfinished placement" "$T/err" || half=$((half + 1))
	fi
	takes "$T/d01" 1
	n=$((n + 1))
	[ $n -lt 100 ] || fail "no end of steps"
done
[ $half -gt 0 ] || fail "no step left a placement half done"
say "ok: killed at each of $((n - 1)) steps, $half of them half placed: another delta refused, the rerun exact"
