#!/bin/sh
# A manifest that arrives while a payload is being fetched whole (asked
# for before its manifest existed) still judges it: a parent that serves
# another pack's payload as A's payload 0 (it checks out by its own
# trailer) gets it neither served nor cached under A's name, before or
# after the relay holds A's manifest (tests/relay-hostile.py race).
. "$DCR_SRC/tests/lib-relay.sh"
D="$T/hs"
gen 1M 2
run_ok dcr-diff -o "$T/d1" "$T/g/v0" "$T/g/v1"
run_ok dcr-diff -o "$T/d2" "$T/g/v1" "$T/g/v2"
run_ok dcr-pack -o "$D/A" "$T/d1"
run_ok dcr-pack -o "$D/B" "$T/d2"
cmp -s "$D/A/payload-000000.dcrp" "$D/B/payload-000000.dcrp" && fail "packs A and B share payload 0"
start_py hs relay-hostile.py race "$D"
start_relay a --no-prefetch "http://127.0.0.1:$PORT/store"
A=$RURL

# payload 0 first: the manifest is absent, the fetch waits at the parent
curl -sS -o "$T/first" -w '%{http_code}' "$A/A/payload-000000.dcrp" >"$T/first.code" 2>"$T/first.err" &
C1=$!
PIDS="$PIDS $C1"
await_line "$T/hs.log" "^GET /store/A/payload-000000.dcrp WAIT" "the relay did not ask for payload 0"
# then the manifest, while the payload is in flight
[ "$(http_code "$A/A/manifest.dcrm")" = 200 ] || fail "A's manifest is not 200: $(cat "$T/body")"
touch "$D/release"
wait "$C1" || true
code=$(cat "$T/first.code")
if [ "$code" = 200 ] && cmp -s "$T/first" "$D/B/payload-000000.dcrp"; then
	fail "the relay served B's payload as A's, its manifest in hand"
fi
for try in 1 2; do
	code=$(http_code "$A/A/payload-000000.dcrp")
	[ "$code" != 200 ] || fail "A's payload 0 (try $try) is 200 from a parent serving B's"
done
[ "$(status "$A" "sum(1 for o in d['objects'] if o['state'] == 'done' and o['name'] != 'A/manifest.dcrm')")" = 0 ] ||
	fail "the relay holds a payload it did not check against A's manifest: $(cat "$T/status.json")"
grep -q "does not match the manifest" "$T/a.log" ||
	fail "the relay's log does not say why: $(cat "$T/a.log")"
exit 0
