#!/bin/sh
# The whole refit through an HTTP store (tests/node/http-store.js on
# loopback): dcr-diff | dcr-pack | dcr-push http://.../v1, then
# dcr-pull | dcr-apply; the receiver ends bit-identical to the new
# checkpoint, and the server saw every payload PUT before the manifest and
# every payload byte GET once. Then payloads of several parts
# (--part-size 4M; verified streaming: ranged GETs checked piece by
# piece): exact, read once; a part size that is no whole number of pieces
# rounds down to one; and a corrupt byte in a later part stops the pull with one line
# naming the object and the piece, after earlier parts went out, and
# dcr-apply leaves the receiver untouched.
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
run_ok dcr-pull -q -o "$T/pp" "$S/v1"
: >"$T/log"
run_ok dcr-pull -q "$S/v1"
[ "$(grep -c '^GET /store/v1/payload-' "$T/log")" = "$n" ] ||
	fail "dcr-pull did not GET each payload once: $(cat "$T/log")"
tiled "$T/log" /store/v1 "$T/pp"

# big payloads: two unrelated checkpoints, so that every value changes
rm -rf "$T/g"
gen 16M 0
mv "$T/g/v0" "$T/a"
gen 16M 0 --seed 2
mv "$T/g/v0" "$T/g/v1"
mv "$T/a" "$T/g/v0"
publish "$S/v2" -s 32M
run_ok dcr-pull -q -o "$T/p2" "$S/v2"
big=$(wc -c <"$T/p2/payload-000000.dcrp")
[ "$big" -gt $((9 << 20)) ] || fail "payload 0 is only $big bytes"
: >"$T/log"
refit r2 --part-size 4M "$S/v2"
[ "$(grep -c '^GET /store/v2/payload-000000.dcrp 206' "$T/log")" -ge 3 ] ||
	fail "payload 0 did not come in parts: $(cat "$T/log")"
tiled "$T/log" /store/v2 "$T/p2"
: >"$T/log"
run_ok dcr-pull -q --part-size 1500K "$S/v2"
grep -q '^GET /store/v2/payload-000000.dcrp 206 range=bytes=0-1048575$' "$T/log" ||
	fail "--part-size 1500K did not make 1 MiB parts: $(head -3 "$T/log")"
tiled "$T/log" /store/v2 "$T/p2"
rc=0
dcr-pull --part-size 0 "$S/v2" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 129 ] || fail "--part-size 0 exited $rc, want 129"

# one byte off in piece 9 (the third part) of payload 0
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[(9 << 20) + 5] ^= 1; open(sys.argv[2], "wb").write(b)' \
	"$T/p2/payload-000000.dcrp" "$T/bad" || fail "python3"
curl -sS -f -T "$T/bad" "$S/v2/payload-000000.dcrp" || fail "cannot replace payload 0"
expect_fail 128 dcr-pull -q --part-size 4M "$S/v2"
contains "$ERR" "$S/v2/payload-000000.dcrp"
contains "$ERR" "does not match the manifest's digest (piece 9)"
[ "$(wc -c <"$T/out")" -ge $((8 << 20)) ] || fail "the parts before the bad one did not go out"
receiver r3
snapshot "$T/r3" >"$T/snap"
st pull dcr-pull -q --part-size 4M "$S/v2" | st apply dcr-apply -q "$T/r3"
rc_is pull 128
rc_is apply 128
one_line apply dcr-apply
untouched "$T/r3" "$T/snap"

# a name pushed again with fewer payloads: the earlier payloads, listed
# before the push, are deleted before the manifest; on a server that
# refuses DELETE (403) they stay, and the push still succeeds (best
# effort), the name pulled as the new pack
for deny in none DELETE; do
	start_server h$deny http-store.js --deny $deny --log "$T/log-$deny"
	H="http://127.0.0.1:$PORT/store"
	publish "$H/v1" -s 64K
	publish "$H/v1" -s 64M
	nd=$(grep -c '^DELETE /store/v1/payload-[0-9]*\.dcrp 204' "$T/log-$deny") || true
	if [ $deny = none ]; then
		[ "$nd" -ge 3 ] || fail "expected the earlier payloads deleted, saw $nd DELETEs"
	else
		[ "$nd" = 0 ] || fail "$nd DELETEs succeeded on a server that denies them"
		[ "$(grep -c '^DELETE /store/v1/payload-[0-9]*\.dcrp 403' "$T/log-$deny")" -ge 3 ] ||
			fail "the push did not try to delete the earlier payloads"
	fi
	contains "$(grep '^PUT ' "$T/log-$deny" | tail -n 1)" "PUT /store/v1/manifest.dcrm 200"
	refit r4 "$H/v1"
done

# a policy whose refs the key may not read (a server that answers 403):
# the push of a version and the pull of it go on, since neither can tell
# whether it is committed; the push says so, the pull (which a receiver
# runs every step) does not
start_server hrefs http-store.js --deny-match '/refs/' --log "$T/log-refs"
H="http://127.0.0.1:$PORT/store"
gen-checkpoint -q --size 256K --steps 1 "$T/g3" || fail "gen-checkpoint exited $?"
run_ok dcr-diff "$T/g3/v0" "$T/g3/v1" -o "$T/d3"
run_ok dcr-pack -o "$T/p3" "$T/d3"
run_ok dcr-push "$T/p3" "$H/pol/v1"
contains "$(cat "$T/err")" "warning: cannot tell whether '$H/pol' has committed version 1"
grep -q '^GET /store/pol/refs/v1 403' "$T/log-refs" || fail "the push did not ask for the ref"
run_ok dcr-pull "$H/pol/v1" -o "$T/p3-pulled"
[ ! -s "$T/err" ] || fail "the pull said: $(cat "$T/err")"
[ "$(grep -c '^GET /store/pol/refs/v1 403' "$T/log-refs")" = 2 ] || fail "the pull did not ask for the ref"
exit 0
