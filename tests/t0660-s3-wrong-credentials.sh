#!/bin/sh
# Wrong credentials against S3 (signatures checked by the aws4 proxy): a
# wrong secret key, an unknown access key id and missing credentials each
# make dcr-push and dcr-pull exit 128 with one line naming the object and
# the S3 error (403 SignatureDoesNotMatch, 403 InvalidAccessKeyId), nothing
# is stored by the refused push, dcr-pull | dcr-apply leaves the receiver's
# files as they were, and the right credentials then work.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
gen 8M 1
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 32K -o "$T/p" "$T/d"
start_s3 s3
export DCR_S3_ENDPOINT="$EP"
S=s3://dcr-test/refits

expect_fail 128 env AWS_SECRET_ACCESS_KEY=wrong-secret dcr-push -q "$T/p" "$S/v1"
contains "$ERR" "dcr-push: error: cannot "
contains "$ERR" "'$S/v1/payload-0000"
contains "$ERR" "403 SignatureDoesNotMatch"
expect_fail 128 env AWS_ACCESS_KEY_ID=AKIDNOTKNOWN dcr-push -q "$T/p" "$S/v1"
contains "$ERR" "403 InvalidAccessKeyId"
expect_fail 128 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY dcr-push -q "$T/p" "$S/v1"
contains "$ERR" "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set"
run_ok "$DCR_BUILD/tests/store-tool" "$S" list v1/
[ ! -s "$T/out" ] || fail "a refused push stored objects: $(cat "$T/out")"

run_ok dcr-push -q "$T/p" "$S/v1"
receiver r
snapshot "$T/r" >"$T/snap"
expect_fail 128 env AWS_SECRET_ACCESS_KEY=wrong-secret dcr-pull -q "$S/v1"
contains "$ERR" "cannot GET '$S/v1/manifest.dcrm': 403 SignatureDoesNotMatch"
st pull env AWS_SECRET_ACCESS_KEY=wrong-secret dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 128
rc_is apply 128
one_line apply dcr-apply
untouched "$T/r" "$T/snap"
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
