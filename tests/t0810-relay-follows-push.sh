#!/bin/sh
# dcr-pull --wait through a relay, started before the push: the relay
# passes listings through and serves payloads that appear before their
# manifest, each checked whole against its own trailer before a byte of
# it goes out (status: check "whole"); the push is held half way and the
# store's log shows payload 0 fetched by the relay before the manifest was
# PUT; once the manifest is stored the pull finishes and the receiver is
# bit-identical.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log"
S="http://127.0.0.1:$PORT/store"
gen 32M 1 --change 0.6
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
total=$(wc -c <"$T/out")
pass=$((total / 4))
[ $((total - pass)) -gt $((2 << 20)) ] || fail "delta is $total bytes: too small to hold back"
start_relay a "$S"
A=$RURL
receiver r
rm -f "$T/pulled.fifo"
mkfifo "$T/pulled.fifo"
dcr-pull -q --wait 60 "$A/v1" >"$T/pulled.fifo" 2>"$T/pull.err" &
rxpid=$!
dcr-apply -q "$T/r" <"$T/pulled.fifo" 2>"$T/apply.err" &
applypid=$!
PIDS="$PIDS $rxpid $applypid"
gated_publish "$S/v1" "$pass" -s 64K
i=0
until grep -q "^GET /store/v1/payload-000000.dcrp 20[06]" "$T/log"; do
	kill -0 "$rxpid" 2>/dev/null || fail "dcr-pull ended early: $(cat "$T/pull.err")"
	i=$((i + 1))
	[ $i -lt 3000 ] || fail "the relay did not fetch payload 0 in 60 s"
	sleep 0.02
done
grep -q "manifest.dcrm 200" "$T/log" && fail "a manifest was seen before the gate opened"
[ "$(status "$A" "obj('v1/payload-000000.dcrp')['check']")" = whole ] ||
	fail "payload 0 is not checked whole: $(cat "$T/status.json")"
open_gate
wait_published
wait "$rxpid" || fail "dcr-pull --wait exited $?: $(cat "$T/pull.err")"
wait "$applypid" || fail "dcr-apply exited $?: $(cat "$T/apply.err")"
same "$T/r" "$T/g/v1"
refit r2 "$A/v1"
exit 0
