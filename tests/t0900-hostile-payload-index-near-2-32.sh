#!/bin/sh
# A pack whose payload is numbered 4294967295 (payload-4294967295.dcrp) made
# dcr-apply and dcr-push read and write far out of bounds (SIGSEGV: the room
# for index idx was idx + 64 in 32 bits) before any manifest arrived. Now
# dcr-apply, dcr-push and dcr-pack --list refuse it with one line and exit
# 128; the receiver and the store are untouched. Indices from 2^24 up
# are refused as well; the largest index, 2^24 - 1, costs no memory in
# proportion to its value.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v dcr-push >/dev/null 2>&1 || skip "dcr-push is not built"
H="$DCR_BUILD/tests/hostile"
need_gnu_time

mkdir "$T/r" "$T/store"
$MKST new "$T/r" t:BF16:64
before=$(snapshot "$T/r")
for idx in 4294967295 4294967233 16777216; do
	"$H" index $idx "$T/p.tar" || fail "hostile exited $?"
	run 128 dcr-apply "$T/r" "$T/p.tar"
	one_line_error dcr-apply
	grep -q "payload index $idx is too large" "$T/err" || { cat "$T/err"; fail "apply: no word of the index"; }
	run 128 dcr-push "$T/p.tar" "$T/store/v1"
	one_line_error dcr-push
	grep -q "payload index $idx is too large" "$T/err" || { cat "$T/err"; fail "push: no word of the index"; }
	[ -z "$(ls -A "$T/store")" ] || fail "dcr-push stored something"
	run 128 dcr-pack --list "$T/p.tar"
done
# an index within the bound, alone: memory in proportion to what arrived
"$H" index 16777215 "$T/p.tar"
m=$(peak_rss 128 dcr-apply "$T/r" "$T/p.tar")
grep -q "without a manifest" "$T/err" || { cat "$T/err"; fail "no word of the missing manifest"; }
say "dcr-apply of payload 16777215 (the largest index) alone: $m MiB"
[ "$m" -lt 100 ] || fail "dcr-apply took $m MiB for one payload"
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
