#!/bin/sh
# A 16 KB dense item of 2^26 F64 took 2.6 GB in dcr-apply and left 513 MB
# in .dcr/stage. An item now spans at most 2^22 units (decoding one takes at
# most 64 MiB): the 2^26 item is refused with one line, in a few MiB; the
# same tensor (2^24 F64) in four items of 2^22 is decoded an item at a
# time, stays under 300 MiB (the tensor itself is 128 MiB, staged and
# hashed; also with 8 threads resolving), fails at its wrong target digest,
# and leaves .dcr/stage empty
# and the receiver as it was. An item that names a tensor its payload never
# declared is refused, by dcr-apply and by the in-memory apply, before it
# is read further. A pack that only declares a new tensor of
# 2^50 bytes is refused before a byte is staged: the files to rebuild must
# fit the free space (a file size limit guards the disk should that break).
. "$DCR_SRC/tests/lib-dcr.sh"
H="$DCR_BUILD/tests/hostile"
need_gnu_time
"$H" dense 67108864 1 "$T/one.tar" 2>/dev/null || fail "hostile exited $?"
"$H" dense 16777216 4 "$T/four.tar" 2>/dev/null || fail "hostile exited $?"
mkdir "$T/r"
$MKST new "$T/r" t:BF16:64
before=$(snapshot "$T/r")
# (ASan's quarantine would count as resident here: keep it small)
small_quarantine
m=$(peak_rss 128 dcr-apply "$T/r" "$T/one.tar")
one_line_error dcr-apply
grep -q "ITEM of 67108864 units is larger than the 4194304" "$T/err" || { cat "$T/err"; fail "no word of the item's size"; }
say "one item of 2^26: $m MiB"
[ "$m" -lt 50 ] || fail "dcr-apply took $m MiB to refuse an item"
m=$(peak_rss 128 dcr-apply "$T/r" "$T/four.tar")
one_line_error dcr-apply
grep -q "would not match its target digest" "$T/err" || { cat "$T/err"; fail "no word of the digest"; }
say "four items of 2^22: $m MiB"
[ "$m" -lt 300 ] || fail "dcr-apply took $m MiB for four items of 2^22"
# resolving on more threads takes no more: big items go one at a time
m=$(peak_rss 128 dcr-apply --threads 8 "$T/r" "$T/four.tar")
say "four items of 2^22, 8 threads: $m MiB"
[ "$m" -lt 300 ] || fail "dcr-apply --threads 8 took $m MiB for four items of 2^22"
left=$(find "$T/r/.dcr/stage" -type f | wc -l)
[ "$left" -eq 0 ] || { ls -la "$T/r/.dcr/stage"; fail "$left files left in .dcr/stage"; }
[ ! -e "$T/r/.dcr/journal" ] || fail "a journal was left"
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"

# a new tensor of 2^50 bytes, declared and nothing else
"$H" dense 140737488355328 0 "$T/huge.tar" 2>/dev/null || fail "hostile exited $?"
rc=0
(ulimit -f 262144; exec dcr-apply "$T/r" "$T/huge.tar") >"$T/out" 2>"$T/err" || rc=$?
[ $rc = 128 ] || { cat "$T/err"; fail "the 2^50-byte tensor: exit $rc"; }
one_line_error dcr-apply
grep -q "they need 1125899906842624 bytes" "$T/err" || { cat "$T/err"; fail "no word of the room"; }
left=$(find "$T/r/.dcr/stage" -type f | wc -l)
[ "$left" -eq 0 ] || fail "$left files left in .dcr/stage"
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"

# an item for the payload's tensor 1, where it declares only tensor 0
"$H" dense 64 1 "$T/undeclared.tar" 1 2>/dev/null || fail "hostile exited $?"
for apply in dcr-apply "$DCR_BUILD/tests/mem-apply --device cpu"; do
	rc=0
	$apply "$T/r" "$T/undeclared.tar" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc = 128 ] || { cat "$T/err"; fail "$apply: an item for an undeclared tensor: exit $rc"; }
	grep -q "payload-000000.dcrp: item for undeclared tensor" "$T/err" ||
		{ cat "$T/err"; fail "$apply: no word of the undeclared tensor"; }
	[ "$(snapshot "$T/r")" = "$before" ] || fail "$apply: the receiver changed"
done
