#!/bin/sh
# An HTTP store behind a bearer token (an API gateway, an artifact server):
# DCR_HTTP_TOKEN_FILE, else DCR_HTTP_TOKEN, goes as "Authorization: Bearer
# TOKEN" with every request; without it the server's 401 is one line, the
# receiver untouched. A URL's user and password win over the token. A
# download redirected to another origin does not carry the token there.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node
unset DCR_HTTP_TOKEN DCR_HTTP_TOKEN_FILE
gen 8M 1
start_server hs http-store.js --bearer 's3cr3t.token-value' --log "$T/hs.log"
S="http://127.0.0.1:$PORT/store"

st diff dcr-diff "$T/g/v0" "$T/g/v1" | st pack dcr-pack --linger 0 -s 64K | st push dcr-push -q - "$S/v1"
rc_is push 128
one_line push dcr-push
contains "$ERR" "401"
echo "ok: no token, one line"

printf 's3cr3t.token-value\n' >"$T/token"
export DCR_HTTP_TOKEN_FILE="$T/token"
publish "$S/v1" -s 64K
refit r1 "$S/v1"
unset DCR_HTTP_TOKEN_FILE
export DCR_HTTP_TOKEN='s3cr3t.token-value'
refit r2 "$S/v1"
echo "ok: the token from DCR_HTTP_TOKEN_FILE, then DCR_HTTP_TOKEN: push, pull, apply"

receiver r3
snapshot "$T/r3" >"$T/r3.snap"
export DCR_HTTP_TOKEN=wrong
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r3"
rc_is pull 128
one_line pull dcr-pull
contains "$ERR" "401"
untouched "$T/r3" "$T/r3.snap"
export DCR_HTTP_TOKEN='two words'
expect_fail 128 dcr-pull -q -o "$T/x" "$S/v1"
contains "$ERR" "the bearer token (DCR_HTTP_TOKEN) is empty or holds white space"
# the URL's user and password win (this server wants the token: 401)
export DCR_HTTP_TOKEN='s3cr3t.token-value'
expect_fail 128 dcr-pull -q -o "$T/x" "http://u:p@127.0.0.1:$PORT/store/v1"
contains "$ERR" "401"
echo "ok: a wrong token refused, the receiver untouched; a malformed token; the URL's user first"

# redirected to another origin: the token stays with the store's host
mkdir -p "$T/www/pol"
run_ok dcr-pull -q -o "$T/www/pol/v1" "$S/v1"
start_py front redirect-server.py "$T/www"
front=$PORT
start_py origin redirect-server.py "$T/www"
origin=$PORT
refit r4 "http://127.0.0.1:$front/to/$origin/pol/v1"
grep -q "Bearer" "$T/front.log" || fail "the store's host never saw the token: $(head -3 "$T/front.log")"
! grep -q "Bearer" "$T/origin.log" || fail "the token went to another origin: $(grep Bearer "$T/origin.log" | head -1)"
echo "ok: the token sent to the store's host only"
