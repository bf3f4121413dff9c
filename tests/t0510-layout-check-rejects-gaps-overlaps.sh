#!/bin/sh
# dcr-layout check: exit 0 on an exact cover, 1 naming the first gap, overlap
# or duplicate, 128 on malformed or hostile maps.
set -u
: "${DCR_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DCR_BUILD:=$DCR_SRC}"
L=$(command -v dcr-layout || echo "$DCR_BUILD/dcr-layout")
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# map NAME COMPLETE PIECES...: canonical A [4, 6] BF16, stored S [4, 6].
map() {
	n=$1 c=$2
	shift 2
	pieces=$(printf '%s,' "$@")
	printf '{"dcr_layout": 1, "complete": %s,\n"canonical": [{"name": "A", "dtype": "BF16", "shape": [4, 6]}],\n"stored": [{"rank": 0, "name": "S", "dtype": "BF16", "shape": [4, 6], "pieces": [%s]}]}\n' \
		"$c" "${pieces%,}" >"$tmp/$n.json"
}
expect() { # expect RC PATTERN NAME
	"$L" check "$tmp/$3.json" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = "$1" ] || fail "$3: exit $rc, expected $1: $(cat "$tmp/err")"
	[ -z "$2" ] || grep -q "$2" "$tmp/err" || fail "$3: message: $(cat "$tmp/err")"
}

# Exact: rows 0-1 straight, rows 2-3 as two column halves (strided).
map exact true \
	'{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[12, 1, 1]]}' \
	'{"kind": "affine", "canon": "A", "soff": 12, "coff": 12, "dims": [[2, 6, 6], [3, 1, 1]]}' \
	'{"kind": "affine", "canon": "A", "soff": 15, "coff": 15, "dims": [[2, 6, 6], [3, 1, 1]]}'
expect 0 "" exact
grep -qx "stored 24" "$tmp/out" || fail "exact: report"

# Gap: the last column half of row 3 is missing.
map gap false \
	'{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[12, 1, 1]]}' \
	'{"kind": "affine", "canon": "A", "soff": 12, "coff": 12, "dims": [[2, 6, 6], [3, 1, 1]]}' \
	'{"kind": "affine", "canon": "A", "soff": 15, "coff": 15, "dims": [[1, 6, 6], [3, 1, 1]]}'
expect 1 "gap: stored tensor 'S' of rank 0: elements 21..23 (\[3, 3\]..\[3, 5\]) are covered by no piece" gap

# Overlap: piece 1 starts one element early.
map overlap false \
	'{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[12, 1, 1]]}' \
	'{"kind": "padding", "soff": 11, "dims": [[13, 1]]}'
expect 1 "overlap: stored tensor 'S' of rank 0: element 11 \[1, 5\] is covered by pieces 0 and 1" overlap

# Duplicate: two stored halves both hold canonical rows 0-1.
map dup false \
	'{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[12, 1, 1]]}' \
	'{"kind": "affine", "canon": "A", "soff": 12, "coff": 0, "dims": [[12, 1, 1]]}'
expect 1 "duplicate: stored tensor 'S' of rank 0 holds element 0 \[0, 0\] of canonical tensor 'A' twice" dup

# A complete map must hold every canonical element; an incomplete one need not.
map partial true \
	'{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[12, 1, 1]]}' \
	'{"kind": "padding", "soff": 12, "dims": [[12, 1]]}'
expect 1 "uncovered: canonical tensor 'A': elements 12..23" partial
map partial2 false \
	'{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[12, 1, 1]]}' \
	'{"kind": "padding", "soff": 12, "dims": [[12, 1]]}'
expect 0 "" partial2
grep -qx "uncovered 12" "$tmp/out" || fail "partial2 report"

# Malformed and hostile maps: exit 128, one clear line.
map alias false '{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[24, 0, 1]]}'
expect 128 "stored strides are not injective" alias
map past false '{"kind": "affine", "canon": "A", "soff": 1, "coff": 0, "dims": [[24, 1, 1]]}'
expect 128 "reaches past the tensor" past
map ovf false '{"kind": "affine", "canon": "A", "soff": 0, "coff": 0, "dims": [[4294967296, 4294967296, 1], [4294967296, 1, 1]]}'
expect 128 "" ovf
map unk false '{"kind": "affine", "canon": "B", "soff": 0, "coff": 0, "dims": [[24, 1, 1]]}'
expect 128 "unknown canonical tensor 'B'" unk
map kind false '{"kind": "sideways", "canon": "A", "dims": [[24, 1, 1]]}'
expect 128 "unknown kind 'sideways'" kind
map xf false '{"kind": "residual", "transform": "sqrt", "canon": "A", "dims": [[24, 1, 1]]}'
expect 128 "known transform" xf
printf '{"dcr_layout": 2, "canonical": [], "stored": []}' >"$tmp/v2.json"
expect 128 "version 2 layout map, made by a newer dcr (this one reads version 1): upgrade dcr here" v2
printf '{"dcr_layout": 0, "canonical": [], "stored": []}' >"$tmp/v0.json"
expect 128 "unsupported layout map version 0" v0
printf '{"dcr_layout": "1", "canonical": [], "stored": []}' >"$tmp/vs.json"
expect 128 "is not a version number" vs
printf '{"dcr_layout": 1, "canonical": [{"name": "A", "dtype": "BF16", "shape": [9223372036854775807, 9223372036854775807]}], "stored": []}' >"$tmp/big.json"
expect 128 "shape overflows" big
printf '{"dcr_layout": 1, "canonical": [' >"$tmp/trunc.json"
expect 128 "invalid JSON" trunc
grep -c . "$tmp/err" | grep -qx 1 || fail "more than one error line"
expect 128 "cannot\|No such file" nonexistent
exit 0
