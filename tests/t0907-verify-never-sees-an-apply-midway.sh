#!/bin/sh
# dcr-verify of a receiver during an apply could print a state id that was
# neither the old nor the new one. It now reads a receiver (a directory
# with .dcr/) under the receiver's shared lock: while dcr-apply holds the
# lock, dcr-verify is refused at once ("busy", exit 128); while an
# interrupted apply's journal waits, it is refused with a hint to
# 'dcr-apply --recover'; two dcr-verify runs share the lock; a checkpoint
# without .dcr/ is read as before; a held shared lock keeps dcr-apply out.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v flock >/dev/null 2>&1 || skip "flock(1) (util-linux) is missing"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
run 0 gen-checkpoint -q --size 2M --steps 1 --shards 2 "$T/g"
run 0 dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
old=$(state_id "$T/g/v0")
new=$(state_id "$T/g/v1")
cp -r "$T/g/v0" "$T/r"

# an apply that holds the lock while it waits for its input
{ sleep 3; cat "$T/d"; } | dcr-apply -q "$T/r" 2>"$T/apply.err" &
apid=$!
i=0
while [ ! -e "$T/r/.dcr/lock" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "dcr-apply never took the lock"
	sleep 0.05
done
sleep 0.2
run 128 dcr-verify "$T/r"
one_line_error dcr-verify
grep -q busy "$T/err" || { cat "$T/err"; fail "no 'busy' refusal during the apply"; }
wait $apid || fail "dcr-apply exited $?: $(cat "$T/apply.err")"
[ "$(state_id "$T/r")" = "$new" ] || fail "not at the new state after the apply"

# an apply killed after its journal was committed: refused until recovered
crash_committed "$T/g/v0" "$T/d" "$T/k"
run 128 dcr-verify "$T/k"
one_line_error dcr-verify
grep -q "dcr-apply --recover" "$T/err" || { cat "$T/err"; fail "no hint to recover"; }
run 0 dcr-apply --recover "$T/k"
id=$(state_id "$T/k")
[ "$id" = "$new" ] || [ "$id" = "$old" ] || fail "after --recover neither old nor new"

# readers share: dcr-verify under a held shared lock; dcr-apply is kept out
flock -s -o "$T/r/.dcr/lock" sh -c 'echo $$ >"$1"; exec sleep 60' sh "$T/holder" &
fpid=$!
i=0
while [ ! -s "$T/holder" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "flock(1) never took the lock"
	sleep 0.05
done
[ "$(state_id "$T/r")" = "$new" ] || fail "dcr-verify under a shared lock"
run 128 dcr-apply "$T/r" "$T/d"
grep -q busy "$T/err" || { cat "$T/err"; fail "dcr-apply ran beside a reader"; }
kill "$(cat "$T/holder")"
wait $fpid 2>/dev/null || :
# no .dcr/: read as a plain checkpoint, nothing created
cp -r "$T/g/v1" "$T/plain"
rm -rf "$T/plain/.dcr"
[ "$(state_id "$T/plain")" = "$new" ] || fail "a plain checkpoint"
[ ! -e "$T/plain/.dcr" ] || fail "dcr-verify created .dcr/"
