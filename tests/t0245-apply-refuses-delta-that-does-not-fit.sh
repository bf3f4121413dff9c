#!/bin/sh
# A delta that names the receiver's state as its base but whose changes do
# not give the target from the receiver's bits (made from other bits with a
# false --base-id) is refused before anything is written: the journal check
# hashes every touched tensor's new bytes against its target digest. Exit
# 128, one line naming the tensor, the files as they were, no journal; the
# right delta then applies.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 2 --shards 2 --change 0.03 "$T/g"
id1=$(state_id "$T/g/v1")
# changes from v0 to v2, claimed against v1
run 0 dcr-diff --codec plain --no-cache --base-id "$id1" "$T/g/v0" "$T/g/v2" -o "$T/lie"
cp -r "$T/g/v1" "$T/r"
snapshot "$T/r" >"$T/snap0"
run 128 dcr-apply "$T/r" "$T/lie"
one_line_error dcr-apply
grep -q "tensor '.*' would not match its target digest: the delta does not fit this receiver's bits (nothing was written)" "$T/err" ||
	fail "unexpected message: $(cat "$T/err")"
snapshot "$T/r" >"$T/snap1"
cmp -s "$T/snap0" "$T/snap1" || fail "the receiver's files changed"
[ ! -e "$T/r/.dcr/journal" ] || fail "a journal was committed"
run 0 dcr-diff "$T/g/v1" "$T/g/v2" -o "$T/d12"
run 0 dcr-apply "$T/r" "$T/d12"
same "$T/r" "$T/g/v2"
say "ok: a delta that does not fit the receiver's bits is refused, nothing written"
