#!/bin/sh
# put-if-absent on S3 sends "If-None-Match: *": a server that honours it
# refuses the second create (exit 3) and keeps the first; a server that
# ignores it (s3rver alone) is detected and reported in one line instead of
# silently overwriting.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
printf one >"$T/f1"
printf two >"$T/f2"
start_s3 cas --cas
S="s3://dcr-test/c"
run_ok "$TOOL" --endpoint "$EP" "$S" put-if-absent refs/main "$T/f1"
expect_fail 3 "$TOOL" --endpoint "$EP" "$S" put-if-absent refs/main "$T/f2"
contains "$ERR" "cannot create 's3://dcr-test/c/refs/main': it already exists (412 PreconditionFailed"
run_ok "$TOOL" --endpoint "$EP" "$S" get refs/main
[ "$(cat "$T/out")" = one ] || fail "overwritten"
run_ok "$TOOL" --endpoint "$EP" "$S" list ""
[ "$(cat "$T/out")" = refs/main ] || fail "probe left behind: $(cat "$T/out")"

start_s3 plain
run_ok "$TOOL" --endpoint "$EP" "$S" put refs/main "$T/f1"
expect_fail 128 "$TOOL" --endpoint "$EP" "$S" put-if-absent refs/main "$T/f2"
contains "$ERR" "cannot create 's3://dcr-test/c/refs/main' only if absent: the server at '$EP' ignores If-None-Match"
run_ok "$TOOL" --endpoint "$EP" "$S" get refs/main
[ "$(cat "$T/out")" = one ] || fail "overwritten"
echo "ok: s3 put-if-absent"
