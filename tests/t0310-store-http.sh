#!/bin/sh
# The HTTP store against a Node server on loopback speaking the convention of
# lib/store.h: round trips (memory, streamed file, fd, range), listing,
# parallel transfers, 404 -> exit 2 naming the object, put-if-absent, and
# clear one-line errors from servers that cannot list or ignore If-None-Match.
. "$DCR_SRC/tests/lib-store.sh"
need_node
start_server http http-store.js --log "$T/log"
U="http://127.0.0.1:$PORT/store"
mkdata "$T/a" 3000000
run_ok "$TOOL" "$U" put v1/payload-000000 "$T/a"
run_ok "$TOOL" "$U" get v1/payload-000000
cmp "$T/out" "$T/a" || fail "get returned other bytes"
run_ok "$TOOL" "$U" put-file v1/payload-000001 "$T/a"
run_ok "$TOOL" "$U" get-fd v1/payload-000001
cmp "$T/out" "$T/a" || fail "get-fd returned other bytes"
run_ok "$TOOL" "$U" get-range v1/payload-000001 1000 5000
tail -c +1001 "$T/a" | head -c 5000 >"$T/want"
cmp "$T/out" "$T/want" || fail "get-range returned other bytes"
run_ok "$TOOL" "$U" stat v1/payload-000001
[ "$(cat "$T/out")" = 3000000 ] || fail "stat: $(cat "$T/out")"
run_ok "$TOOL" "$U" put "v1/odd name+%" "$T/a"
run_ok "$TOOL" "$U" list v1/
printf 'v1/odd name+%%\nv1/payload-000000\nv1/payload-000001\n' >"$T/want"
cmp "$T/out" "$T/want" || fail "list: $(cat "$T/out")"
expect_fail 2 "$TOOL" "$U" get v1/missing
contains "$ERR" "cannot GET '$U/v1/missing': 404"
expect_fail 2 "$TOOL" "$U" stat v1/missing
contains "$ERR" "cannot HEAD '$U/v1/missing': 404"
run_ok "$TOOL" "$U" delete "v1/odd name+%"
expect_fail 2 "$TOOL" "$U" delete "v1/odd name+%"
run_ok "$TOOL" --parallel 8 "$U" put-many v2/p- 64 20000
run_ok "$TOOL" --parallel 8 "$U" get-many v2/p- 64 20000
printf one >"$T/f1"
printf two >"$T/f2"
run_ok "$TOOL" "$U" put-if-absent refs/main "$T/f1"
expect_fail 3 "$TOOL" "$U" put-if-absent refs/main "$T/f2"
contains "$ERR" "cannot create '$U/refs/main': it already exists"
run_ok "$TOOL" "$U" get refs/main
[ "$(cat "$T/out")" = one ] || fail "put-if-absent overwrote"
run_ok "$TOOL" "$U" list ""
grep -q dcr-cas-probe "$T/out" && fail "probe object left or listed"

start_server plain http-store.js --no-list --ignore-if-none-match
U2="http://127.0.0.1:$PORT/s"
expect_fail 128 "$TOOL" "$U2" list v1/
contains "$ERR" "the server does not list"
expect_fail 128 "$TOOL" "$U2" put-if-absent refs/main "$T/f1"
contains "$ERR" "cannot create '$U2/refs/main' only if absent: the server at"
contains "$ERR" "ignores If-None-Match"
echo "ok: http store"
