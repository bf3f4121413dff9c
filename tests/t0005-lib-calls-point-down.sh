#!/bin/sh
# libdcr's four wings call only downwards (placement -> refit -> transport
# -> core) and no two of its files call each other, read off the object
# files' symbol tables by scripts/check-layers.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v nm >/dev/null 2>&1 || skip "nm (binutils) is missing"
run 0 python3 "$DCR_SRC/scripts/check-layers" "$DCR_BUILD"
cat "$T/out"
grep -q 'all downwards, no cycles' "$T/out" || fail "no verdict"
