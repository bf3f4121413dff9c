#!/bin/sh
# The whole refit through an HTTP store (tests/node/http-store.js on
# loopback): dcr-diff | dcr-pack | dcr-push http://.../v1, then
# dcr-pull | dcr-apply; the receiver ends bit-identical to the new
# checkpoint, and the server saw every payload PUT before the manifest.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node
start_server http http-store.js --log "$T/log"
gen 32M 1
S="http://127.0.0.1:$PORT/store"
publish "$S/v1" -s 64K
n=$(grep -c '^PUT /store/v1/payload-[0-9]*\.dcrp 200' "$T/log") || true
[ "$n" -ge 4 ] || fail "expected several payload PUTs, saw $n"
last=$(grep '^PUT ' "$T/log" | tail -n 1)
contains "$last" "PUT /store/v1/manifest.dcrm 200"

receiver r
snapshot "$T/r" >"$T/snap0"
st pull dcr-pull -q "$S/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
snapshot "$T/r" >"$T/snap1"
cmp -s "$T/snap0" "$T/snap1" && fail "the receiver did not change"
[ "$(grep -c '^GET /store/v1/payload-[0-9]*\.dcrp 200' "$T/log")" = "$n" ] ||
	fail "dcr-pull did not GET each payload once"
exit 0
