#!/bin/sh
# A 132 KB payload whose zstd body declares and holds 4 GiB of raw records
# took 4.2 GB in dcr-apply and dcr-pack --list (the body was decompressed
# whole). Records are now read a window at a time: both stay under 200 MiB
# while they walk all 4 GiB, and the receiver is untouched; dcr-push, which
# does not decompress, stays small too.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v dcr-push >/dev/null 2>&1 || skip "dcr-push is not built"
need_gnu_time
"$DCR_BUILD/tests/hostile" bomb "$T/bomb.tar" 2>/dev/null || fail "hostile exited $?"
sz=$(wc -c <"$T/bomb.tar")
[ "$sz" -lt 200000 ] || fail "the bomb is $sz bytes"
mkdir "$T/r" "$T/store"
$MKST new "$T/r" t:BF16:64
before=$(snapshot "$T/r")

m=$(peak_rss 128 dcr-apply "$T/r" "$T/bomb.tar")
grep -q "without a manifest" "$T/err" || { cat "$T/err"; fail "apply: no word of the missing manifest"; }
say "dcr-apply: $m MiB"
[ "$m" -lt 200 ] || fail "dcr-apply took $m MiB for a 132 KB payload"
m=$(peak_rss 0 dcr-pack --list "$T/bomb.tar")
grep -q "raw 4294967296" "$T/out" || { cat "$T/out"; fail "the listing does not show the raw size"; }
say "dcr-pack --list: $m MiB"
[ "$m" -lt 200 ] || fail "dcr-pack --list took $m MiB for a 132 KB payload"
m=$(peak_rss 128 dcr-push "$T/bomb.tar" "$T/store/v1")
say "dcr-push: $m MiB"
[ "$m" -lt 200 ] || fail "dcr-push took $m MiB for a 132 KB payload"
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
