#!/bin/sh
# Files of a relay's cache removed or cut short under it (a cleaner of
# /tmp, where the default spool lives, or an operator freeing the disk)
# made the relay answer each of those objects with its headers and then
# no body, forever ("transfer closed with N bytes remaining"): the tree
# could not refit that pack again. A finished object whose file has gone,
# or is not its size, is now fetched again from the parents; the relay
# says so in its log and counts it in its status; so is one whose file was
# damaged in place, found so when a child whose check it failed asks
# again with Cache-Control: no-cache. And two relays given
# the same --cache removed each other's objects in flight (a start removes
# every temporary file it finds): a second relay on a cache in use is now
# refused in one line, and the first serves on.
. "$DCR_SRC/tests/lib-relay.sh"
gen 16M 1 --change 0.05
S="$T/store"
publish "$S/v1" -s 64K
start_relay a --cache "$T/cache" "$S"
A=$RURL A_PID=$RPID
refit r1 "$A/v1"
ls "$T/cache/v1"/payload-*.dcrp >/dev/null 2>&1 || fail "nothing cached under $T/cache/v1"

# every file of the pack removed
rm -rf "$T/cache/v1"
refit r2 "$A/v1"
status "$A" 'd["cache"]["lost"]' >"$T/lost"
[ "$(cat "$T/lost")" -gt 0 ] || fail "no object counted lost: $(cat "$T/status.json")"
grep -q "again (its file in the cache had gone)" "$T/a.log" || { cat "$T/a.log"; fail "no word in the log"; }
echo "ok: a pack removed from the cache is fetched again ($(cat "$T/lost") objects)"

# one payload cut short, the manifest emptied
f=$(ls "$T/cache/v1"/payload-*.dcrp | head -1)
truncate -s 100 "$f"
: >"$T/cache/v1/manifest.dcrm"
before=$(cat "$T/lost")
refit r3 "$A/v1"
status "$A" 'd["cache"]["lost"]' >"$T/lost"
[ "$(cat "$T/lost")" -ge $((before + 2)) ] || fail "the files cut short were not fetched again: $(cat "$T/status.json")"
echo "ok: files cut short are fetched again"

# a payload's file damaged in place, its size kept (a disk's damage, a
# hand under the relay): its bytes fail every child's check, and each
# child asks once more with Cache-Control: no-cache, on which the relay
# hashes its file again, finds it bad and fetches the payload again
f=$(ls "$T/cache/v1"/payload-*.dcrp | head -1)
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 0x40]))' "$f"
refit r5 "$A/v1"
status "$A" 'd["cache"]["damaged"]' >"$T/damaged"
[ "$(cat "$T/damaged")" = 1 ] || fail "no object counted damaged: $(cat "$T/status.json")"
grep -q "again (its file in the cache was damaged)" "$T/a.log" || { cat "$T/a.log"; fail "no word of the damage in the log"; }
cmp -s "$f" "$S/v1/$(basename "$f")" || fail "the damaged file was not replaced"
grep -q "its file in the cache is damaged (a child asked again, no-cache); fetching it again" "$T/a.log" ||
	fail "no warning of the damage when found: $(cat "$T/a.log")"
# a fresh request for a file that checks out: served, and said (what lies
# between relay and child is then to blame)
g=$(ls "$T/cache/v1"/payload-*.dcrp | tail -1)
curl -sS -f -H "Cache-Control: max-age=0, no-cache" -o "$T/g.out" "$A/v1/$(basename "$g")" ||
	fail "a fresh GET of an intact payload failed"
cmp -s "$T/g.out" "$S/v1/$(basename "$g")" || fail "a fresh GET got other bytes"
grep -q "'v1/$(basename "$g")': a child asked again (no-cache), and its file in the cache checks out" "$T/a.log" ||
	fail "no word of the intact file: $(cat "$T/a.log")"
echo "ok: a payload damaged in the cache is checked again on a fresh request and fetched again"
# one level down: relay b under a, a's copy damaged again; b's fetch
# fails the check and asks a again, fresh; then b's own copy damaged, and
# a whole-payload pull (-o DIR) from b asks b again, fresh
start_relay b --cache "$T/cache-b" "$A"
B=$RURL B_PID=$RPID
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(300); b = f.read(1); f.seek(300); f.write(bytes([b[0] ^ 0x40]))' "$f"
refit r6 "$B/v1"
status "$A" 'd["cache"]["damaged"]' >"$T/damaged"
[ "$(cat "$T/damaged")" = 2 ] || fail "a did not count the second damage: $(cat "$T/status.json")"
fb="$T/cache-b/v1/$(basename "$f")"
[ -f "$fb" ] || fail "b did not cache $fb"
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 0x40]))' "$fb"
dcr-pull -q -o "$T/pd" "$B/v1" 2>"$T/pd.err" || fail "dcr-pull -o from b exited $?: $(cat "$T/pd.err")"
cmp -s "$T/pd/$(basename "$f")" "$S/v1/$(basename "$f")" || fail "the pull -o got other bytes"
status "$B" 'd["cache"]["damaged"]' >"$T/damaged"
[ "$(cat "$T/damaged")" = 1 ] || fail "b did not count its damage: $(cat "$T/status.json")"
# b's manifest damaged: the child's check of it fails, it asks b again,
# fresh, and b finds its manifest's file damaged and fetches it again
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(60); b = f.read(1); f.seek(60); f.write(bytes([b[0] ^ 0x40]))' "$T/cache-b/v1/manifest.dcrm"
refit r7 "$B/v1"
status "$B" 'd["cache"]["damaged"]' >"$T/damaged"
[ "$(cat "$T/damaged")" = 2 ] || fail "b did not count its damaged manifest: $(cat "$T/status.json")"
cmp -s "$T/cache-b/v1/manifest.dcrm" "$S/v1/manifest.dcrm" || fail "b's manifest was not fetched again"
stop_relay "$B_PID"
echo "ok: and through a relay under it, for a whole-payload pull and for a manifest"
# a second relay on the same cache
set +e
dcr-relay --listen 127.0.0.1:0 --cache "$T/cache" "$S" 2>"$T/b.err" &
B_PID=$!
i=0
while kill -0 "$B_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill "$B_PID" 2>/dev/null
wait "$B_PID"
rc=$?
set -e
[ "$rc" = 128 ] || { cat "$T/b.err"; fail "a second relay on the cache exited $rc, not 128"; }
[ "$(wc -l <"$T/b.err")" = 1 ] && grep -q "^dcr-relay: error: cache '.*' is in use" "$T/b.err" ||
	{ cat "$T/b.err"; fail "no one-line word of the cache in use"; }
refit r4 "$A/v1"
echo "ok: a second relay on the cache is refused, the first serves on"
stop_relay "$A_PID"
[ "$STOPPED" = 0 ] || fail "the relay exited $STOPPED"
