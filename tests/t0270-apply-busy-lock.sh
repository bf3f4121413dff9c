#!/bin/sh
# Only one process changes a receiver at a time: while another holds
# CKPT/.dcr/lock (flock(1), or a second dcr-apply), dcr-apply and
# dcr-apply --recover are refused at once with a one-line "busy" error,
# exit 128, and the receiver stays as it was; once the lock is free the
# same delta applies.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v flock >/dev/null 2>&1 || skip "flock(1) (util-linux) is missing"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 16M --steps 1 --shards 2 --change 1 "$T/g"
run 0 dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
cp -r "$T/g/v0" "$T/r"
mkdir -p "$T/r/.dcr"
snapshot "$T/r" >"$T/s0"

# hold the lock with flock(1); -o keeps it out of the child, which only waits
flock -o "$T/r/.dcr/lock" sh -c 'echo $$ >"$1"; exec sleep 60' sh "$T/holder" &
fpid=$!
i=0
while [ ! -s "$T/holder" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "flock(1) never took the lock"
	sleep 0.05
done
busy() {
	one_line_error dcr-apply
	grep -q 'busy' "$T/err" || { cat "$T/err"; fail "no 'busy' message"; }
	snapshot "$T/r" >"$T/s1"
	cmp -s "$T/s0" "$T/s1" || fail "receiver changed while locked"
}
run 128 dcr-apply "$T/r" "$T/d"
busy
run 128 dcr-apply --recover "$T/r"
busy
kill "$(cat "$T/holder")"
wait $fpid 2>/dev/null || :
run 0 dcr-apply "$T/r" "$T/d"
same_fast "$T/r" "$T/g/v1"
say "ok: refused while flock(1) held the lock"

# two dcr-apply at once: the one that comes second is refused as busy
rm -rf "$T/r" && cp -r "$T/g/v0" "$T/r"
dcr-apply "$T/r" "$T/d" >"$T/o1" 2>"$T/e1" &
p1=$!
# wait until the first holds the lock (seen in /proc/locks: probing with
# flock -n would take the lock and could make the first one fail)
[ -r /proc/locks ] || skip "no /proc/locks to see the first dcr-apply's lock"
locked() {
	[ -e "$T/r/.dcr/lock" ] || return 1
	ino=$(stat -c %i "$T/r/.dcr/lock")
	grep -q "FLOCK.*:$ino " /proc/locks
}
i=0
while ! locked; do
	i=$((i + 1))
	if [ $i -ge 200 ] || ! kill -0 $p1 2>/dev/null; then
		wait $p1 || :
		skip "the first dcr-apply finished before a second could start"
	fi
	sleep 0.01
done
set +e
dcr-apply "$T/r" "$T/d" >"$T/out" 2>"$T/err"
rc2=$?
wait $p1
rc1=$?
set -e
[ $rc1 -eq 0 ] || { cat "$T/e1"; fail "first dcr-apply exited $rc1"; }
if [ $rc2 -eq 0 ]; then
	grep -q 'already at the target' "$T/err" || fail "second apply ran alongside the first"
	skip "the first dcr-apply finished before the second started"
fi
[ $rc2 -eq 128 ] || { cat "$T/err"; fail "second dcr-apply exited $rc2"; }
one_line_error dcr-apply
grep -q 'busy' "$T/err" || { cat "$T/err"; fail "no 'busy' message"; }
same_fast "$T/r" "$T/g/v1"
say "ok: a second dcr-apply was refused while the first ran"
