#!/bin/sh
# A pack behind redirects, as packs on a CDN or at a moved path are served
# (tests/redirect-server.py, standard library only): dcr-pull | dcr-apply
# follows a 302 to another origin and a relative 301, ends bit-identical
# to the new checkpoint, and sends the URL's password to the origin named
# in the store URL only; from an https store it follows https and
# refuses a step down to http. What it refuses, each with one line and
# the receiver untouched: a redirect loop (stopped after 8), a redirect to
# file:// (only http and https are followed), and an upload (dcr-push)
# answered with a redirect, whose message names where it points without
# the query a presigned URL's signature would sit in, or a password.
. "$DCR_SRC/tests/lib-xfer.sh"

# serve NAME: tests/redirect-server.py over $T/www, its port in NAME_PORT
serve() {
	start_py "$1" redirect-server.py "$T/www"
	eval "$1_PORT=$PORT"
}

gen 8M 1
publish "$T/www/pol/v1" -s 64K
serve front
serve origin
A="http://127.0.0.1:$front_PORT"

# to another origin, with credentials that must stay with the first
refit r1 "http://u:secret@127.0.0.1:$front_PORT/to/$origin_PORT/pol/v1"
grep -q "^GET /to/$origin_PORT/pol/v1/manifest.dcrm Basic " "$T/front.log" ||
	fail "the front server never saw the credentials: $(head -3 "$T/front.log")"
grep -q "^GET /pol/v1/payload-000000.dcrp" "$T/origin.log" ||
	fail "no payload was fetched from the origin: $(head -3 "$T/origin.log")"
if grep -q "Basic" "$T/origin.log"; then
	fail "the credentials were sent on to another origin: $(grep Basic "$T/origin.log" | head -1)"
fi

# a relative 301 on the same server, with payloads fetched in parts
refit r2 --part-size 16K "$A/moved/pol/v1"
grep -q "^GET /pol/v1/payload-000000.dcrp" "$T/front.log" || fail "/moved/ was not followed"

# refusals: the receiver stays as it was
receiver r3
snapshot "$T/r3" >"$T/snap3"
for bad in loop file; do
	st pull dcr-pull -q --retries 1 "$A/$bad/pol/v1" | st apply dcr-apply -q "$T/r3"
	rc_is pull 128
	one_line pull dcr-pull
	case $bad in
	loop) contains "$ERR" "redirects followed (a redirect loop?)" ;;
	file) contains "$ERR" "follows redirects to http and https only" ;;
	esac
	[ "$(cat "$T/apply.rc")" != 0 ] || fail "dcr-apply took an empty stream"
	untouched "$T/r3" "$T/snap3"
	echo "refused ($bad): $ERR"
done

# from https: a relative redirect stays https and is followed; one to
# plain http is refused
if command -v openssl >/dev/null 2>&1 &&
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
		-days 2 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1; then
	start_py tls redirect-server.py "$T/www" --tls "$T/cert.pem" "$T/key.pem"
	S="https://127.0.0.1:$PORT"
	refit r4 --cacert "$T/cert.pem" "$S/moved/pol/v1"
	st pull dcr-pull -q --retries 1 --cacert "$T/cert.pem" "$S/to/$origin_PORT/pol/v1" |
		st apply dcr-apply -q "$T/r3"
	rc_is pull 128
	one_line pull dcr-pull
	contains "$ERR" "https only from an https store"
	untouched "$T/r3" "$T/snap3"
	echo "refused (https to http): $ERR"
else
	echo "skipped the https cases: openssl cannot make a test certificate"
fi

# an upload is never redirected: one line naming where, no query
for via in moved sig cred; do
	dcr-diff "$T/g/v0" "$T/g/v1" | dcr-pack -s 64K -o "$T/p-$via"
	expect_fail 128 dcr-push -q --retries 1 "$T/p-$via" "$A/$via/pol/v2"
	contains "$ERR" "redirects to '"
	contains "$ERR" "/pol/v2/payload-000000.dcrp'"
	case $ERR in *SECRET* | *Signature*) fail "the Location's query or password was printed: $ERR" ;; esac
	echo "refused (push, $via): $ERR"
done
[ ! -e "$T/www/pol/v2" ] || fail "the push left pol/v2"
echo "ok: dcr-pull follows redirects to http(s) origins, keeps credentials, refuses loops, file://, https to http and redirected uploads"
