#!/bin/sh
# HTTPS verifies the server: a self-signed server is refused with a one-line
# certificate error, and accepted with --cacert naming its certificate.
. "$DCR_SRC/tests/lib-store.sh"
need_node
command -v openssl >/dev/null 2>&1 || skip "openssl command not found"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
	-days 2 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1 ||
	skip "openssl cannot make a test certificate"
start_server https http-store.js --tls-cert "$T/cert.pem" --tls-key "$T/key.pem"
U="https://127.0.0.1:$PORT/store"
printf hello >"$T/a"
expect_fail 128 "$TOOL" "$U" put v1/p "$T/a"
contains "$ERR" "cannot PUT '$U/v1/p': "
contains "$ERR" "certificate"
run_ok "$TOOL" --cacert "$T/cert.pem" "$U" put v1/p "$T/a"
run_ok "$TOOL" --cacert "$T/cert.pem" "$U" get v1/p
[ "$(cat "$T/out")" = hello ] || fail "get over https"
echo "ok: https with cacert"
