#!/bin/sh
# dcr-relay --apply CKPT --pack NAME: a relay that is also a receiver. One
# started before the push (--wait) applies the pack when it appears, and
# its receiver ends bit-identical while a child refits through it; the
# receiver's applied record names the version (dcr-commit can bind it).
# A receiver at another base refuses (one line, the checkpoint untouched)
# and the relay keeps serving; it exits 1 when stopped. --pack alone
# fetches the pack before any child asks.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log"
S="http://127.0.0.1:$PORT/store"
gen 8M 2
receiver ra
start_relay a --apply "$T/ra" --pack v1 --wait 60 "$S"
APID=$RPID
A=$RURL
publish "$S/v1"
i=0
until grep -q "^dcr-relay: applied 'v1' to '$T/ra'" "$T/a.log"; do
	kill -0 "$APID" 2>/dev/null || fail "the relay exited: $(cat "$T/a.log")"
	i=$((i + 1))
	[ $i -lt 1200 ] || fail "--apply did not finish in 60 s: $(cat "$T/a.log")"
	sleep 0.05
done
same "$T/ra" "$T/g/v1"
[ -s "$T/ra/.dcr/applied" ] || fail "no applied record in the receiver"
grep -q "^version 1$" "$T/ra/.dcr/applied" || fail "the applied record does not name version 1: $(cat "$T/ra/.dcr/applied")"
refit r1 "$A/v1"
stop_relay "$APID"
[ "$STOPPED" = 0 ] || fail "the relay exited $STOPPED: $(cat "$T/a.log")"

# a receiver at another base
receiver rb 2
snapshot "$T/rb" >"$T/snap"
start_relay b --apply "$T/rb" --pack v1 "$S"
BPID=$RPID
await_line "$T/b.log" "^dcr-relay: error: cannot apply 'v1' to '$T/rb'" "the refusal did not come"
untouched "$T/rb" "$T/snap"
refit r2 "$RURL/v1"
stop_relay "$BPID"
[ "$STOPPED" = 1 ] || fail "a relay whose receiver refused exited $STOPPED, want 1"

# --pack alone warms the relay
: >"$T/log"
start_relay c --pack v1 "$S"
CPID=$RPID
await_line "$T/c.log" "^dcr-relay: fetched 'v1'" "--pack did not fetch v1"
n=$(grep -c '^GET /store/v1/' "$T/log")
[ "$n" -ge 2 ] || fail "--pack fetched nothing from the store: $(cat "$T/log")"
refit r3 "$RURL/v1"
[ "$(grep -c '^GET /store/v1/' "$T/log")" = "$n" ] || fail "a child's refit went to the store again"
stop_relay "$CPID"
[ "$STOPPED" = 0 ] || fail "the relay exited $STOPPED"
exit 0
