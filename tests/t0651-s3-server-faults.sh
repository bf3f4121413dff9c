#!/bin/sh
# Server faults through S3 (s3rver behind the SigV4-checking proxy): 500
# InternalError twice for every request, then success: dcr-push and
# dcr-pull | dcr-apply retry and end bit-identical. A connection closed
# mid-body on the first GET of each object: dcr-pull resumes. Payload 1 cut
# on every GET: one line naming the object, the receiver untouched.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
gen 8M 1
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 32K -o "$T/p" "$T/d"
S=s3://dcr-test/refits

start_s3 f500 --fail-first 2 --log "$T/log500"
export DCR_S3_ENDPOINT="$EP"
st push dcr-push -q "$T/p" "$S/v1"
rc_is push 0
receiver r
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
for f in $(ls "$T/p"); do
	for m in PUT GET; do
		got=$(grep "^$m /dcr-test/refits/v1/$f " "$T/log500" | cut -d' ' -f3 | tr '\n' ' ')
		[ "$got" = "500 500 200 " ] || fail "$m $f: statuses '$got', want 500 500 200"
	done
done

start_s3 cut --cut-first 1 --log "$T/logcut"
export DCR_S3_ENDPOINT="$EP"
run_ok dcr-push -q "$T/p" "$S/v1"
receiver r
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
grep -q '^GET /dcr-test/refits/v1/payload-000001.dcrp 200 CUT' "$T/logcut" || fail "no cut GET in the log"
grep -q '^GET /dcr-test/refits/v1/payload-000001.dcrp 206 range=bytes=[1-9]' "$T/logcut" ||
	fail "dcr-pull did not resume payload 1 with a Range request"

start_s3 always --always-cut --match 'payload-000001' --log "$T/logalw"
export DCR_S3_ENDPOINT="$EP"
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
