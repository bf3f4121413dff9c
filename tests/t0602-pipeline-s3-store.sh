#!/bin/sh
# The whole refit through S3: s3rver on loopback behind the proxy that checks
# every request's SigV4 signature with the npm aws4 package. dcr-push sends
# every payload, then the manifest last; dcr-pull | dcr-apply ends with a
# receiver bit-identical to the new checkpoint, with the endpoint from
# DCR_S3_ENDPOINT or --endpoint. (Multipart uploads, used above 128 MiB,
# are proven by the store tests, t0320.)
. "$DCR_SRC/tests/lib-xfer.sh"
need_node s3rver aws4
start_s3 s3 --log "$T/log"
export DCR_S3_ENDPOINT="$EP"
gen 32M 1
S=s3://dcr-test/refits
publish "$S/v1" -s 64K
n=$(grep -c '^PUT /dcr-test/refits/v1/payload-[0-9]*\.dcrp 200' "$T/log") || true
[ "$n" -ge 4 ] || fail "expected several payload PUTs, saw $n"
grep -q '^PUT /dcr-test/refits/v1/manifest.dcrm 200' "$T/log" || fail "no manifest PUT in the log"
last=$(grep '^PUT ' "$T/log" | tail -n 1)
contains "$last" "PUT /dcr-test/refits/v1/manifest.dcrm 200"

refit r "$S/v1"

# and with the endpoint as an option instead of the environment
unset DCR_S3_ENDPOINT
refit r2 --endpoint "$EP" "$S/v1"

# the name pushed again with fewer payloads: what the earlier push left is
# listed before the new one writes, and its extra payloads are deleted
# before the manifest goes up, last
export DCR_S3_ENDPOINT="$EP"
publish "$S/v1" -s 64M
nd=$(grep -c '^DELETE /dcr-test/refits/v1/payload-[0-9]*\.dcrp 204' "$T/log") || true
[ "$nd" = $((n - 1)) ] || fail "expected $((n - 1)) payload DELETEs, saw $nd: $(grep '^DELETE' "$T/log")"
last=$(grep '^PUT ' "$T/log" | tail -n 1)
contains "$last" "PUT /dcr-test/refits/v1/manifest.dcrm 200"
refit r3 "$S/v1"

# once the store has committed v1, a push of another step under its name is
# refused before anything is written (refs/v1 read over S3: a missing one
# is NoSuchKey), the same step again is nothing to push, and --force
# replaces the pack
# (the ref written as dcr-commit writes one: s3rver ignores If-None-Match,
# so dcr-commit refuses to commit there)
printf 'dcr-ref 1\nversion 1\nstate %s\ncommitter 00\n' "$(dcr-verify "$T/g/v1")" >"$T/ref"
run_ok "$TOOL" --endpoint "$EP" s3://dcr-test put refits/refs/v1 "$T/ref"
dcr-diff "$T/g/v1" "$T/g/v0" | dcr-pack -o "$T/other"
n0=$(wc -l <"$T/log")
expect_fail 1 dcr-push -q "$T/other" "$S/v1"
grep -q "has committed version 1" "$T/err" || fail "unclear refusal: $(cat "$T/err")"
tail -n +$((n0 + 1)) "$T/log" >"$T/log.new"
grep -q '^GET /dcr-test/refits/refs/v1 200' "$T/log.new" || fail "refs/v1 not read: $(cat "$T/log.new")"
! grep -q '^PUT \|^DELETE ' "$T/log.new" || fail "a refused push wrote: $(cat "$T/log.new")"
# the same step again (a rerun pipeline): nothing to push, exit 0, nothing
# written; the manifest's head read with a range GET
n0=$(wc -l <"$T/log")
dcr-diff "$T/g/v0" "$T/g/v1" | dcr-pack | dcr-push - "$S/v1" 2>"$T/err" ||
	fail "the same step pushed again: $(cat "$T/err")"
grep -q "nothing pushed" "$T/err" || fail "no word of the step there: $(cat "$T/err")"
tail -n +$((n0 + 1)) "$T/log" >"$T/log.new"
! grep -q '^PUT \|^DELETE ' "$T/log.new" || fail "a push of the same step wrote: $(cat "$T/log.new")"
dcr-diff "$T/g/v0" "$T/g/v1" | dcr-pack -o "$T/again"
run_ok dcr-push -q --force "$T/again" "$S/v1"
refit r4 "$S/v1"
