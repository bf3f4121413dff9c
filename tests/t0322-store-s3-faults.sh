#!/bin/sh
# S3 faults: 500 InternalError twice, then success, for plain PUT, each
# multipart part, GET and listing; a connection closed mid-body resumes with
# a signed Range request; with retries off the error names the object and
# S3's code and message. A multipart completion answered in moto's dialect
# completes.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
start_s3 s3 --fail-first 2 --log "$T/log"
S="s3://dcr-test/f"
P="--endpoint $EP --part-size 5242880 --multipart-threshold 5242880 --backoff-ms 20"
mkdata "$T/small" 100000
mkdata "$T/big" 11000000
run_ok "$TOOL" $P "$S" put v1/a "$T/small"
[ "$(grep -c '^PUT /dcr-test/f/v1/a 500' "$T/log")" = 2 ] || fail "expected 2 failed PUTs: $(cat "$T/log")"
run_ok "$TOOL" $P "$S" get v1/a
cmp "$T/out" "$T/small" || fail "get differs"
run_ok "$TOOL" $P "$S" put-file v1/b "$T/big"
[ "$(grep -c '^PUT /dcr-test/f/v1/b?partNumber=.* 500' "$T/log")" = 6 ] || fail "expected 6 failed part PUTs"
run_ok "$TOOL" $P "$S" get-fd v1/b
cmp "$T/out" "$T/big" || fail "multipart after faults differs"
run_ok "$TOOL" $P "$S" list v1/
[ "$(wc -l <"$T/out")" = 2 ] || fail "list: $(cat "$T/out")"
expect_fail 128 "$TOOL" $P --retries -1 "$S" get v1/c
contains "$ERR" "cannot GET 's3://dcr-test/f/v1/c': 500 InternalError: We encountered an internal error. Please try again. (gave up after 1 attempt)"

start_s3 cut --cut-first 1 --log "$T/log2"
run_ok "$TOOL" --endpoint "$EP" "$S" put v1/big "$T/big"
run_ok "$TOOL" --endpoint "$EP" --backoff-ms 20 "$S" get-fd v1/big
cmp "$T/out" "$T/big" || fail "resumed get differs"
grep -q '^GET /dcr-test/f/v1/big 200 CUT' "$T/log2" || fail "not cut: $(cat "$T/log2")"
grep -q '^GET /dcr-test/f/v1/big 206 range=bytes=[1-9][0-9]*-$' "$T/log2" || fail "no resume: $(cat "$T/log2")"

# a completion answered in another dialect (moto 5.2's root element,
# CompleteMultipartUploadResponse, after keep-alive white space): done,
# not "unexpected answer"
start_s3 moto --moto-complete --log "$T/log3"
run_ok "$TOOL" --endpoint "$EP" --part-size 5242880 --multipart-threshold 5242880 "$S" put-file v1/m "$T/big"
grep -q '^POST /dcr-test/f/v1/m?uploadId=.* 200' "$T/log3" || fail "no multipart completion: $(cat "$T/log3")"
run_ok "$TOOL" --endpoint "$EP" "$S" get-fd v1/m
cmp "$T/out" "$T/big" || fail "the multipart object completed in moto's dialect differs"
echo "ok: s3 faults"
