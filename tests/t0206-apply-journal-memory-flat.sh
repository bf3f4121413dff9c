#!/bin/sh
# dcr-apply checks its journal (every touched tensor's new bytes against its
# target digest) before it commits it, and used to keep every journal item
# in memory until then: a step that changes every value of a 384 MB
# checkpoint (a journal of about 450 MB) took about 400 MB of anonymous
# memory, growing with the checkpoint. The items of a tensor are now let go
# once its bytes are hashed, and the writer waits for the hashing threads
# when the items kept pass 64 MiB: the same apply stays under 260 MiB, and
# the receiver ends at the target. The same delta with its items out of
# tensor order (tests/hostile interleave: the first half's and the second
# half's in turn, as producers' packs may send them) held every item of
# the tensors behind the last one until the end (about 265 MiB); now
# those tensors are handed to the threads when the budget is passed and
# hashed again at the end, their items read back from the journal file a
# budget at a time: under 260 MiB too, and the same target. A pack of
# the same step (p) was spooled to disk as its payloads arrived and the
# whole spool, as large as the journal, then read back into memory (about
# 5 bytes a change: 300 MB for a 10% step of 2 GB); the spool is mapped
# now, and the pack's apply stays under the same bound. (Peak
# RssAnon, sampled by bench-compare: the checkpoint's mapped pages are not
# counted.)
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
command -v bench-compare >/dev/null 2>&1 || skip "bench-compare is not built"
# A sanitized build hunts memory errors, not memory use: its shadow memory
# and quarantine are anonymous memory too, and it computes about three
# times slower. It runs the same paths on a 128 MB checkpoint, whose
# journal (about 150 MB) still passes the 64 MiB budget twice, prints
# the peak and leaves the bound to the normal build.
if sanitized; then
	size=128M bound=
	small_quarantine
else
	size=384M bound=260
fi
run 0 gen-checkpoint -q --size $size --layers 24 --change 1 "$T/g"
run 0 dcr-diff -q --no-cache "$T/g/v0" "$T/g/v1" -o "$T/d"
cp -r "$T/g/v0" "$T/r"
run 0 dcr-diff -q --no-cache "$T/g/v0" "$T/g/v0" -o "$T/d0"
run 0 dcr-apply -q "$T/r" "$T/d0" # the receiver's state cache
"$DCR_BUILD/tests/hostile" interleave "$T/d" "$T/dx" || fail "hostile interleave exited $?"
run 0 dcr-pack -q -s 16M -o "$T/p" "$T/d"
cp -r "$T/r" "$T/r0"
for d in d dx p; do
	rm -rf "$T/rx"
	cp -r "$T/r0" "$T/rx"
	run 0 bench-compare time -o "$T/rep" -- dcr-apply -q "$T/rx" "$T/$d"
	anon=$(sed -n 's/.*peak_anon_kib=\([0-9]*\).*/\1/p' "$T/rep")
	[ -n "$anon" ] || { cat "$T/rep"; fail "no peak_anon_kib in the report"; }
	say "dense step of $size ($d): peak RssAnon $((anon / 1024)) MiB"
	[ -z "$bound" ] || [ "$anon" -lt $((bound * 1024)) ] ||
		fail "dcr-apply of $d held $((anon / 1024)) MiB (bound $bound MiB)"
	run 0 dcr-verify "$T/rx" --against "$T/g/v1"
done
