#!/bin/sh
# The S3 store against s3rver behind a proxy that checks every SigV4
# signature with the npm aws4 package: round trips, multipart uploads (from
# memory and from a file, parts in parallel), ranges, ListObjectsV2 with
# continuation, parallel transfers, and NoSuchKey -> exit 2 naming the object.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
start_s3 s3 --log "$T/log"
S="s3://dcr-test/runs/r1"
P="--endpoint $EP --part-size 5242880 --multipart-threshold 5242880"
mkdata "$T/small" 100000
mkdata "$T/big" 12000000
run_ok "$TOOL" $P "$S" put v1/payload-000000 "$T/small"
run_ok "$TOOL" $P "$S" get v1/payload-000000
cmp "$T/out" "$T/small" || fail "get returned other bytes"
grep -q '^PUT /dcr-test/runs/r1/v1/payload-000000 200' "$T/log" || fail "no plain PUT: $(cat "$T/log")"
# multipart, file: 12 MB in 5 MiB parts = 3 parts
run_ok "$TOOL" $P "$S" put-file v1/payload-000001 "$T/big"
[ "$(grep -c '^PUT /dcr-test/runs/r1/v1/payload-000001?partNumber=[123]&uploadId=[^ ]* 200' "$T/log")" = 3 ] ||
	fail "expected 3 parts: $(cat "$T/log")"
grep -q '^POST /dcr-test/runs/r1/v1/payload-000001?uploads= 200' "$T/log" || fail "no multipart initiate"
grep -q '^POST /dcr-test/runs/r1/v1/payload-000001?uploadId=[^ ]* 200' "$T/log" || fail "no multipart complete"
run_ok "$TOOL" $P "$S" get-fd v1/payload-000001
cmp "$T/out" "$T/big" || fail "multipart object differs"
# single PUT streamed from a file (hashed in a first pass)
run_ok "$TOOL" $P "$S" put-file v3/from-file "$T/small"
run_ok "$TOOL" $P "$S" get v3/from-file
cmp "$T/out" "$T/small" || fail "single PUT from a file differs"
# multipart, memory
run_ok "$TOOL" $P "$S" put v1/payload-000002 "$T/big"
run_ok "$TOOL" $P "$S" get v1/payload-000002
cmp "$T/out" "$T/big" || fail "multipart (memory) object differs"
run_ok "$TOOL" $P "$S" stat v1/payload-000002
[ "$(cat "$T/out")" = 12000000 ] || fail "stat: $(cat "$T/out")"
run_ok "$TOOL" $P "$S" get-range v1/payload-000002 5242000 2000
tail -c +5242001 "$T/big" | head -c 2000 >"$T/want"
cmp "$T/out" "$T/want" || fail "get-range differs"
# a name that needs escaping in the path and the signature
run_ok "$TOOL" $P "$S" put 'v1/odd name+$=&.x' "$T/small"
run_ok "$TOOL" $P "$S" get 'v1/odd name+$=&.x'
cmp "$T/out" "$T/small" || fail "odd name differs"
# listing with continuation: 2 keys a page
run_ok "$TOOL" $P --list-page 2 "$S" list v1/
printf 'v1/odd name+$=&.x\nv1/payload-000000\nv1/payload-000001\nv1/payload-000002\n' >"$T/want"
cmp "$T/out" "$T/want" || fail "list: $(cat "$T/out")"
[ "$(grep -c '^GET /dcr-test?list-type=2&max-keys=2&prefix=runs%2Fr1%2Fv1%2F.*continuation-token=' "$T/log")" = 1 ] ||
	fail "expected one continued page: $(grep list-type "$T/log")"
run_ok "$TOOL" $P "$S" list v1/payload-00000
[ "$(wc -l <"$T/out")" = 3 ] || fail "partial prefix: $(cat "$T/out")"
expect_fail 2 "$TOOL" $P "$S" get v1/missing
contains "$ERR" "cannot GET 's3://dcr-test/runs/r1/v1/missing': 404 NoSuchKey: "
expect_fail 2 "$TOOL" $P "$S" stat v1/missing
contains "$ERR" "cannot HEAD 's3://dcr-test/runs/r1/v1/missing': 404"
run_ok "$TOOL" $P "$S" delete 'v1/odd name+$=&.x'
expect_fail 2 "$TOOL" $P "$S" get 'v1/odd name+$=&.x'
# parallel transfers; DCR_S3_ENDPOINT instead of --endpoint
DCR_S3_ENDPOINT=$EP run_ok "$TOOL" --parallel 8 "$S" put-many v2/p- 48 30000
DCR_S3_ENDPOINT=$EP run_ok "$TOOL" --parallel 8 "$S" get-many v2/p- 48 30000
expect_fail 128 "$TOOL" $P s3://no-such-bucket/x list ""
contains "$ERR" "NoSuchBucket"
echo "ok: s3 store"
