#!/bin/sh
# dcr-pull URL1/NAME URL2/NAME...: several sources of one pack. A source
# that refuses connections, lacks the pack, serves a corrupt piece, or
# cuts a body short hands over to the next, and the refit is exact; after
# a corrupt piece the same source is asked once more, fresh, and then the
# next only from the last corrupt piece on (its log shows the range
# starting there), not from zero. A corrupt manifest
# at the first source is passed over too. When every source fails,
# dcr-pull gives up with one line and the receiver is untouched.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server good http-store.js --log "$T/good.log"
G="http://127.0.0.1:$PORT/store"
gen_full 4M
publish "$G/v1" -s 4M
run_ok dcr-pull -q -o "$T/p" "$G/v1"
size=$(wc -c <"$T/p/payload-000000.dcrp")
[ "$size" -gt $((2 << 20)) ] || fail "payload 0 is only $size bytes"
half=$(((size / 2) >> 20 << 20)) # the piece the middle byte is in

# refused connections, and an empty store
refit r1 --retries 0 "http://127.0.0.1:1/store/v1" "$G/v1"
start_server empty http-store.js
refit r2 --retries 0 "http://127.0.0.1:$PORT/store/v1" "$G/v1"

# a corrupt piece in the middle of payload 0, twice: the source is asked
# once more, fresh (Cache-Control: no-cache, for a relay's sake), from
# that piece on, and serves another corrupt piece, in the middle of what
# it was asked for; the next source is asked from that one on
start_server bad http-store.js --log "$T/bad.log" --corrupt-first 2 --match payload-000000
B="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$B/v1"
: >"$T/good.log"
refit r3 "$B/v1" "$G/v1"
[ "$(grep -c "^GET /store/v1/payload-000000.dcrp 206 .*CORRUPT" "$T/bad.log")" = 2 ] ||
	fail "the bad store did not corrupt two GETs: $(cat "$T/bad.log")"
grep -q "^GET /store/v1/payload-000000.dcrp 206 range=bytes=$half-.*CORRUPT" "$T/bad.log" ||
	fail "the source was not asked again from byte $half: $(cat "$T/bad.log")"
second=$(((half + ((size - half) >> 1)) >> 20 << 20))
grep -q "^GET /store/v1/payload-000000.dcrp 206 range=bytes=$second-" "$T/good.log" ||
	fail "the pull did not resume at byte $second: $(cat "$T/good.log")"
grep "^GET /store/v1/payload-000000.dcrp 206 range=bytes=0-" "$T/good.log" &&
	fail "the pull fetched payload 0 from zero again"

# a body cut short, no retries at that source: the next one serves it
# (from the last piece the store's hasher saw whole: with the store's
# ranged GETs that is often the part's start, see dcr-pull(1))
start_server cut http-store.js --log "$T/cut.log" --always-cut --match payload-000000
C="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$C/v1"
: >"$T/good.log"
refit r4 --retries 0 "$C/v1" "$G/v1"
grep -q "^GET /store/v1/payload-000000.dcrp 206 .*CUT" "$T/cut.log" ||
	fail "the cutting store cut nothing: $(cat "$T/cut.log")"
grep -q "^GET /store/v1/payload-000000.dcrp 206 " "$T/good.log" ||
	fail "payload 0 did not come from the next source: $(cat "$T/good.log")"

# a corrupt manifest at the first source
start_server m http-store.js
M="http://127.0.0.1:$PORT/store"
run_ok dcr-push -q "$T/p" "$M/v1"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[40] ^= 1; open(sys.argv[2], "wb").write(b)' \
	"$T/p/manifest.dcrm" "$T/badman" || fail "python3"
curl -sS -f -T "$T/badman" "$M/v1/manifest.dcrm" || fail "cannot replace the manifest"
refit r5 "$M/v1" "$G/v1"

# every source bad
receiver r6
snapshot "$T/r6" >"$T/snap"
st pull dcr-pull -q --retries 0 "$C/v1" "http://127.0.0.1:1/store/v1" | st apply dcr-apply -q "$T/r6"
rc_is pull 128
one_line pull dcr-pull
rc_is apply 128
untouched "$T/r6" "$T/snap"
exit 0
