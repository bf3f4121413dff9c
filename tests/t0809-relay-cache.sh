#!/bin/sh
# --cache DIR keeps what passed through: a relay restarted on the same
# cache serves v1 without asking its parent, after re-hashing what it
# reloads (a cached payload with a flipped bit is dropped, and fetched
# again); and --cache-size bounds it: once v2 passes through a cache that
# holds about one pack, v1's objects (the oldest version) are dropped
# first and the cache stays within its size.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log"
S="http://127.0.0.1:$PORT/store"
gen 8M 2
publish "$S/v1" -s 64K
run_ok dcr-pull -q -o "$T/p1" "$S/v1"
st diff dcr-diff "$T/g/v1" "$T/g/v2" | st pack dcr-pack -q -s 64K -o "$T/p2"
rc_is diff 0
rc_is pack 0
run_ok dcr-push -q "$T/p2" "$S/v2"
np=$(ls "$T/p1" | grep -c '^payload-')
[ "$np" -ge 2 ] || fail "v1 has $np payloads, want several"

start_relay a --cache "$T/c" "$S"
refit r1 "$RURL/v1"
stop_relay "$RPID"
[ "$STOPPED" = 0 ] || fail "the relay exited $STOPPED"
[ -f "$T/c/v1/manifest.dcrm" ] || fail "nothing kept in the cache: $(find "$T/c")"
find "$T/c" -name '*.tmp.*' | grep -q . && fail "temporary files left in the cache"

# restarted: v1 from the cache alone
: >"$T/log"
start_relay b --cache "$T/c" "$S"
refit r2 "$RURL/v1"
grep '^GET /store/v1/' "$T/log" && fail "the restarted relay asked its parent for v1"
[ "$(status "$RURL" "obj('v1/payload-000000.dcrp')['state']")" = done ] || fail "payload 0 not held"
stop_relay "$RPID"

# a bit flipped in the cache: dropped at reload, fetched again
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 1]))' \
	"$T/c/v1/payload-000001.dcrp" || fail "python3"
: >"$T/log"
start_relay c --cache "$T/c" "$S"
refit r3 "$RURL/v1"
[ "$(grep -c '^GET /store/v1/' "$T/log")" -ge 1 ] || fail "the bad payload was not fetched again"
grep '^GET /store/v1/' "$T/log" | grep -v payload-000001 && fail "more than the bad payload was fetched"
stop_relay "$RPID"

# bounded: room for about one pack
s1=$(pack_bytes "$T/p1")
s2=$(pack_bytes "$T/p2")
limit=$(( (s1 > s2 ? s1 : s2) + 1000 ))
rm -rf "$T/c"
start_relay d --cache "$T/c" --cache-size "$limit" "$S"
D=$RURL
refit r4 "$D/v1"
receiver r5 1
st pull dcr-pull -q "$D/v2" | st apply dcr-apply -q "$T/r5"
rc_is pull 0
rc_is apply 0
same "$T/r5" "$T/g/v2"
[ "$(status "$D" "d['cache']['bytes']")" -le "$limit" ] || fail "the cache exceeds $limit: $(cat "$T/status.json")"
[ "$(status "$D" "sum(1 for o in d['objects'] if o['name'].startswith('v2/') and o['state'] == 'done')")" = \
	"$(ls "$T/p2" | wc -l)" ] || fail "v2 is not whole in the cache: $(cat "$T/status.json")"
[ "$(status "$D" "sum(1 for o in d['objects'] if o['name'].startswith('v1/payload'))")" -lt "$np" ] ||
	fail "no payload of v1 was dropped: $(cat "$T/status.json")"
du=$(find "$T/c" -type f -exec cat {} + | wc -c)
[ "$du" -le "$limit" ] || fail "the cache directory holds $du bytes, more than $limit"
exit 0
