#!/bin/sh
# Corruption is caught at the next relay and never passed on. A relay A
# whose cache holds a payload with one bit flipped (after A checked it)
# serves it to a relay B with parents A, then the store: B finds the piece
# that does not match the manifest, refetches from the store from that
# piece's first byte, and its receiver ends bit-identical; a receiver
# pulling from A alone has A check its file again (a fresh request, after
# its check failed), and A fetches the payload again. A receiver pulling
# from a store that serves a corrupt piece however often it is asked
# refuses the pack (one line naming the piece) and is left untouched. A store that serves a corrupt piece once to a relay with
# that one parent: the relay refetches it (its log says so, the store's
# log shows the corrupt GET) and its receiver ends bit-identical.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log"
S="http://127.0.0.1:$PORT/store"
gen_full 4M
publish "$S/v1" -s 2M
start_relay a --cache "$T/ca" "$S"
A=$RURL
run_ok dcr-pull -q -o "$T/p" "$A/v1"
f="$T/ca/v1/payload-000000.dcrp"
[ -f "$f" ] || fail "relay A has no cached $f: $(find "$T/ca")"
size=$(wc -c <"$f")
[ "$size" -gt $((3 << 19)) ] || fail "payload 0 has one piece only ($size bytes)"
# one bit of piece 1, flipped in A's cache
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek((1 << 20) + 99); b = f.read(1); f.seek((1 << 20) + 99); f.write(bytes([b[0] ^ 4]))' "$f" ||
	fail "python3"

start_relay b "$A" "$S"
B=$RURL
refit rb "$B/v1"
grep -q "^dcr-relay: warning: 'v1/payload-000000.dcrp' from '$A': '$A/v1/payload-000000.dcrp': piece 1 does not match the manifest; trying '$S' from byte 1048576$" "$T/b.log" ||
	fail "relay B did not catch piece 1 and refetch it from the store: $(cat "$T/b.log")"
[ "$(status "$B" "obj('v1/payload-000000.dcrp')['from']")" = "$S" ] ||
	fail "B's payload 0 does not come from the store: $(cat "$T/status.json")"
grep -q "^GET /store/v1/payload-000000.dcrp 206 range=bytes=1048576-" "$T/log" ||
	fail "B did not resume at piece 1 at the store: $(grep payload-000000 "$T/log")"

# a receiver pulling from A alone: its check fails, it asks A again with
# Cache-Control: no-cache, and A hashes its file again, finds it damaged
# and fetches the payload again from the store
refit ra "$A/v1"
grep -q "again (its file in the cache was damaged)" "$T/a.log" ||
	fail "relay A did not find its damaged file: $(cat "$T/a.log")"

# a source that serves a corrupt piece however it is asked: the receiver
# refuses the pack (one line naming the piece) and is left untouched
start_server worse http-store.js --log "$T/worse.log" --corrupt-first 1000 --match payload-000000
SW="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$SW/v1"
receiver rw
snapshot "$T/rw" >"$T/snap"
st pull dcr-pull -q "$SW/v1" | st apply dcr-apply -q "$T/rw"
refused pull dcr-pull "does not match the manifest's digest (piece" "$T/rw"
rc_is apply 128
[ "$(grep -c "^GET /store/v1/payload-000000.dcrp .*CORRUPT" "$T/worse.log")" = 2 ] ||
	fail "not asked exactly twice: $(cat "$T/worse.log")"

# a parent that serves one corrupt piece
start_server bad http-store.js --log "$T/bad.log" --corrupt-first 1 --match payload-000001
SB="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$SB/v1"
start_relay c "$SB"
refit rc "$RURL/v1"
grep -q "^GET /store/v1/payload-000001.dcrp 206 .*CORRUPT" "$T/bad.log" ||
	fail "the store corrupted nothing: $(cat "$T/bad.log")"
grep -q "^dcr-relay: warning: 'v1/payload-000001.dcrp' from '$SB': .*does not match the manifest; retrying '$SB' from byte" "$T/c.log" ||
	fail "relay C did not refetch the corrupt piece: $(cat "$T/c.log")"
exit 0
