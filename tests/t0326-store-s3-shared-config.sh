#!/bin/sh
# S3 credentials, region and endpoint as the AWS CLI finds them, checked by
# the SigV4 proxy: keys from the environment first, else from the profile
# ($AWS_PROFILE, else default) of the credentials file, else of the config
# file ("[profile NAME]"); the region from the environment, else the
# profile; the endpoint from --endpoint, DCR_S3_ENDPOINT,
# AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else the profile's endpoint_url.
# A profile named but absent, a file too large, no keys anywhere, and a
# profile that assumes a role or signs in with SSO: one line each.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
gen 8M 1
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack -s 64K -o "$T/p" "$T/d"
start_s3 s3 --region eu-west-1
KEY=$AWS_ACCESS_KEY_ID SECRET=$AWS_SECRET_ACCESS_KEY
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION AWS_DEFAULT_REGION
S=s3://dcr-test/refits
CRED=$AWS_SHARED_CREDENTIALS_FILE CONF=$AWS_CONFIG_FILE

# no keys anywhere
expect_fail 128 dcr-push -q --endpoint "$EP" "$T/p" "$S/v1"
contains "$ERR" "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set, or the AWS profile 'default' hold"

# the credentials file: default wrong, "train" right; the region in the
# config file; comments, CRLF, indented nested settings and white space
printf '# dcr test\r\n[default]\r\naws_access_key_id = %s\r\naws_secret_access_key = wrong\r\n\r\n[train]\r\n; the right one\r\naws_access_key_id=%s\r\naws_secret_access_key  =  %s  \r\ns3 =\r\n  aws_secret_access_key = nested-not-this\r\n' \
	"$KEY" "$KEY" "$SECRET" >"$CRED"
# (an indented line is a nested setting of "s3 =", not the profile's key)
printf '[default]\nregion = eu-west-1\n[profile train]\nregion = eu-west-1\ns3 =\n  addressing_style = path\n' >"$CONF"
expect_fail 128 dcr-push -q --endpoint "$EP" "$T/p" "$S/v1"
contains "$ERR" "403 SignatureDoesNotMatch"
AWS_PROFILE=train run_ok dcr-push -q --endpoint "$EP" "$T/p" "$S/v1"
receiver r1
st pull env AWS_PROFILE=train dcr-pull -q --endpoint "$EP" "$S/v1" | st apply dcr-apply -q "$T/r1"
rc_is pull 0
rc_is apply 0
same "$T/r1" "$T/g/v1"
echo "ok: keys of the profile AWS_PROFILE names, region from the config file"

# keys in the environment win over the file's
AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET run_ok dcr-pull -q -o "$T/pulled" --endpoint "$EP" "$S/v1"
# the region: the environment's first (a wrong one is refused by the proxy)
expect_fail 128 env AWS_PROFILE=train AWS_REGION=us-east-1 dcr-pull -q -o "$T/pulled2" --endpoint "$EP" "$S/v1"
contains "$ERR" "AuthorizationHeaderMalformed"
contains "$ERR" "(the bucket is in region 'eu-west-1', not 'us-east-1': set AWS_REGION=eu-west-1"
# wrong keys in the right region: no word of regions
expect_fail 128 env AWS_PROFILE=train AWS_SECRET_ACCESS_KEY=wrong AWS_ACCESS_KEY_ID=$KEY dcr-pull -q -o "$T/pulled2" --endpoint "$EP" "$S/v1"
contains "$ERR" "403 SignatureDoesNotMatch"
case $ERR in *"bucket is in region"*) fail "a region hint where the region is right: $ERR" ;; esac
echo "ok: the environment's keys and region before the profile's; a wrong region named"

# the config file alone, with keys and endpoint_url; then AWS_ENDPOINT_URL
: >"$CRED"
printf '[profile cfg]\naws_access_key_id = %s\naws_secret_access_key = %s\nregion = eu-west-1\nendpoint_url = %s\n' \
	"$KEY" "$SECRET" "$EP" >"$CONF"
AWS_PROFILE=cfg run_ok dcr-pull -q -o "$T/pulled3" "$S/v1"
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\nregion = eu-west-1\n' \
	"$KEY" "$SECRET" >"$CONF"
AWS_ENDPOINT_URL=$EP run_ok dcr-pull -q -o "$T/pulled4" "$S/v1"
AWS_ENDPOINT_URL=http://127.0.0.1:1 AWS_ENDPOINT_URL_S3=$EP run_ok dcr-pull -q -o "$T/pulled5" "$S/v1"
echo "ok: keys and endpoint_url from the config file; AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL"

# a profile named but absent; a file too large to be a credentials file
expect_fail 128 env AWS_PROFILE=nosuch dcr-pull -q --endpoint "$EP" "$S/v1"
contains "$ERR" "the AWS profile 'nosuch' is in neither the credentials nor the config file"
head -c 2000000 /dev/zero | tr '\0' '#' >"$CRED"
expect_fail 128 dcr-pull -q --endpoint "$EP" "$S/v1"
contains "$ERR" "cannot open store"
echo "ok: an absent profile and an oversized file refused in one line"

# a profile that assumes a role or signs in with SSO: dcr does neither,
# and says how to hand it the keys the AWS CLI would get (never the
# instance's keys instead)
: >"$CRED"
printf '[profile ops]\nrole_arn = arn:aws:iam::123456789012:role/ops\nsource_profile = default\n[profile sso]\nsso_session = corp\nsso_account_id = 1\n' >"$CONF"
unset AWS_EC2_METADATA_DISABLED
expect_fail 128 env AWS_PROFILE=ops AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1 dcr-pull -q --endpoint "$EP" "$S/v1"
contains "$ERR" "the AWS profile 'ops' has role_arn, which dcr does not follow: give the profile credential_process = aws configure export-credentials --profile ops --format process"
expect_fail 128 env AWS_PROFILE=sso dcr-pull -q --endpoint "$EP" "$S/v1"
contains "$ERR" "the AWS profile 'sso' has sso_session, which dcr does not follow"
echo "ok: role and SSO profiles refused with the way out"
