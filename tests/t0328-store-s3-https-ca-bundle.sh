#!/bin/sh
# S3 over HTTPS with a private CA, as the AWS CLI finds its certificates:
# --cacert, else AWS_CA_BUNDLE, else the profile's ca_bundle. Without any
# the self-signed server is refused with one line naming the certificate.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
command -v openssl >/dev/null 2>&1 || skip "openssl command not found"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
	-days 2 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1 ||
	skip "openssl cannot make a test certificate"
gen 8M 1
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack -s 64K -o "$T/p" "$T/d"
start_s3 s3 --tls-cert "$T/cert.pem" --tls-key "$T/key.pem"
export DCR_S3_ENDPOINT="https://127.0.0.1:$PORT"
S=s3://dcr-test/refits

expect_fail 128 dcr-push -q "$T/p" "$S/v1"
contains "$ERR" "certificate"
run_ok dcr-push -q --cacert "$T/cert.pem" "$T/p" "$S/v1"
echo "ok: a private CA refused, then taken from --cacert"

export AWS_CA_BUNDLE="$T/cert.pem"
refit r1 "$S/v1"
# --cacert before AWS_CA_BUNDLE
export AWS_CA_BUNDLE="$T/no-such.pem"
run_ok dcr-pull -q --cacert "$T/cert.pem" -o "$T/x1" "$S/v1"
expect_fail 128 dcr-pull -q -o "$T/x2" "$S/v1"
unset AWS_CA_BUNDLE
echo "ok: AWS_CA_BUNDLE, after --cacert"

printf '[default]\nca_bundle = %s\n' "$T/cert.pem" >"$AWS_CONFIG_FILE"
refit r2 "$S/v1"
AWS_CA_BUNDLE="$T/no-such.pem"
export AWS_CA_BUNDLE
expect_fail 128 dcr-pull -q -o "$T/x3" "$S/v1"
echo "ok: the profile's ca_bundle, after AWS_CA_BUNDLE"
