#!/bin/sh
# Virtual-hosted S3 requests (BUCKET.s3.HOST, as AWS wants for new buckets;
# the default without --endpoint, DCR_S3_ADDRESSING=virtual with one):
# signed, checked by the SigV4 proxy, round trip and listing; the bucket is
# in the host, not the path. curl resolves *.localhost to loopback.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
start_s3 s3 --log "$T/log"
S="s3://dcr-test/runs/r1"
VEP=$(echo "$EP" | sed 's/127\.0\.0\.1/s3.localhost/')
mkdata "$T/small" 100000
export DCR_S3_ADDRESSING=virtual
run_ok "$TOOL" --endpoint "$VEP" "$S" put v1/payload-000000 "$T/small"
run_ok "$TOOL" --endpoint "$VEP" "$S" get v1/payload-000000
cmp "$T/out" "$T/small" || fail "virtual-hosted get returned other bytes"
run_ok "$TOOL" --endpoint "$VEP" "$S" list v1/
[ "$(cat "$T/out")" = v1/payload-000000 ] || fail "list: $(cat "$T/out")"
grep -q '^PUT /runs/r1/v1/payload-000000 200' "$T/log" || fail "bucket not in the host: $(cat "$T/log")"
grep -q '^GET /?list-type=2' "$T/log" || fail "listing not at /: $(cat "$T/log")"
# DCR_S3_ADDRESSING=path: the bucket goes back into the path
export DCR_S3_ADDRESSING=path
run_ok "$TOOL" --endpoint "$EP" "$S" get v1/payload-000000
grep -q '^GET /dcr-test/runs/r1/v1/payload-000000 200' "$T/log" || fail "path style lost"
echo "virtual-hosted and path-style requests both signed and served"
