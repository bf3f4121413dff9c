#!/bin/sh
# The directory store through store-tool: put/get/stat/list/delete, a missing
# object is exit 2 naming it, put-if-absent refuses an existing name (exit 3)
# and keeps the first content, parallel puts and gets round-trip.
. "$DCR_SRC/tests/lib-store.sh"
S="$T/store"
mkdata "$T/a" 100000
run_ok "$TOOL" "$S" put v1/payload-000000 "$T/a"
run_ok "$TOOL" "$S" get v1/payload-000000
cmp "$T/out" "$T/a" || fail "get returned other bytes"
run_ok "$TOOL" "file://$S" get-fd v1/payload-000000
cmp "$T/out" "$T/a" || fail "get-fd returned other bytes"
run_ok "$TOOL" "$S" stat v1/payload-000000
[ "$(cat "$T/out")" = 100000 ] || fail "stat: $(cat "$T/out")"
expect_fail 2 "$TOOL" "$S" get v1/missing
contains "$ERR" "$S/v1/missing"
printf first >"$T/f1"
printf second >"$T/f2"
run_ok "$TOOL" "$S" put-if-absent refs/main "$T/f1"
expect_fail 3 "$TOOL" "$S" put-if-absent refs/main "$T/f2"
contains "$ERR" "already exists"
run_ok "$TOOL" "$S" get refs/main
[ "$(cat "$T/out")" = first ] || fail "put-if-absent overwrote"
run_ok "$TOOL" --parallel 4 "$S" put-many v2/p- 40 5000
run_ok "$TOOL" --parallel 4 "$S" get-many v2/p- 40 5000
run_ok "$TOOL" "$S" list v2/
[ "$(wc -l <"$T/out")" = 40 ] || fail "list v2/: $(cat "$T/out")"
run_ok "$TOOL" "$S" delete v1/payload-000000
expect_fail 2 "$TOOL" "$S" delete v1/payload-000000
expect_fail 128 "$TOOL" "$S" put ../escape "$T/a"
contains "$ERR" "invalid object name"
echo "ok: directory store"
