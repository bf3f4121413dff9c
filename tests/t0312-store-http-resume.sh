#!/bin/sh
# A server that closes the connection in the middle of a body: the download
# resumes with a Range request pinned to the ETag and the bytes are exact,
# for get-to-fd (a pipe) and for get into memory. A server that always cuts
# ends in a one-line error naming the object after the retries.
. "$DCR_SRC/tests/lib-store.sh"
need_node
start_server http http-store.js --cut-first 1 --log "$T/log"
U="http://127.0.0.1:$PORT/store"
mkdata "$T/a" 8000000
run_ok "$TOOL" "$U" put v1/big "$T/a"
{ rc=0; "$TOOL" --backoff-ms 20 "$U" get-fd v1/big 2>"$T/err" || rc=$?; echo $rc >"$T/rc"; } | cat >"$T/got"
[ "$(cat "$T/rc")" = 0 ] || fail "get-fd to a pipe exited $(cat "$T/rc"): $(cat "$T/err")"
cmp "$T/got" "$T/a" || fail "resumed get-fd returned other bytes"
grep -q '^GET /store/v1/big 200 CUT' "$T/log" || fail "the server did not cut: $(cat "$T/log")"
grep -q '^GET /store/v1/big 206 range=bytes=[1-9][0-9]*-$' "$T/log" || fail "no resume: $(cat "$T/log")"
run_ok "$TOOL" "$U" put v1/big2 "$T/a"
run_ok "$TOOL" --backoff-ms 20 "$U" get v1/big2
cmp "$T/out" "$T/a" || fail "resumed get returned other bytes"

start_server cut http-store.js --always-cut
U2="http://127.0.0.1:$PORT/s"
run_ok "$TOOL" "$U2" put v1/big "$T/a"
expect_fail 128 "$TOOL" --backoff-ms 10 --retries 2 "$U2" get v1/big
contains "$ERR" "cannot GET '$U2/v1/big': "
contains "$ERR" "gave up after 3 attempts"
echo "ok: resumed downloads"
