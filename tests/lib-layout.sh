# lib-layout.sh - shared helpers for the placement tests t07NN (sourced).
#
# Canonical pairs come from tests/layout-slice.py canon plus layout-step.py
# step; training and serving shards from layout-slice.py slice, never from
# the map code. Every command's status is checked before its output is used.
set -u
: "${DCR_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DCR_BUILD:=$DCR_SRC}"
# B: where the commands are. make check puts the programs themselves
# (.libs, with LD_LIBRARY_PATH naming lib/.libs) before libtool's wrapper
# scripts on PATH; a wrapper costs a shell and several programs a start.
B=$(dirname "$(command -v dcr-apply || echo "$DCR_BUILD/dcr-apply")")
D="$DCR_SRC/tests/layout"
SLICE="python3 -S $DCR_SRC/tests/layout-slice.py"
STEP="python3 -S $DCR_SRC/tests/layout-step.py"
DUMP="$DCR_BUILD/tests/delta-dump"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
[ -x "$DUMP" ] || { echo "skip: tests/delta-dump not built (make check builds it)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dcr-layout.XXXXXX") || exit 99
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# pair CFG: $tmp/CFG/c0 and c1 (a step of ~5% of the elements of most tensors)
pair() {
	[ -d "$tmp/$1/c1" ] && return 0
	mkdir -p "$tmp/$1"
	$SLICE canon "$D/$1.json" -o "$tmp/$1/c0" --seed 7 || fail "canon $1"
	$STEP step "$tmp/$1/c0" -o "$tmp/$1/c1" --rate 0.05 --seed 8 || fail "step $1"
	"$B/dcr-verify" --tensors "$tmp/$1/c1" >"$tmp/$1/digests" || fail "verify --tensors $1"
	"$B/dcr-verify" "$tmp/$1/c0" >"$tmp/$1/base-id" || fail "verify $1"
}

# ranks CFG T E DIR: slice c0 and c1 for Megatron into DIR/t0, DIR/t1, the map
# DIR/map.json; 1 (no failure) when Megatron refuses the parallel sizes.
ranks() {
	rm -rf "$4"
	mkdir -p "$4"
	"$B/dcr-layout" generate --config "$D/$1.json" --framework megatron --tp $2 --ep $3 \
		-o "$4/map.json" 2>/dev/null || return 1
	$SLICE slice "$D/$1.json" "$tmp/$1/c0" --framework megatron --tp $2 --ep $3 -o "$4/t0" ||
		fail "slice $1 T=$2 E=$3"
	$SLICE slice "$D/$1.json" "$tmp/$1/c1" --framework megatron --tp $2 --ep $3 -o "$4/t1" ||
		fail "slice $1 T=$2 E=$3"
}

# rankdiffs DIR SHARDS0 SHARDS1: one partial delta per rank, DIR/r-R.delta
rankdiffs() {
	for r in $(cd "$2" && ls -d rank-* | sed 's/rank-//'); do
		"$B/dcr-diff" --layout "$1/map.json" --rank $r "$2/rank-$r" "$3/rank-$r" \
			-o "$1/r-$r.delta" || fail "dcr-diff --layout rank $r ($1)"
	done
}

# merge DIR CFG: DIR/partial.delta and DIR/full.delta from DIR/r-*.delta
merge() {
	"$B/dcr-diff" --merge "$1"/r-*.delta -o "$1/partial.delta" || fail "merge ($1)"
	"$B/dcr-diff" --merge --target-digests "$tmp/$2/digests" --base-id "$(cat "$tmp/$2/base-id")" \
		"$1"/r-*.delta -o "$1/full.delta" || fail "merge --target-digests ($1)"
}

# same_shards A B: the layouts A and B (rank-R/model.safetensors) hold the
# same tensors. Files equal byte for byte settle it; otherwise
# layout-slice.py compare, tensor by tensor, decides (a python start is
# most of a compare's cost, and the placement tests compare often).
same_shards() {
	_ra=$(cd "$1" && ls -d rank-* 2>/dev/null) || _ra=
	_rb=$(cd "$2" && ls -d rank-* 2>/dev/null) || _rb=
	if [ -n "$_ra" ] && [ "$_ra" = "$_rb" ]; then
		_same=1
		for _r in $_ra; do
			cmp -s "$1/$_r/model.safetensors" "$2/$_r/model.safetensors" || { _same=; break; }
		done
		[ -z "$_same" ] || return 0
	fi
	$SLICE compare "$1" "$2"
}

# same_changes A B: the two deltas carry the same changes, element for element
same_changes() {
	"$DUMP" "$1" >"$tmp/dump-a" || fail "dump $1"
	"$DUMP" "$2" >"$tmp/dump-b" || fail "dump $2"
	sort "$tmp/dump-a" >"$tmp/dump-a.s"
	sort "$tmp/dump-b" >"$tmp/dump-b.s"
	cmp -s "$tmp/dump-a.s" "$tmp/dump-b.s"
}
