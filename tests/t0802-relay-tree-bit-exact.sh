#!/bin/sh
# A tree of 7 relays (depth 3, fan-out 2, scripts/relay-tree) under an HTTP
# store: a delta pushed at the store reaches every leaf's receiver
# (dcr-pull | dcr-apply, four at once) bit-identical to the dense target
# (dcr-verify --against), and so does a relay below a leaf that applies
# it to its own receiver (--apply) while serving a child of its own; every
# relay fetched each object once.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log"
S="http://127.0.0.1:$PORT/store"
gen_full 4M
tree_start --depth 3 --fanout 2 "$S"
[ "$(wc -l <"$T/tree/relays")" = 7 ] || fail "the tree has not 7 relays: $(cat "$T/tree/relays")"
[ "$(wc -l <"$T/leaves")" = 4 ] || fail "the tree has not 4 leaves: $(cat "$T/leaves")"
publish "$S/v1" -s 1M
run_ok dcr-pull -q -o "$T/p" "$S/v1"
n=0
for leaf in $(cat "$T/leaves"); do
	n=$((n + 1))
	refit_bg "r$n" "$leaf/v1"
done
refit_done r1 r2 r3 r4
# a receiver that is a relay, below the first leaf, with a child of its own
receiver ra
start_relay ap --apply "$T/ra" --pack v1 "$(head -n 1 "$T/leaves")"
AP=$RPID
refit r5 "$RURL/v1"
await_line "$T/ap.log" "^dcr-relay: applied 'v1' to '$T/ra'" "--apply did not finish"
same "$T/ra" "$T/g/v1"
stop_relay "$AP"
[ "$STOPPED" = 0 ] || fail "the --apply relay exited $STOPPED: $(cat "$T/ap.log")"
# every relay fetched each object once
for url in $(awk '{ print $2 }' "$T/tree/relays"); do
	for f in $(ls "$T/p"); do
		k=$(status "$url" "sum(1 for o in d['objects'] if o['name'] == 'v1/$f' and o['state'] == 'done')")
		[ "$k" = 1 ] || fail "$url does not hold v1/$f: $(cat "$T/status.json")"
	done
	[ "$(status "$url" "d['bytes_fetched']")" = "$(pack_bytes "$T/p")" ] ||
		fail "$url fetched more than the pack: $(cat "$T/status.json")"
done
exit 0
