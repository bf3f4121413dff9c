#!/bin/sh
# Files of a relay's cache removed or cut short under it (a cleaner of
# /tmp, where the default spool lives, or an operator freeing the disk)
# made the relay answer each of those objects with its headers and then
# no body, forever ("transfer closed with N bytes remaining"): the tree
# could not refit that pack again. A finished object whose file has gone,
# or is not its size, is now fetched again from the parents; the relay
# says so in its log and counts it in its status. And two relays given
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
