#!/bin/sh
# The EXAMPLE of libdcr(3), compiled from the page's own text against the
# public header and the shared libdcr, does what the page says: it diffs
# two checkpoints into a delta file, applies it to a copy of the base,
# commits version 1 and verifies it (exit 0, the receiver bit-identical to
# the target); it refuses a receiver at another base with exit 1 and the
# files untouched; killed at any durable step (DCR_FAULT_AT), a rerun ends
# at the target.
. "$DCR_SRC/tests/lib-dcr.sh"
: "${DCR_BUILD:?run through make check}"
EX="$DCR_BUILD/tests/libdcr-example"
[ -x "$EX" ] || fail "$EX is not built (make check builds it from man/libdcr.3)"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

# the program is the page's text, not a copy that could drift from it
grep -q 'dcr_commit_local(rc, &co, &cr, &e)' "$DCR_BUILD/tests/libdcr-example.c" ||
	fail "tests/libdcr-example.c is not the example of man/libdcr.3"
grep -q 'dcr_commit_local(rc, &co, &cr, &e)' "$DCR_SRC/man/libdcr.3" ||
	fail "man/libdcr.3 lost its example"

run 0 gen-checkpoint -q --size 1M --steps 2 --shards 2 --change 0.03 "$T/g"

# usage
run 129 "$EX"
grep -q '^usage: refit ' "$T/err" || fail "no usage line: $(cat "$T/err")"

# the refit: diff, apply, commit, verify
cp -r "$T/g/v0" "$T/r"
run 0 "$EX" "$T/g/v0" "$T/g/v1" "$T/v1.delta" "$T/r"
mv "$T/out" "$T/report"
id1=$(state_id "$T/g/v1")
grep -q "^v1 $id1: [1-9][0-9]* changes in [1-9][0-9]* items\$" "$T/report" ||
	fail "unexpected report: $(cat "$T/report")"
same "$T/r" "$T/g/v1"
[ -s "$T/v1.delta" ] || fail "no delta file"
# the delta file is an ordinary delta: dcr-apply takes it too
cp -r "$T/g/v0" "$T/r2"
run 0 dcr-apply "$T/r2" "$T/v1.delta"
same_fast "$T/r2" "$T/g/v1"
# and the receiver's HEAD names version 1 and the target (dcr-commit's view)
grep -q "^version 1\$" "$T/r/.dcr/HEAD" || fail "HEAD does not name version 1: $(cat "$T/r/.dcr/HEAD")"
grep -q "^state $id1\$" "$T/r/.dcr/HEAD" || fail "HEAD does not name the target"

# a receiver at another base: refused, exit 1, files untouched
cp -r "$T/g/v2" "$T/r3"
snapshot "$T/r3" >"$T/snap0"
run 1 "$EX" "$T/g/v0" "$T/g/v1" "$T/v1b.delta" "$T/r3"
grep -q '^refit: error: .*base' "$T/err" || fail "refusal does not name the base: $(cat "$T/err")"
snapshot "$T/r3" >"$T/snap1"
cmp -s "$T/snap0" "$T/snap1" || fail "a refused receiver was changed"

# killed at every durable step of the apply and the commit, then rerun
n=1
faults=0
while :; do
	rm -rf "$T/c"
	cp -r "$T/g/v0" "$T/c"
	set +e
	DCR_FAULT_AT=$n "$EX" "$T/g/v0" "$T/g/v1" "$T/c.delta" "$T/c" >"$T/out" 2>"$T/err"
	rc=$?
	set -e
	[ $rc -eq 0 ] && break
	[ $rc -eq 137 ] || { cat "$T/err" >&2; fail "DCR_FAULT_AT=$n: exit $rc, not killed"; }
	faults=$((faults + 1))
	run 0 "$EX" "$T/g/v0" "$T/g/v1" "$T/c.delta" "$T/c"
	same_fast "$T/c" "$T/g/v1"
	grep -q "^version 1\$" "$T/c/.dcr/HEAD" || fail "DCR_FAULT_AT=$n: the rerun did not commit v1"
	n=$((n + 1))
	[ $n -le 200 ] || fail "the example never finished under DCR_FAULT_AT"
done
same_fast "$T/c" "$T/g/v1"
[ $faults -ge 5 ] || fail "only $faults fault points in the example's apply and commit"
say "ok: libdcr(3)'s example refits, refuses another base, survives $faults crash points"
