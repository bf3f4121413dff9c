#!/bin/sh
# dcr-pull --wait against a store whose PUT is not atomic (s3rver's own,
# --torn-puts: an object is listed and served, 200 and all, while its file
# fills): a payload listed before it is whole does not check out, and is
# fetched again until it does (within the wait). The payloads go up slowly,
# straight to s3rver, one after the other, then the manifest, which a GET
# meets torn too and asks for again in the next round; the pull ends with
# every entry byte-identical to the pack's and the receiver at the target.
# The server's log must show a payload and the manifest fetched again, so
# the case was met. A payload that never checks out (one bit flipped on every GET)
# is fetched again 8 times at most, then the pull fails in one line, long
# before its wait ends: a bad store costs a few copies, not one every
# 200 ms of the wait. A manifest that never checks out is asked for again
# for 10 s, then refused in one line.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
command -v curl >/dev/null 2>&1 || skip "curl not found"
gen 4M 1 --change 0.6
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 128K -o "$T/p" "$T/d"
np=$(ls "$T/p" | grep -c '^payload-')
[ "$np" -ge 3 ] || fail "the pack has $np payloads: too few"
start_s3 torn --torn-puts --direct-port-file "$T/direct.port" --log "$T/log"
export DCR_S3_ENDPOINT="$EP"
D="http://127.0.0.1:$(cat "$T/direct.port")/dcr-test/r/v1"
dcr-pull -q --wait 60 -o "$T/pulled" s3://dcr-test/r/v1 2>"$T/pull.err" &
pullpid=$!
PIDS="$PIDS $pullpid"
for f in $(ls "$T/p" | grep '^payload-' | sort) $(ls "$T/p" | grep -v '^payload-' | sort -r); do
	if [ "$f" = manifest.dcrm ]; then
		# a few KB, less than curl's first write: half, a pause, the
		# rest, so that a GET meets it torn
		len=$(wc -c <"$T/p/$f")
		{ head -c $((len / 2)) "$T/p/$f"; sleep 2; tail -c +$((len / 2 + 1)) "$T/p/$f"; } |
			curl -sS -f -H "Content-Length: $len" -H "Transfer-Encoding:" -T - "$D/$f" >/dev/null 2>"$T/put.err" ||
			fail "PUT $f failed: $(cat "$T/put.err")"
		continue
	fi
	curl -sS -f --limit-rate 96K -T "$T/p/$f" "$D/$f" >/dev/null 2>"$T/put.err" ||
		fail "PUT $f failed: $(cat "$T/put.err")"
done
wait "$pullpid" || fail "dcr-pull --wait exited $?: $(cat "$T/pull.err")"
for f in $(ls "$T/p"); do
	cmp -s "$T/p/$f" "$T/pulled/$f" || fail "pulled $f differs from the pack's"
done
receiver r1
run_ok dcr-apply -q "$T/r1" "$T/pulled"
same "$T/r1" "$T/g/v1"
# the log: "GET URL 200" lines carry no length; count the payload GETs
gets=$(grep -c '^GET .*/payload-.* 200' "$T/log" || true)
[ "$gets" -gt "$np" ] || fail "$gets payload GETs for $np payloads: no payload was fetched again, nothing was tested"
mgets=$(grep -c '^GET .*/manifest.dcrm 200' "$T/log" || true)
[ "$mgets" -gt 1 ] || fail "the manifest was fetched $mgets times: never met torn, nothing was tested"

start_s3 bad --corrupt-first 1000 --match 'payload-000001|r2/v1/manifest' --direct-port-file "$T/bad.direct" \
	--log "$T/badlog"
export DCR_S3_ENDPOINT="$EP"
D="http://127.0.0.1:$(cat "$T/bad.direct")/dcr-test/r/v1"
for f in $(ls "$T/p" | grep '^payload-' | sort); do
	curl -sS -f -T "$T/p/$f" "$D/$f" >/dev/null 2>"$T/put.err" || fail "PUT $f failed: $(cat "$T/put.err")"
done
t0=$(date +%s)
expect_fail 128 dcr-pull -q --wait 60 -o "$T/pulled2" s3://dcr-test/r/v1
t1=$(date +%s)
contains "$ERR" "payload-000001"
bad=$(grep -c '^GET .*/payload-000001.dcrp 200' "$T/badlog" || true)
[ "$bad" -ge 2 ] && [ "$bad" -le 9 ] || fail "the bad payload was fetched $bad times, want 2 to 9"
[ $((t1 - t0)) -lt 40 ] || fail "the pull took $((t1 - t0)) s to give up on a bad payload"
# a manifest that never checks out: asked for again for 10 s, then refused
curl -sS -f -T "$T/p/manifest.dcrm" "${D%/r/v1}/r2/v1/manifest.dcrm" >/dev/null 2>"$T/put.err" ||
	fail "PUT of the manifest failed: $(cat "$T/put.err")"
t0=$(date +%s)
expect_fail 128 dcr-pull -q --wait 60 -o "$T/pulled3" s3://dcr-test/r2/v1
t1=$(date +%s)
contains "$ERR" "manifest.dcrm"
[ $((t1 - t0)) -ge 8 ] && [ $((t1 - t0)) -lt 30 ] ||
	fail "the pull gave up on a bad manifest after $((t1 - t0)) s, want about 10"
echo "ok: pull --wait through torn PUTs ($gets GETs for $np payloads, $mgets of the manifest); a bad one fetched $bad times"
