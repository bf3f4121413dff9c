#!/bin/sh
# dcr-pull --wait started before the push: it follows payloads as they
# appear and finishes once the manifest is stored. The push is held half
# way (a gate in front of dcr-pack); through the directory store dcr-pull -o
# must have delivered payload 0 while the manifest is still absent, and
# through HTTP and S3 (pull | apply) the server's log must show payload 0
# fetched before the manifest was PUT. Every receiver ends bit-identical.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
gen 32M 1 --change 0.6
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
total=$(wc -c <"$T/out")
pass=$((total / 4))
[ $((total - pass)) -gt $((2 << 20)) ] || fail "delta is $total bytes: too small to hold back"

# directory store, pull into a directory
S="$T/store"
dcr-pull -q --wait 60 -o "$T/pulled" "$S/v1" 2>"$T/pull.err" &
pullpid=$!
PIDS="$PIDS $pullpid"
gated_publish "$S/v1" "$pass" -s 64K
wait_for "$T/pulled/payload-000000.dcrp" "dcr-pull delivered payload 0"
[ ! -e "$S/v1/manifest.dcrm" ] || fail "the manifest was stored before the gate opened"
proc_running "$pullpid" || fail "dcr-pull ended without a manifest: $(cat "$T/pull.err")"
open_gate
wait_published
wait "$pullpid" || fail "dcr-pull --wait exited $?: $(cat "$T/pull.err")"
receiver r1
run_ok dcr-apply -q "$T/r1" "$T/pulled"
same "$T/r1" "$T/g/v1"

# follow_remote STORE LOGPATH-PREFIX: pull --wait | apply before a held push
follow_remote() {
	receiver r2
	: >"$T/log"
	rm -f "$T/pulled.fifo"
	mkfifo "$T/pulled.fifo"
	dcr-pull -q --wait 60 "$1/v1" >"$T/pulled.fifo" 2>"$T/pull.err" &
	rxpid=$!
	dcr-apply -q "$T/r2" <"$T/pulled.fifo" 2>"$T/apply.err" &
	applypid=$!
	PIDS="$PIDS $rxpid $applypid"
	gated_publish "$1/v1" "$pass" -s 64K
	i=0
	until grep -q "^GET $2/v1/payload-000000.dcrp 200" "$T/log"; do
		kill -0 "$rxpid" 2>/dev/null || fail "dcr-pull ended early: $(cat "$T/pull.err")"
		i=$((i + 1))
		[ $i -lt 3000 ] || fail "dcr-pull did not fetch payload 0 in 60 s"
		sleep 0.02
	done
	grep -q "manifest.dcrm 200" "$T/log" && fail "a manifest was seen before the gate opened"
	open_gate
	wait_published
	wait "$rxpid" || fail "dcr-pull --wait exited $?: $(cat "$T/pull.err")"
	wait "$applypid" || fail "dcr-apply exited $?: $(cat "$T/apply.err")"
	same "$T/r2" "$T/g/v1"
	g=$(grep -n "^GET $2/v1/payload-000000.dcrp 200" "$T/log" | head -n 1 | cut -d: -f1)
	m=$(grep -n "^PUT $2/v1/manifest.dcrm 200" "$T/log" | cut -d: -f1)
	[ -n "$m" ] && [ "$g" -lt "$m" ] || fail "payload 0 was not fetched before the manifest was PUT"
}

start_server http http-store.js --log "$T/log"
follow_remote "http://127.0.0.1:$PORT/store" /store

# a store that stays still is listed about five times a second (naps of
# 200 ms; after a round that fetched payloads, 25 ms doubling to 200):
# waiting 3 s for a pack that never comes lists it 20 times at most
: >"$T/log"
rc=0
dcr-pull -q --wait 3 "http://127.0.0.1:$PORT/store/never" >/dev/null 2>"$T/pull.err" || rc=$?
[ "$rc" = 128 ] || fail "dcr-pull --wait of a pack that never comes exited $rc: $(cat "$T/pull.err")"
lists=$(grep -c '^GET /store/?prefix=never' "$T/log" || true)
[ "$lists" -ge 3 ] && [ "$lists" -le 20 ] ||
	fail "waiting 3 s for a still store listed it $lists times (3 to 20 expected)"
echo "a still store: listed $lists times in a 3 s wait"

start_s3 s3 --log "$T/log"
export DCR_S3_ENDPOINT="$EP"
follow_remote s3://dcr-test/refits /dcr-test/refits
