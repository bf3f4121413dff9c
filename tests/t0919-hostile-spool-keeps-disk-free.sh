#!/bin/sh
# A pack of a few KB whose items decode to far more than the receiver's
# filesystem holds (dense items of 32 MiB of zeros, again and again over
# one tensor) in a stream refused only at its end (it has no manifest; or
# no signature, where a key is required) filled the receiver's disk
# before the refusal: 4 GiB of .dcr/spool from 134 KB. Items that change
# one tensor in more elements than it has are now refused as they come
# (no element changes twice in a step), after one item of 32 MiB; and
# where each item changes a tensor of its own (40 new tensors of 32 MiB)
# the spool leaves 2% of its filesystem free, at least 64 MiB: on a
# filesystem of 256 MiB each apply is refused in one line with that much
# still free, with a key as without, and leaves the receiver and its disk
# as they were. The in-memory apply (a serving process's, which keeps a
# pack's items until its manifest) held the one-tensor stream whole, 1.35 GB
# for these 44 KB: it too refuses it at the item that goes past, in a few
# tens of MiB; and the 40 new tensors' items, which it cannot refuse
# before the manifest, it holds squeezed past 256 MiB, in about 300 MiB,
# as it does 20 such items of 1 MiB of noise repeated (3.6 MB of pack,
# 731 MiB held when it squeezed them with zstd's own window: the squeezer
# must see as far back as a payload's frame may).
. "$DCR_SRC/tests/lib-dcr.sh"
H="$DCR_BUILD/tests/hostile"
. "$DCR_SRC/tests/lib-ns.sh"
mount_namespace
"$H" again 40 "$T/again.tar" 2>/dev/null || fail "hostile exited $?"
"$H" again 40 "$T/spread.tar" spread 2>/dev/null || fail "hostile exited $?"
"$H" again 20 "$T/period.tar" period 2>/dev/null || fail "hostile exited $?"
run 0 dcr-keygen -p "$T/k.pub" -s "$T/k.sec"
mkdir "$T/small"
# in a mount namespace of its own: a 256 MiB tmpfs, a receiver on it, the
# applies of the packs (the spread one without and with a key), the least
# free space seen while they ran, and the most the first one spooled
cat >"$T/inner" <<IN
set -e
mount -t tmpfs -o size=256m tmpfs "$T/small"
mkdir "$T/small/r"
$MKST new "$T/small/r" x:BF16:64
df -B1 --output=avail "$T/small" | tail -n 1 >"$T/free0"
(while :; do df -B1 --output=avail "$T/small" | tail -n 1; sleep 0.02; done) >"$T/free" &
s=\$!
rc=0; dcr-apply "$T/small/r" "$T/again.tar" 2>"$T/err0" || rc=\$?; echo \$rc >"$T/rc0"
sort -n "$T/free" | head -n 1 >"$T/least0"
rc=0; dcr-apply "$T/small/r" "$T/spread.tar" 2>"$T/err1" || rc=\$?; echo \$rc >"$T/rc1"
rc=0; dcr-apply --verify-key "$T/k.pub" "$T/small/r" "$T/spread.tar" 2>"$T/err2" || rc=\$?; echo \$rc >"$T/rc2"
kill \$s
find "$T/small/r" -type f | sort >"$T/files"
df -B1 --output=avail "$T/small" | tail -n 1 >"$T/free1"
IN
unshare $NS sh "$T/inner" || fail "the applies in their own filesystem failed to run"
[ "$(cat "$T/rc0")" = 128 ] || { cat "$T/err0"; fail "apply of one tensor's items again and again exited $(cat "$T/rc0")"; }
cp "$T/err0" "$T/err"
one_line_error dcr-apply
grep -q "the pack's items change more elements of 't' than the 4194304 it has" "$T/err" ||
	{ cat "$T/err"; fail "items over one tensor again and again: not refused as they came"; }
least=$(cat "$T/least0")
say "least free while refusing one tensor's items again and again: $least bytes of 256 MiB"
[ "$least" -ge $((256 - 48 << 20)) ] || fail "it spooled $((($(cat "$T/free0") - least) >> 20)) MiB before the refusal"
for i in 1 2; do
	[ "$(cat "$T/rc$i")" = 128 ] || { cat "$T/err$i"; fail "apply $i exited $(cat "$T/rc$i")"; }
	cp "$T/err$i" "$T/err"
	one_line_error dcr-apply
	grep -q "cannot spool the pack: its items decode to more than the receiver's filesystem holds" "$T/err" ||
		{ cat "$T/err"; fail "apply $i: no word of the room"; }
done
least=$(sort -n "$T/free" | head -n 1)
say "least free while spooling: $least bytes of 256 MiB"
[ "$least" -ge $((48 << 20)) ] || fail "the spool left $least bytes free"
# (the receiver's .dcr, a few KB, is new)
[ $(($(cat "$T/free0") - $(cat "$T/free1"))) -lt 65536 ] ||
	fail "free space $(cat "$T/free0") before, $(cat "$T/free1") after"
[ "$(grep -c . "$T/files")" -le 3 ] && ! grep -q -e spool -e stage/ -e journal "$T/files" ||
	{ cat "$T/files"; fail "files left behind"; }
need_gnu_time
small_quarantine # (ASan's would count as resident)
mkdir "$T/m"
$MKST new "$T/m" x:BF16:64
m=$(peak_rss 128 "$DCR_BUILD/tests/mem-apply" --device cpu "$T/m" "$T/again.tar")
grep -q "the pack's items change more elements of 't' than the 4194304 it has" "$T/err" ||
	{ cat "$T/err"; fail "the in-memory apply: no word of the items over one tensor"; }
say "the in-memory apply refused them in $m MiB"
[ "$m" -lt 200 ] || fail "the in-memory apply took $m MiB to refuse a 44 KB pack"
m=$(peak_rss 128 "$DCR_BUILD/tests/mem-apply" --device cpu "$T/m" "$T/spread.tar")
grep -q "ended without a manifest" "$T/err" || { cat "$T/err"; fail "the in-memory apply of 40 new tensors"; }
say "the in-memory apply held 40 new tensors' items of 32 MiB in $m MiB"
[ "$m" -lt 450 ] || fail "the in-memory apply took $m MiB for 1.3 GB of items in a 44 KB pack"
m=$(peak_rss 128 "$DCR_BUILD/tests/mem-apply" --device cpu "$T/m" "$T/period.tar")
grep -q "ended without a manifest" "$T/err" || { cat "$T/err"; fail "the in-memory apply of repeated noise"; }
say "the in-memory apply held 20 items of 32 MiB of repeated noise in $m MiB"
[ "$m" -lt 450 ] || fail "the in-memory apply took $m MiB for 640 MiB of items in a 3.6 MB pack"
