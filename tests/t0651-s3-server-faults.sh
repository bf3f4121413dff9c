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
fault_500_twice "$S" /dcr-test/refits/v1 "$T/log500"

start_s3 cut --cut-first 1 --log "$T/logcut"
export DCR_S3_ENDPOINT="$EP"
fault_cut_once "$S" /dcr-test/refits/v1 "$T/logcut"

start_s3 always --always-cut --match 'payload-000001' --log "$T/logalw"
export DCR_S3_ENDPOINT="$EP"
fault_always_cut "$S"
