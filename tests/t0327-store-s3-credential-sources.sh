#!/bin/sh
# S3 keys that expire, from the sources the AWS CLI asks after the
# environment's keys: a web identity token exchanged with STS (EKS IRSA),
# then, after the profile's static keys, the others, each checked by the SigV4
# proxy, which here also wants the session token the source handed out:
# the profile's credential_process (run with stdin from /dev/null: the
# pack dcr-push reads from stdin stays whole), a container's credential
# endpoint (with its Authorization header), an EC2 instance's metadata
# service (IMDSv2 session token, else v1). Failures are one line naming
# the source; keys about to expire are asked for again while a receiver
# waits (dcr-pull --wait), and keys far from expiry are not.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
gen 8M 1
TOK='temporary/session+token=='
start_s3 s3 --token "$TOK" --expired-token stale
KEY=$AWS_ACCESS_KEY_ID SECRET=$AWS_SECRET_ACCESS_KEY
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
export DCR_S3_ENDPOINT="$EP"
S=s3://dcr-test/refits
CONF=$AWS_CONFIG_FILE

# credential_process, through a shell (the quoting is the shell's); it
# reads its stdin to the end, which must not be the pack
cat >"$T/cred proc" <<EOF
#!/bin/sh
cat >/dev/null
[ "\$1" = "two words" ] || { echo "argument: \$1" >&2; exit 3; }
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "SessionToken": "%s", "Expiration": "2999-01-01T00:00:00Z"}\n' '$KEY' '$SECRET' '$TOK'
EOF
chmod +x "$T/cred proc"
printf '[default]\ncredential_process = "%s" "two words"\n' "$T/cred proc" >"$CONF"
publish "$S/v1" -s 64K
refit r1 "$S/v1"
echo "ok: credential_process keys push (the pack on stdin intact) and pull"

printf '[default]\ncredential_process = sh -c "exit 7"\n' >"$CONF"
expect_fail 128 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "credential_process exited with status 7"
printf '[default]\ncredential_process = echo {\\"AccessKeyId\\": \\"a\\", \\"SecretAccessKey\\": \\"b\\"}\n' >"$CONF"
expect_fail 128 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" 'credential_process answered without "Version": 1'
printf '[default]\ncredential_process = head -c 100000 /dev/zero\n' >"$CONF"
expect_fail 128 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "credential_process wrote more than 65536 bytes"
: >"$CONF"
echo "ok: a failing, an unversioned and an endless credential_process refused in one line"

# keys the server no longer takes: the message says when they expired and
# why renewing them failed (a broker down), not only S3's ExpiredToken.
# The first answer takes over a second, so that the first request comes a
# second after the keys were asked for and asks again.
cat >"$T/stale proc" <<EOF
#!/bin/sh
[ -e "$T/stale.ran" ] && exit 9 # the broker is down
: >"$T/stale.ran"
sleep 1.3
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "SessionToken": "stale", "Expiration": "2000-01-01T00:00:00Z"}\n' '$KEY' '$SECRET'
EOF
chmod +x "$T/stale proc"
printf '[default]\ncredential_process = "%s"\n' "$T/stale proc" >"$CONF"
expect_fail 128 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "400 ExpiredToken: The provided token has expired. (the keys from credential_process expired at 2000-01-01T00:00:00Z, and renewing them failed: credential_process exited with status 9)"
# a session token from the environment is never renewed: the way out
expect_fail 128 env AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_SESSION_TOKEN=stale \
	dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "400 ExpiredToken: The provided token has expired. (a session token from the environment or the profile is never renewed by dcr"
: >"$CONF"
echo "ok: expired keys: when, and why renewing them failed; a static session token: the way out"

# the container endpoint
start_server md aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" \
	--auth 'Bearer pod-identity' --log "$T/md.log"
MD="http://127.0.0.1:$PORT"
export AWS_CONTAINER_CREDENTIALS_FULL_URI=$MD/creds AWS_CONTAINER_AUTHORIZATION_TOKEN='Bearer pod-identity'
refit r2 "$S/v1"
unset AWS_CONTAINER_AUTHORIZATION_TOKEN
printf 'Bearer pod-identity\n' >"$T/auth"
export AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE="$T/auth"
refit r3 "$S/v1"
unset AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
expect_fail 128 env AWS_CONTAINER_CREDENTIALS_FULL_URI=$MD/creds AWS_CONTAINER_AUTHORIZATION_TOKEN=wrong \
	dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "the container credential endpoint: http://127.0.0.1:$PORT/creds answered HTTP 403"
expect_fail 128 env AWS_CONTAINER_CREDENTIALS_FULL_URI=http://198.51.100.7/creds dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to a loopback address"
echo "ok: the container endpoint's keys, its token from the environment or a file; a wrong token, a foreign http host refused"

# a web identity (EKS IRSA) through STS, before the profile's static keys
# (wrong ones here); the token file read at each fetch
start_server sts aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" \
	--role-arn arn:aws:iam::123456789012:role/dcr --web-token 'eyJhbGciOi.jwt-body.sig' --log "$T/sts.log"
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = wrong\n' "$KEY" >"$CONF"
printf 'eyJhbGciOi.jwt-body.sig\n' >"$T/webtok"
export AWS_WEB_IDENTITY_TOKEN_FILE="$T/webtok" AWS_ROLE_ARN=arn:aws:iam::123456789012:role/dcr \
	AWS_ENDPOINT_URL_STS=http://127.0.0.1:$PORT AWS_ROLE_SESSION_NAME=rollout-7
refit r6 "$S/v1"
grep -q "^STS AssumeRoleWithWebIdentity rollout-7$" "$T/sts.log" || fail "STS was not asked: $(cat "$T/sts.log")"
printf 'eyJhbGciOi.expired\n' >"$T/webtok"
expect_fail 128 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "STS AssumeRoleWithWebIdentity: http://127.0.0.1:$PORT answered HTTP 400 InvalidIdentityToken: Couldn't retrieve verification key"
expect_fail 128 env AWS_ROLE_ARN=arn:aws:iam::123456789012:role/other dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "answered HTTP 403 AccessDenied"
unset AWS_WEB_IDENTITY_TOKEN_FILE AWS_ROLE_ARN AWS_ENDPOINT_URL_STS AWS_ROLE_SESSION_NAME
: >"$CONF"
echo "ok: a web identity's keys from STS before the profile's; a bad token, another role refused"

# the instance metadata service (tests run with it disabled)
unset AWS_EC2_METADATA_DISABLED
export AWS_EC2_METADATA_SERVICE_ENDPOINT=$MD
: >"$T/md.log"
refit r4 "$S/v1"
grep -q "^PUT /latest/api/token" "$T/md.log" || fail "no IMDSv2 session token asked for: $(cat "$T/md.log")"
grep -q "^GET /latest/meta-data/iam/security-credentials/dcr-test-role" "$T/md.log" ||
	fail "the role's keys were not fetched: $(cat "$T/md.log")"
expect_fail 128 env AWS_EC2_METADATA_DISABLED=true dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "(the instance metadata service is disabled)"
echo "ok: IMDSv2 keys (session token first); AWS_EC2_METADATA_DISABLED=true honoured"

start_server md1 aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" --v1
AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$PORT
refit r5 "$S/v1"
start_server md4 aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" --put-lost --log "$T/md4.log"
AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$PORT
refit r7 "$S/v1"
grep -q "^GET /latest/meta-data/iam/security-credentials/dcr-test-role" "$T/md4.log" ||
	fail "no IMDSv1 keys after a lost PUT answer: $(cat "$T/md4.log")"
start_server md2 aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" --no-role
expect_fail 128 env AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$PORT dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "the instance has no IAM role"
start_server md3 aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" --bad-json
expect_fail 128 env AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$PORT dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "the instance metadata service answered no JSON object"
expect_fail 128 env AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "or the instance metadata service answer (the instance metadata service: no answer from http://127.0.0.1:1/latest/api/token"
echo "ok: IMDSv1 where PUT is refused or its answer lost; no role, not JSON, nothing listening: one line each"

# refresh: a receiver waiting for the next refit keeps keys that work.
# Keys that expire in 200 s (inside the 300 s before expiry) are asked for
# again at most once a second while dcr-pull --wait polls; keys good for an
# hour are asked for once.
waiting_pull() { # TTL NAME: dcr-pull --wait of v2 while v2 is pushed 3 s later
	start_server "$2" aws-metadata.js --key "$KEY" --secret "$SECRET" --token "$TOK" \
		--ttl "$1" --log "$T/$2.log"
	AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$PORT \
		dcr-pull -q --wait 60 -o "$T/$2.pulled" "$S/$2" 2>"$T/$2.err" &
	wpid=$!
	PIDS="$PIDS $wpid"
	sleep 3
	AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_SESSION_TOKEN=$TOK publish "$S/$2" -s 64K
	wait "$wpid" || fail "dcr-pull --wait exited $?: $(cat "$T/$2.err")"
	receiver "r$2"
	run_ok dcr-apply -q "$T/r$2" "$T/$2.pulled"
	same "$T/r$2" "$T/g/v1"
	FETCHES=$(grep -c "^GET /latest/meta-data/iam/security-credentials/dcr-test-role" "$T/$2.log")
}
waiting_pull 200 soon
[ "$FETCHES" -ge 2 ] || fail "keys 200 s from expiry were fetched $FETCHES times in 3 s of waiting"
waiting_pull 3600 later
[ "$FETCHES" = 1 ] || fail "keys an hour from expiry were fetched $FETCHES times"
echo "ok: keys near expiry asked for again while a receiver waits ($FETCHES fetch an hour out)"
