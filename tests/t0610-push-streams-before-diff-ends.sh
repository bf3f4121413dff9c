#!/bin/sh
# Streaming end to end: payload 0 is in the store while dcr-diff is still
# running. dcr-diff writes into a gate that passes the first quarter of the
# delta and then holds the rest until the test lets it go; the delta is far
# larger than a pipe's buffer, so dcr-diff cannot finish while the gate
# holds. The test waits (no fixed sleep) for payload-000000.dcrp to appear
# in the store, checks dcr-diff is alive and the manifest absent, then opens
# the gate; the pipeline must finish and the receiver end bit-identical.
. "$DCR_SRC/tests/lib-xfer.sh"
gen 32M 1 --change 0.6
S="$T/store"
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
total=$(wc -c <"$T/out")
pass=$((total / 4))
# the pipe buffer is 64 KiB by default, 1 MiB at most (pipe-max-size)
[ $((total - pass)) -gt $((2 << 20)) ] || fail "delta is $total bytes: too small to hold dcr-diff back"
[ "$pass" -gt $((256 << 10)) ] || fail "the gate would not pass a whole payload"

gated_publish "$S/v1" "$pass" -s 64K
wait_for "$S/v1/payload-000000.dcrp" "payload 0 reached the store"
proc_running "$DIFFPID" || fail "dcr-diff had finished when payload 0 appeared"
[ ! -e "$S/v1/manifest.dcrm" ] || fail "the manifest was stored before dcr-diff finished"
echo "payload 0 stored while dcr-diff was running; $pass of $total delta bytes let through"

open_gate
wait_published
[ -f "$S/v1/manifest.dcrm" ] || fail "no manifest after the pipeline"
refit r "$S/v1"
