#!/bin/sh
# A server that answers 500 twice and then succeeds: PUT, GET, HEAD and a
# listing all succeed after exactly three attempts each. With retries off the
# same server gives a one-line error naming the object and the 500.
. "$DCR_SRC/tests/lib-store.sh"
need_node
start_server http http-store.js --fail-first 2 --log "$T/log"
U="http://127.0.0.1:$PORT/store"
mkdata "$T/a" 100000
run_ok "$TOOL" --backoff-ms 20 "$U" put v1/p "$T/a"
run_ok "$TOOL" --backoff-ms 20 "$U" get v1/p
cmp "$T/out" "$T/a" || fail "get returned other bytes"
run_ok "$TOOL" --backoff-ms 20 "$U" stat v1/p
run_ok "$TOOL" --backoff-ms 20 "$U" list v1/
[ "$(cat "$T/out")" = v1/p ] || fail "list: $(cat "$T/out")"
[ "$(grep -c '^PUT /store/v1/p 500' "$T/log")" = 2 ] || fail "expected 2 failed PUTs: $(cat "$T/log")"
[ "$(grep -c '^PUT /store/v1/p 200' "$T/log")" = 1 ] || fail "expected 1 good PUT"
[ "$(grep -c '^GET /store/v1/p 200' "$T/log")" = 1 ] || fail "expected 1 good GET"
expect_fail 128 "$TOOL" --retries -1 "$U" get v1/q
contains "$ERR" "cannot GET '$U/v1/q': 500"
contains "$ERR" "gave up after 1 attempt"
echo "ok: retried 500s"
