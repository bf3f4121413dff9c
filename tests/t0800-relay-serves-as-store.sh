#!/bin/sh
# A relay looks to its children like an http:// store: dcr-pull | dcr-apply
# through it ends bit-identical; each object is fetched from the parent
# once however many children read it; it answers HEAD with the size, byte
# ranges (A-B, A-, -N; 416 past the end) with the parent's bytes, listings
# as its parent does, and passes other objects (not pack members) through
# without caching them; a directory store may be its parent; its log has
# one line per object served and GET /.dcr/status lists what it holds; its
# ranged GETs to the parent are --window long; and SIGTERM stops it with
# status 0.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log"
S="http://127.0.0.1:$PORT/store"
gen_full 4M
publish "$S/v1" -s 1M
run_ok dcr-pull -q -o "$T/p" "$S/v1"
np=$(ls "$T/p" | grep -c '^payload-')
[ "$np" -ge 3 ] || fail "expected several payloads, got $np"

start_relay a "$S"
A=$RURL
APID=$RPID
refit r1 "$A/v1"
# one line per object served, naming it
for f in $(ls "$T/p"); do
	[ "$(grep -c "^dcr-relay: served 'v1/$f': " "$T/a.log")" = 1 ] ||
		fail "no single 'served' line for $f: $(cat "$T/a.log")"
done
gets=$(grep -c '^GET /store/v1/' "$T/log")
refit r2 "$A/v1"
refit r3 --part-size 1M "$A/v1"
[ "$(grep -c '^GET /store/v1/' "$T/log")" = "$gets" ] ||
	fail "the relay fetched v1 from its parent again: $(grep '^GET /store/v1' "$T/log")"
[ "$(status "$A" 'obj("v1/payload-000000.dcrp")["children"]')" -ge 3 ] ||
	fail "the status does not count three children: $(cat "$T/status.json")"
[ "$(status "$A" 'obj("v1/payload-000001.dcrp")["check"] + " " + obj("v1/payload-000001.dcrp")["state"]')" = "pieces done" ] ||
	fail "payload 1 is not held, checked by pieces: $(cat "$T/status.json")"

# HEAD and ranges
f="$T/p/payload-000001.dcrp"
size=$(wc -c <"$f")
curl -sS -f -I "$A/v1/payload-000001.dcrp" >"$T/head" || fail "HEAD failed"
grep -qi "^content-length: $size" "$T/head" || fail "HEAD gave no length $size: $(cat "$T/head")"
for r in 100-1999 "$((size - 10))-" "-77" "0-$((size + 5))"; do
	curl -sS -f -r "$r" -o "$T/range" "$A/v1/payload-000001.dcrp" || fail "GET range $r failed"
	python3 -c '
import sys
b = open(sys.argv[1], "rb").read()
r = sys.argv[2]
a, z = r.split("-")
if a == "":
    want = b[-int(z):]
else:
    want = b[int(a):(int(z) + 1 if z else len(b))]
sys.exit(open(sys.argv[3], "rb").read() != want)' "$f" "$r" "$T/range" ||
		fail "range $r is not the payload's bytes"
done
[ "$(http_code -r "$size-" "$A/v1/payload-000001.dcrp")" = 416 ] || fail "a range past the end is not 416"

# listings, as the parent's
curl -sS -f "$S/?prefix=v1/" | sort >"$T/list.store" || fail "cannot list the store"
curl -sS -f "$A/?prefix=v1/" | sort >"$T/list.relay" || fail "cannot list the relay"
cmp -s "$T/list.store" "$T/list.relay" || fail "listings differ: $(diff "$T/list.store" "$T/list.relay")"
curl -sS -f "$A/v1/?prefix=pay" | sort >"$T/list.sub" || fail "cannot list v1/ at the relay"
[ "$(wc -l <"$T/list.sub")" = "$np" ] || fail "v1/?prefix=pay lists: $(cat "$T/list.sub")"
grep -q '^payload-000000.dcrp$' "$T/list.sub" || fail "v1/ names are not relative: $(cat "$T/list.sub")"

# other objects pass through, never cached
echo one >"$T/ref"
curl -sS -f -T "$T/ref" "$S/refs/policy" || fail "cannot PUT a ref"
[ "$(curl -sS -f "$A/refs/policy")" = one ] || fail "the ref did not pass through"
echo two >"$T/ref"
curl -sS -f -T "$T/ref" "$S/refs/policy" || fail "cannot PUT a ref"
[ "$(curl -sS -f "$A/refs/policy")" = two ] || fail "the relay cached a ref"
[ "$(http_code "$A/refs/nothing")" = 404 ] || fail "an absent object is not 404"
[ "$(http_code "$A/v9/manifest.dcrm")" = 404 ] || fail "an absent pack is not 404"
expect_fail 128 dcr-pull -q "$A/v9"
contains "$ERR" "no pack 'v9'"

# a directory store as the parent
run_ok dcr-push -q "$T/p" "$T/ds/v1"
start_relay d "$T/ds"
refit r4 "$RURL/v1"

# --window: the bytes of each ranged GET to the parent (default 1M), whole
# pieces
publish "$S/w1" -s 4M
run_ok dcr-pull -q -o "$T/pw" "$S/w1"
[ "$(wc -c <"$T/pw/payload-000000.dcrp")" -gt $((2 << 20)) ] || fail "payload 0 of w1 is under 2 MiB"
start_relay w --window 2500K "$S"
WPID=$RPID
refit rw "$RURL/w1"
grep -q "^GET /store/w1/payload-000000.dcrp 206 range=bytes=0-2097151$" "$T/log" ||
	fail "--window 2500K: $(grep 'w1/payload-000000' "$T/log")"
! grep -q "^GET /store/w1/payload-000000.dcrp 206 range=bytes=0-1048575$" "$T/log" ||
	fail "--window 2500K fetched 1 MiB windows"
stop_relay "$WPID"
for bad in 0 2G; do
	rc=0
	timeout 10 dcr-relay --listen 127.0.0.1:0 --window $bad "$S" >/dev/null 2>"$T/err" || rc=$?
	[ $rc = 129 ] || fail "--window $bad: exit $rc"
	grep -q "^dcr-relay: error: bad --window '$bad'" "$T/err" ||
		fail "--window $bad: $(head -n 1 "$T/err")"
done

stop_relay "$APID"
[ "$STOPPED" = 0 ] || fail "SIGTERM: the relay exited $STOPPED: $(tail -3 "$T/a.log")"
exit 0
