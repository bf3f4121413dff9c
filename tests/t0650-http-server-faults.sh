#!/bin/sh
# Server faults through the HTTP store. A server that answers 500 twice to
# every request before succeeding: dcr-push and dcr-pull | dcr-apply retry
# and end bit-identical, and the log shows the two 500s then 200 for every
# object. A server that closes the connection mid-body once per GET:
# dcr-pull resumes with a Range request. One that always cuts one payload:
# dcr-pull gives up with one line naming the object and the cause, and
# dcr-apply leaves the receiver's files as they were.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node
gen 8M 1
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 32K -o "$T/p" "$T/d"
np=$(ls "$T/p" | grep -c '^payload-') || true
[ "$np" -ge 4 ] || fail "want 4+ payloads, got $np"

# 500, 500, then success, for every request
start_server f500 http-store.js --fail-first 2 --log "$T/log500"
fault_500_twice "http://127.0.0.1:$PORT/store" /store/v1 "$T/log500"

# the first GET of each object is cut half way: resumed
start_server cut http-store.js --cut-first 1 --log "$T/logcut"
fault_cut_once "http://127.0.0.1:$PORT/store" /store/v1 "$T/logcut"

# payload 1 is cut on every GET: dcr-pull gives up
start_server always http-store.js --always-cut --match 'payload-000001' --log "$T/logalw"
fault_always_cut "http://127.0.0.1:$PORT/store"
