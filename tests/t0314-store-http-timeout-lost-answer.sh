#!/bin/sh
# A server that does not answer at all is timed out and the request retried;
# a create-if-absent whose answer was lost (the object was made, then the
# connection closed) is retried and, finding exactly its own bytes there,
# succeeds instead of reporting a conflict; another writer's bytes still do.
. "$DCR_SRC/tests/lib-store.sh"
need_node
start_server stall http-store.js --stall-first 1 --log "$T/log"
U="http://127.0.0.1:$PORT/store"
mkdata "$T/a" 10000
start=$(date +%s)
run_ok "$TOOL" --timeout 1 --backoff-ms 20 "$U" put v1/p "$T/a"
run_ok "$TOOL" --timeout 1 --backoff-ms 20 "$U" get v1/p
cmp "$T/out" "$T/a" || fail "get after a stall differs"
[ $(($(date +%s) - start)) -lt 20 ] || fail "timeouts took too long"
[ "$(grep -c 'STALL' "$T/log")" = 2 ] || fail "expected 2 stalls: $(cat "$T/log")"
expect_fail 128 "$TOOL" --timeout 1 --retries -1 "$U" get v1/never
contains "$ERR" "cannot GET '$U/v1/never': "
contains "$ERR" "gave up after 1 attempt"

start_server drop http-store.js --drop-first 1 --log "$T/log2"
U2="http://127.0.0.1:$PORT/s"
printf mine >"$T/f1"
printf theirs >"$T/f2"
run_ok "$TOOL" --backoff-ms 20 "$U2" put-if-absent refs/main "$T/f1"
grep -q '^PUT /s/refs/main 0 DROPPED' "$T/log2" || fail "answer not dropped: $(cat "$T/log2")"
grep -q '^PUT /s/refs/main 412' "$T/log2" || fail "no conflicting retry: $(cat "$T/log2")"
expect_fail 3 "$TOOL" --backoff-ms 20 "$U2" put-if-absent refs/main "$T/f2"
run_ok "$TOOL" "$U2" get refs/main
[ "$(cat "$T/out")" = mine ] || fail "overwritten"
echo "ok: timeouts and lost answers"
