#!/bin/sh
# An HTTP store answering "Content-Length: 3000000000" with 100 bytes made
# dcr-pull reserve (and prefault) 2.9 GB. A memory sink now sets aside at
# most 1 MiB ahead of the bytes that arrived: dcr-pull stays under 100 MiB
# and fails with one line saying how few bytes came; a body shorter than
# announced is an error too, never a short manifest. A listing from either
# kind of server that names an object no store could hold (one climbing
# out of the prefix) is an error, not a name to act on.
. "$DCR_SRC/tests/lib-xfer.sh"
TIME=/usr/bin/time
[ -x "$TIME" ] && "$TIME" -f %M true >/dev/null 2>&1 || skip "GNU time(1) is missing"

lies() { start_py lie lie-server.py "$1"; } # MODE: set PORT
lies huge
rc=0
"$TIME" -f %M -o "$T/rss" dcr-pull -q --retries 1 "http://127.0.0.1:$PORT/s/v1" >"$T/out" 2>"$T/err" || rc=$?
[ $rc -eq 128 ] || fail "dcr-pull exited $rc: $(cat "$T/err")"
[ "$(wc -l <"$T/err")" = 1 ] || fail "not one line: $(cat "$T/err")"
contains "$(cat "$T/err")" "dcr-pull: error: "
m=$(( $(tail -n 1 "$T/rss") / 1024 ))
echo "dcr-pull of a 100-byte answer claiming 3 GB: $m MiB ($(cat "$T/err"))"
[ "$m" -lt 100 ] || fail "dcr-pull took $m MiB"

kill $PIDS 2>/dev/null || :
lies short
expect_fail 128 dcr-pull -q --retries 1 "http://127.0.0.1:$PORT/s/v1"
contains "$ERR" "transfer closed with 900 bytes remaining"

# an S3 server paging without end (truncated pages that name nothing, each
# with a new token) kept a listing asking forever: it stops after
# DCR_STORE_LIST_EMPTY (8) such pages with one line saying so
kill $PIDS 2>/dev/null || :
lies endless
export AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s AWS_REGION=us-east-1
expect_fail 128 timeout 60 "$TOOL" --endpoint "http://127.0.0.1:$PORT" --retries 1 s3://b/p list v1/
contains "$ERR" "8 truncated pages in a row named nothing (a listing without end)"
[ "$(grep -c '^GET ' "$T/lie.log")" = 8 ] || fail "not 8 pages asked for: $(grep -c '^GET ' "$T/lie.log")"

# names no store could hold, from a plain HTTP server's listing and from
# an S3 server's: one line naming the bad name, nothing listed
kill $PIDS 2>/dev/null || :
lies badname
expect_fail 128 "$TOOL" --retries 1 "http://127.0.0.1:$PORT/s" list v1/
contains "$ERR" "it lists a bad name (invalid object name 'v1/../../escape'"
expect_fail 128 "$TOOL" --endpoint "http://127.0.0.1:$PORT" --retries 1 s3://b/p list v1/
contains "$ERR" "it lists a bad name (invalid object name 'v1/../../escape'"
