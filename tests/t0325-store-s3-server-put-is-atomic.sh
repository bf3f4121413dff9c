#!/bin/sh
# The test S3 server's PUT is atomic, as S3's is: while an object is being
# uploaded (slowly, straight to s3rver) no GET answers 200 with less than
# the whole object, and no listing shows it before it is whole. s3rver
# alone wrote into the object's file in place, so a reader polling for a
# new object (dcr-pull --wait) could get a torn one in a well-formed answer.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
command -v curl >/dev/null 2>&1 || skip "curl not found"
start_s3 atomic --direct-port-file "$T/direct.port"
D="http://127.0.0.1:$(cat "$T/direct.port")/dcr-test"
size=3145728
mkdata "$T/big" $size
curl -sS -f --limit-rate 1M -T "$T/big" "$D/p/obj" >"$T/put.out" 2>&1 &
up=$!
polls=0 during=0
while kill -0 $up 2>/dev/null; do
	polls=$((polls + 1))
	code=$(curl -s -o "$T/got" -w '%{http_code}' "$D/p/obj") || code=err
	if [ "$code" = 200 ]; then
		got=$(wc -c <"$T/got")
		[ "$got" = $size ] || fail "GET during the upload answered 200 with $got of $size bytes"
	elif kill -0 $up 2>/dev/null; then
		during=$((during + 1))
	fi
	curl -s -o "$T/list" "$D?list-type=2&prefix=p/" || true
	if grep -q '<Key>p/obj</Key>' "$T/list" && kill -0 $up 2>/dev/null; then
		code=$(curl -s -o "$T/got" -w '%{http_code}' "$D/p/obj") || code=err
		[ "$code" != 200 ] || [ "$(wc -c <"$T/got")" = $size ] ||
			fail "listed during the upload, and GET gave $(wc -c <"$T/got") of $size bytes"
	fi
	sleep 0.1
done
wait $up || fail "the upload failed: $(cat "$T/put.out")"
[ $during -ge 5 ] || fail "only $during of $polls polls fell inside the upload: nothing was tested"
curl -sS -f -o "$T/got" "$D/p/obj" || fail "GET after the upload failed"
cmp -s "$T/got" "$T/big" || fail "the object differs from what was uploaded"
ls "$T/atomic.data/dcr-test/p" | grep -q uploading && fail "a temporary file was left: $(ls "$T/atomic.data/dcr-test/p")"
echo "ok: s3 test server: PUT is atomic ($during polls during the upload)"
