#!/bin/sh
# Signatures are checked by an independent implementation (npm aws4 in the
# proxy): the right secret works; a wrong secret fails with one line naming
# the object and S3's code and message; so do an unknown key id and a
# missing or wrong session token, which must be signed when required.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
start_s3 s3 --token 'tok/en+1=='
S="s3://dcr-test/p"
printf payload >"$T/a"
AWS_SESSION_TOKEN='tok/en+1==' run_ok "$TOOL" --endpoint "$EP" "$S" put v42/payload-0003 "$T/a"
AWS_SESSION_TOKEN='tok/en+1==' run_ok "$TOOL" --endpoint "$EP" "$S" get v42/payload-0003
[ "$(cat "$T/out")" = payload ] || fail "round trip"
AWS_SESSION_TOKEN='tok/en+1==' AWS_SECRET_ACCESS_KEY=wrong-secret \
	expect_fail 128 "$TOOL" --endpoint "$EP" "$S" put v42/payload-0003 "$T/a"
contains "$ERR" "store-tool: error: cannot PUT 's3://dcr-test/p/v42/payload-0003': 403 SignatureDoesNotMatch: The request signature we calculated does not match"
AWS_SESSION_TOKEN='tok/en+1==' AWS_SECRET_ACCESS_KEY=wrong-secret \
	expect_fail 128 "$TOOL" --endpoint "$EP" "$S" get v42/payload-0003
contains "$ERR" "cannot GET 's3://dcr-test/p/v42/payload-0003': 403 SignatureDoesNotMatch"
AWS_SESSION_TOKEN='tok/en+1==' AWS_SECRET_ACCESS_KEY=wrong-secret \
	expect_fail 128 "$TOOL" --endpoint "$EP" "$S" list v42/
contains "$ERR" "403 SignatureDoesNotMatch"
AWS_SESSION_TOKEN='tok/en+1==' AWS_ACCESS_KEY_ID=AKIDNOTKNOWN \
	expect_fail 128 "$TOOL" --endpoint "$EP" "$S" get v42/payload-0003
contains "$ERR" "403 InvalidAccessKeyId"
expect_fail 128 "$TOOL" --endpoint "$EP" "$S" get v42/payload-0003
contains "$ERR" "cannot GET 's3://dcr-test/p/v42/payload-0003': 403 InvalidToken"
AWS_SESSION_TOKEN=other expect_fail 128 "$TOOL" --endpoint "$EP" "$S" get v42/payload-0003
contains "$ERR" "403 InvalidToken"
AWS_SESSION_TOKEN='tok/en+1==' AWS_REGION=eu-west-1 \
	expect_fail 128 "$TOOL" --endpoint "$EP" "$S" get v42/payload-0003
contains "$ERR" "AuthorizationHeaderMalformed"
echo "ok: signatures checked"
