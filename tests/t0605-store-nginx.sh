#!/bin/sh
# A store served by nginx, a server nobody here wrote: WebDAV PUT and
# DELETE for dcr-push, GET and HEAD with Range for dcr-pull, and no
# listing (nginx answers 403 for a directory without an index, 404 under
# a directory that is not there yet). dcr-push writes what a directory
# store holds; dcr-pull in Range parts, several at once, ends
# bit-identical, over HTTP/1.1 and over HTTP/2 with TLS; dcr-pull --wait follows a push that starts after it, both
# under a directory nginx refuses to list and under one not yet made (a
# listing refused used to end the wait at once: "the server does not
# list"); a wait for a version that never comes gives up with one line.
# The joint commit, which needs listings and a PUT that honours
# If-None-Match (nginx overwrites), is refused in one line before it writes.
. "$DCR_SRC/tests/lib-xfer.sh"
command -v nginx >/dev/null 2>&1 || skip "nginx is missing (scripts/install-deps installs it)"
command -v curl >/dev/null 2>&1 || skip "curl is missing"

# nginx_up: nginx on a free loopback port serving $T/www; sets URL
nginx_up() {
	mkdir -p "$T/ng/tmp" "$T/www"
	user=
	[ "$(id -u)" != 0 ] || user="user root;"
	tries=0
	while :; do
		tries=$((tries + 1))
		[ $tries -le 20 ] || fail "nginx did not start: $(cat "$T/ng/error.log")"
		set -- $(python3 -c 'import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
		port=$1 tport=$2
		cat >"$T/ng/nginx.conf" <<EOF
$user
worker_processes 1;
pid $T/ng/nginx.pid;
events { worker_connections 64; }
http {
	log_format dcr '\$request_method \$uri \$status \$http_range \$server_protocol';
	access_log $T/ng/access.log dcr;
	client_body_temp_path $T/ng/tmp;
	proxy_temp_path $T/ng/tmp;
	fastcgi_temp_path $T/ng/tmp;
	uwsgi_temp_path $T/ng/tmp;
	scgi_temp_path $T/ng/tmp;
	server {
		listen 127.0.0.1:$port;
		root $T/www;
		client_max_body_size 0;
		dav_methods PUT DELETE;
		create_full_put_path on;
	}
	server {
		listen 127.0.0.1:$tport ssl http2;
		ssl_certificate $T/cert.pem;
		ssl_certificate_key $T/key.pem;
		root $T/www;
		client_max_body_size 0;
		dav_methods PUT DELETE;
		create_full_put_path on;
	}
}
EOF
		nginx -p "$T/ng" -e "$T/ng/error.log" -c "$T/ng/nginx.conf" -g 'daemon off;' 2>>"$T/ng/error.log" &
		ngpid=$!
		i=0
		while kill -0 $ngpid 2>/dev/null; do
			if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
				PIDS="$PIDS $ngpid"
				URL="http://127.0.0.1:$port"
				TURL="https://127.0.0.1:$tport"
				return 0
			fi
			i=$((i + 1))
			[ $i -lt 200 ] || { kill $ngpid; fail "nginx did not answer in 10 s"; }
			sleep 0.05
		done
		wait $ngpid 2>/dev/null || true # the port was taken: another one
	done
}
command -v openssl >/dev/null 2>&1 || skip "openssl command not found"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
	-days 2 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1 ||
	skip "openssl cannot make a test certificate"
nginx_up

gen 16M 1

# push: what a directory store holds, object for object
run_ok dcr-diff -o "$T/delta" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack -q -s 32K -o "$T/pack" "$T/delta"
run_ok dcr-push -q "$T/pack" "$URL/pol/v1"
run_ok dcr-push -q "$T/pack" "$T/dirstore/pol/v1"
np=$(ls "$T/www/pol/v1" | grep -c '^payload-') || true
[ "$np" -ge 3 ] || fail "expected several payloads, nginx holds $np"
diff -r "$T/www/pol/v1" "$T/dirstore/pol/v1" >/dev/null ||
	fail "what dcr-push PUT to nginx differs from the directory store's copy"
echo "ok: dcr-push through WebDAV PUT: $np payloads and the manifest, as a directory store holds them"

# pull whole, and in Range parts with several in flight
refit r1 "$URL/pol/v1"
refit r2 -j 4 --part-size 16K "$URL/pol/v1"
grep -q '^GET /pol/v1/payload-000000.dcrp 206 bytes=' "$T/ng/access.log" ||
	fail "no payload was fetched in Range parts: $(grep '^GET' "$T/ng/access.log" | head -5)"
echo "ok: dcr-pull whole and in Range parts (206) from nginx"

# HTTP/2 over TLS (what curl and nginx agree on by ALPN): push and pull in parts
run_ok dcr-push -q --cacert "$T/cert.pem" "$T/pack" "$TURL/h2/v1"
diff -r "$T/www/h2/v1" "$T/dirstore/pol/v1" >/dev/null || fail "what dcr-push PUT over HTTP/2 differs"
refit r3 --cacert "$T/cert.pem" -j 4 --part-size 16K "$TURL/h2/v1"
grep -q '^GET /h2/v1/payload-000000.dcrp 206 bytes=.* HTTP/2.0$' "$T/ng/access.log" ||
	fail "no ranged GET over HTTP/2: $(grep '/h2/' "$T/ng/access.log" | head -3)"
echo "ok: dcr-push and dcr-pull in parts over HTTP/2 with TLS"

# follow_late_push WHERE SOURCE...: dcr-pull --wait from SOURCE... into
# a fresh receiver rw, the push to $URL/WHERE starting a second after it
follow_late_push() {
	_where=$1
	shift
	receiver rw
	(
		sleep 1
		dcr-diff "$T/g/v0" "$T/g/v1" | dcr-pack --linger 0 -s 32K | dcr-push -q - "$URL/$_where"
	) 2>"$T/latepush.err" &
	late=$!
	st pull dcr-pull -q --wait 60 "$@" | st apply dcr-apply -q "$T/rw"
	wait $late || fail "the late push to $_where failed: $(cat "$T/latepush.err")"
	rc_is pull 0
	rc_is apply 0
	same "$T/rw" "$T/g/v1"
}

# --wait, the push starting after the pull: under /pol/, which nginx
# refuses to list (403), and under /fresh/, which is not there (404)
for where in pol/v2 fresh/v1; do
	follow_late_push "$where" "$URL/$where"
	st=$(grep "^GET /${where%/*}/ " "$T/ng/access.log" | awk '{print $3}' | sort -u | tr '\n' ' ')
	echo "ok: dcr-pull --wait followed a later push to $where (listing answered $st)"
done

# sixty-five sources, none of which lists: each is asked once, then the
# pull waits for the manifest (a mask of 64 bits remembered only the first
# 64 refusals, and the 65th's ended the wait at once)
set --
for i in $(seq 65); do set -- "$@" "$URL/pol/v3"; done
follow_late_push pol/v3 "$@"
echo "ok: dcr-pull --wait from 65 sources that do not list followed a later push"

# a version that never comes: one line after the wait, the receiver untouched
receiver r4
snapshot "$T/r4" >"$T/snap4"
st pull dcr-pull --wait 2 "$URL/pol/v9" | st apply dcr-apply -q "$T/r4"
rc_is pull 128
one_line pull dcr-pull
contains "$ERR" "no manifest for 'v9'"
untouched "$T/r4" "$T/snap4"
echo "ok: dcr-pull --wait for a version that never comes gives up with one line"

# the joint commit needs listings and a conditional PUT, which nginx does
# not give: refused in one line, nothing written
if command -v dcr-commit >/dev/null 2>&1; then
	expect_fail 128 dcr-commit --store "$URL" --policy pp --version 0 --expect 0 \
		--state "$(dcr-verify "$T/g/v0")"
	contains "$ERR" "does not list"
	contains "$ERR" "dcr-push(1)"
	[ ! -e "$T/www/pp" ] || fail "dcr-commit wrote to a store it cannot commit on: $(find "$T/www/pp")"
	echo "ok: dcr-commit --store on nginx refused before it writes"
fi
