#!/bin/sh
# A machine whose clock is off (a container without NTP, a VM resumed from
# a snapshot) signs S3 requests with the wrong time, and S3 refuses any
# more than 15 minutes off with 403 RequestTimeTooSkewed; the AWS SDKs
# then sign again on the server's clock, which every answer's Date tells.
# So does dcr: against a server whose clock runs 2 hours ahead (and one 3
# hours behind), PUT, multipart, GET, HEAD (whose refusal has no body to
# name the cause), listing and delete all work, each refused request
# signed again at once, not counted as a failed attempt (--retries 0);
# once learnt, the offset signs every later request of the store. A
# server whose answers have no usable Date still fails, in one line that
# names the clock.
. "$DCR_SRC/tests/lib-store.sh"
need_node s3rver aws4
S="s3://dcr-test/c"
mkdata "$T/small" 100000
mkdata "$T/big" 11000000
for off in 7200 -10800; do
	start_s3 "skew$off" --clock-offset "$off" --log "$T/log$off"
	P="--endpoint $EP --retries 0 --part-size 5242880 --multipart-threshold 5242880"
	run_ok "$TOOL" $P "$S" put v1/a "$T/small"
	run_ok "$TOOL" $P "$S" put-file v1/b "$T/big"
	run_ok "$TOOL" $P "$S" get v1/a
	cmp "$T/out" "$T/small" || fail "get differs (offset $off)"
	run_ok "$TOOL" $P "$S" get-fd v1/b
	cmp "$T/out" "$T/big" || fail "multipart get differs (offset $off)"
	run_ok "$TOOL" $P "$S" stat v1/a
	[ "$(cat "$T/out")" = 100000 ] || fail "stat: $(cat "$T/out")"
	run_ok "$TOOL" $P "$S" list v1/
	[ "$(wc -l <"$T/out")" = 2 ] || fail "list: $(cat "$T/out")"
	run_ok "$TOOL" $P "$S" delete v1/a
	# each command's first request was refused and signed again once,
	# the command's later ones (multipart's parts) never
	n=$(grep -c ' 403' "$T/log$off" || true)
	[ "$n" = 7 ] || { cat "$T/log$off"; fail "$n requests refused for their time, not 7 (offset $off)"; }
done
echo "ok: a clock 2 h behind and 3 h ahead: every operation signs again on the server's clock"

# the same skew through the commands: a dense pack of a real file pushed
# and pulled whole
f="$DCR_SRC/tests/data/safetensors/valid/mlp-f32.safetensors"
run_ok dcr-diff --dense "$f" -o "$T/d"
run_ok dcr-pack -o "$T/p" "$T/d"
run_ok dcr-push --endpoint "$EP" --retries 0 "$T/p" "$S/v2"
run_ok dcr-pull --endpoint "$EP" --retries 0 -o "$T/q" "$S/v2"
for x in "$T"/p/*; do
	cmp "$x" "$T/q/$(basename "$x")" || fail "pulled $(basename "$x") differs"
done
echo "ok: dcr-push and dcr-pull through the skewed server"

# a skewed server whose answers carry no Date: one line naming the clock
start_s3 nodate --clock-offset 7200 --no-date
expect_fail 128 "$TOOL" --endpoint "$EP" --retries 0 "$S" get v1/b
contains "$ERR" "RequestTimeTooSkewed"
contains "$ERR" "this machine's clock is more than S3's 15 minutes off the server's, and the answer had no Date to correct it by: set it right, with NTP"
