#!/bin/sh
# Many producers, one pack, through S3 (s3rver behind the SigV4-checking
# proxy) and through an HTTP store, both on loopback: the four ranks of
# TP=2 x EP=2 (MoE, replicated non-expert weights) push at once while
# the finalizer already waits for their summaries; it writes the manifest
# last, once all four are in, and a receiver that pulls ends bit-identical
# to the canonical target. A receiver that starts with --wait before any
# producer follows the first producer's payloads and finishes on the
# manifest. A relay whose parent is the HTTP store serves the finalized
# pack (payloads of every producer, by the manifest's index table) to two
# receivers, fetching each object from its parent once.
. "$DCR_SRC/tests/lib-producers.sh"
need_node s3rver aws4
cfg=qwen2-moe
pair $cfg
w="$T/w"
ranks $cfg 2 2 "$w"

start_s3 s3 --log "$T/s3.log"
S3EP=$EP
start_server http http-store.js --log "$T/http.log"
HTTP="http://127.0.0.1:$PORT/store"

for kind in s3 http; do
	case $kind in
	s3) S=s3://dcr-test/producers export_ep=1 log="$T/s3.log" pfx=/dcr-test/producers ;;
	http) S=$HTTP export_ep=0 log="$T/http.log" pfx=/store ;;
	esac
	if [ $export_ep = 1 ]; then export DCR_S3_ENDPOINT=$S3EP; else unset DCR_S3_ENDPOINT; fi
	# a receiver waiting before anything is there
	rm -rf "$T/rw-$kind"
	cp -r "$T/$cfg/c0" "$T/rw-$kind"
	{ "$B/dcr-pull" --wait 60 "$S/v1" 2>"$T/wpull-err"; echo $? >"$T/wpull-rc"; } |
		"$B/dcr-apply" -q "$T/rw-$kind" 2>"$T/wapply-err" &
	wpid=$!
	# the finalizer waiting too
	"$B/dcr-push" --finalize --producers $NR --timeout 60 "$S/v1" 2>"$T/fin-err" &
	fpid=$!
	sleep 0.5
	producers "$w" $cfg $NR "$S/v1" -s 4K
	wait $fpid || fail "$kind: finalize exited $?: $(cat "$T/fin-err")"
	contains "$(cat "$T/fin-err")" "target $(cat "$T/$cfg/new-id")"
	last=$(grep '^PUT ' "$log" | tail -n 1)
	contains "$last" "PUT $pfx/v1/manifest.dcrm 2"
	npay=$(grep -c "^PUT $pfx/v1/payload-" "$log") || true
	[ "$npay" -ge 5 ] || fail "$kind: $npay payload PUTs"
	receive $cfg "$S/v1" "r-$kind"
	wait $wpid || fail "$kind: the waiting receiver's apply exited: $(cat "$T/wapply-err")"
	[ "$(cat "$T/wpull-rc")" = 0 ] || fail "$kind: dcr-pull --wait exited $(cat "$T/wpull-rc"): $(cat "$T/wpull-err")"
	"$B/dcr-verify" -q "$T/rw-$kind" --against "$T/$cfg/c1" || fail "$kind: the waiting receiver differs"
	echo "ok $kind"
done

# through a relay
"$B/dcr-relay" --listen 127.0.0.1:0 --port-file "$T/relay.port" "$HTTP" 2>"$T/relay.log" &
PIDS="$PIDS $!"
i=0
while [ ! -s "$T/relay.port" ]; do
	i=$((i + 1))
	[ $i -lt 400 ] || fail "the relay did not start: $(cat "$T/relay.log")"
	sleep 0.05
done
R="http://127.0.0.1:$(cat "$T/relay.port")"
unset DCR_S3_ENDPOINT
gets=$(grep -c '^GET /store/v1/payload-' "$T/http.log") || true
receive $cfg "$R/v1" r-relay1
receive $cfg "$R/v1" r-relay2
np=$(grep -c '^PUT /store/v1/payload-' "$T/http.log") || true
now=$(grep -c '^GET /store/v1/payload-' "$T/http.log") || true
[ $((now - gets)) -le "$np" ] || fail "the relay fetched $((now - gets)) payloads for $np"
echo "ok relay"
exit 0
