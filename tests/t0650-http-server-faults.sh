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
S="http://127.0.0.1:$PORT/store"
st push dcr-push -q "$T/p" "$S/v1"
rc_is push 0
receiver r
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
for f in $(ls "$T/p"); do
	for m in PUT GET; do
		got=$(grep "^$m /store/v1/$f " "$T/log500" | cut -d' ' -f3 | tr '\n' ' ')
		[ "$got" = "500 500 200 " ] || fail "$m $f: statuses '$got', want 500 500 200"
	done
done

# the first GET of each object is cut half way: resumed
start_server cut http-store.js --cut-first 1 --log "$T/logcut"
S="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$S/v1"
receiver r
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
grep -q '^GET /store/v1/payload-000001.dcrp 200 CUT' "$T/logcut" || fail "no cut GET in the log"
grep -q '^GET /store/v1/payload-000001.dcrp 206 range=bytes=[1-9]' "$T/logcut" ||
	fail "dcr-pull did not resume payload 1 with a Range request"

# payload 1 is cut on every GET: dcr-pull gives up
start_server always http-store.js --always-cut --match 'payload-000001' --log "$T/logalw"
S="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$S/v1"
receiver r
snapshot "$T/r" >"$T/snap"
st pull dcr-pull -q --retries 2 "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 128
one_line pull dcr-pull
contains "$ERR" "cannot GET '$S/v1/payload-000001.dcrp'"
contains "$ERR" "gave up after 3 attempts"
rc_is apply 128
one_line apply dcr-apply
untouched "$T/r" "$T/snap"
