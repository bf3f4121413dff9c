#!/bin/sh
# A delta names at most 2^20 tensors (TENSOR and REMOVE records together;
# a manifest the same, and a payload). Every reader keeps each tensor it
# is told of, a few hundred bytes apiece, so 118 MB of small TENSOR records
# naming 2 million took dcr-apply 617 MB, dcr-pack 1.2 GB and dcr-pack
# --list 648 MB before they found anything wrong, and a larger stream
# more, without bound. Now the record past 2^20 is refused with one line,
# by dcr-apply, dcr-pack and dcr-pack --list, the receiver untouched, and
# memory stays under what 2^20 tensors take (checked in the unsanitized
# build; AddressSanitizer's redzones double small allocations); a stream
# of exactly 2^20 is read to its end (here: truncated). A pack stream
# whose payloads each keep within 2^20 but together name more (2^19 new
# tensors each, an item apiece) is refused at the item past 2^20, by
# dcr-apply and by the in-memory apply: they kept a few hundred bytes per
# tensor named, without bound, until the stream's end. And the same for
# long names (up to 65,535 bytes each): a delta's TENSOR and REMOVE
# records, and the names of a pack's items, past 256 MiB are refused.
. "$DCR_SRC/tests/lib-dcr.sh"
H="$DCR_BUILD/tests/hostile"
need_gnu_time
command -v dcr-pack >/dev/null 2>&1 || skip "dcr-pack is not on PATH"
"$H" tensors 1048577 "$T/over" || fail "hostile exited $?"
"$H" tensors 1048576 "$T/max" || fail "hostile exited $?"
mkdir "$T/r"
$MKST new "$T/r" t:BF16:64
before=$(snapshot "$T/r")
small_quarantine

# bound CMDNAME MIB MIB_SEEN: fail if MIB_SEEN is over MIB (unsanitized)
bound() {
	say "$1: $3 MiB"
	sanitized || [ "$3" -lt "$2" ] || fail "$1 took $3 MiB to refuse 2^20 + 1 tensors"
}
m=$(peak_rss 128 dcr-apply "$T/r" "$T/over")
one_line_error dcr-apply
grep -q "names more than 1048576 tensors" "$T/err" || fail "dcr-apply: $(cat "$T/err")"
bound dcr-apply 450 "$m"
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
m=$(peak_rss 128 dcr-pack "$T/over")
one_line_error dcr-pack
grep -q "names more than 1048576 tensors" "$T/err" || fail "dcr-pack: $(cat "$T/err")"
bound dcr-pack 800 "$m"
m=$(peak_rss 128 dcr-pack --list "$T/over")
one_line_error dcr-pack
grep -q "names more than 1048576 tensors" "$T/err" || fail "dcr-pack --list: $(cat "$T/err")"
bound "dcr-pack --list" 450 "$m"
# 2^20 exactly: taken, then the stream ends
run 128 dcr-apply "$T/r" "$T/max"
grep -q "is truncated" "$T/err" || fail "2^20 tensors: $(cat "$T/err")"
say "ok: a delta of more than 2^20 tensors refused in bounded memory"
# applies_refuse PACK MESSAGE MIB [LABEL]: dcr-apply and the in-memory
# apply each refuse PACK with MESSAGE, in at most MIB MiB, the receiver
# untouched
applies_refuse() {
	for apply in dcr-apply "$DCR_BUILD/tests/mem-apply --device cpu"; do
		m=$(peak_rss 128 $apply "$T/r" "$1")
		grep -q "$2" "$T/err" || fail "$apply: $(cat "$T/err")"
		bound "${apply%% *}${4:-}" "$3" "$m"
		[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
	done
}
"$H" names 1048577 "$T/names.tar" 2>/dev/null || fail "hostile exited $?"
applies_refuse "$T/names.tar" "payload-000002.dcrp: the pack's items name more than 1048576 tensors" 600
say "ok: payloads that name more than 2^20 tensors together refused in bounded memory"

# Long names: each may be 65,535 bytes, so 2^20 of them were 128 GiB kept.
# A delta's TENSOR and REMOVE records take at most 256 MiB: 10,000 names
# of 60,000 bytes (600 MB, streamed through a FIFO, never on disk) are
# refused at the record past it; each reader kept them all, until the
# stream's end, and more for a longer stream.
mkfifo "$T/fifo"
for cmd in dcr-apply dcr-pack "dcr-pack --list"; do
	"$H" tensors 10000 "$T/fifo" 60000 2>/dev/null &
	feeder=$!
	case $cmd in
	dcr-apply) m=$(peak_rss 128 dcr-apply "$T/r" "$T/fifo") ;;
	*) m=$(peak_rss 128 $cmd "$T/fifo") ;;
	esac
	wait $feeder 2>/dev/null || true
	one_line_error "${cmd%% *}"
	grep -q "names take more than 256 MiB" "$T/err" || fail "$cmd: $(cat "$T/err")"
	bound "$cmd, long names" 700 "$m"
done
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
# payloads that each keep within it (128 MiB of names apiece) but together
# name more are refused at the item past it: 6,708 names of 60,000 bytes
# in three payloads, zstd-squeezed to 82 KB
"$H" names 6708 "$T/long.tar" 60000 2>/dev/null || fail "hostile exited $?"
applies_refuse "$T/long.tar" \
	"payload-000002.dcrp: the names of the tensors the pack's items change take more than 256 MiB" \
	800 ", long names"
say "ok: tensors' names past 256 MiB refused in bounded memory"
