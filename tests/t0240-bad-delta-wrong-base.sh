#!/bin/sh
# A delta whose base is not the receiver's state is refused with exit 1 and
# one line naming the problem, and the receiver's files stay exactly as
# they were: a receiver one step behind, one step ahead, one with a single
# flipped bit, one of another model. A receiver already at the target gets
# exit 0 and no change. The right delta then applies.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 3 --shards 2 --change 0.03 "$T/g"
run 0 dcr-diff "$T/g/v1" "$T/g/v2"
mv "$T/out" "$T/d12"

refused_base() { # RECEIVER WHAT
	snapshot "$1" >"$T/snap0"
	run 1 dcr-apply "$1" "$T/d12"
	one_line_error dcr-apply
	grep -q "base" "$T/err" || fail "$2: message does not mention the base"
	snapshot "$1" >"$T/snap1"
	cmp -s "$T/snap0" "$T/snap1" || fail "$2: receiver files changed"
	[ ! -e "$1/.dcr/journal" ] || fail "$2: a journal was committed"
}

cp -r "$T/g/v0" "$T/r0" && refused_base "$T/r0" "a step behind"
cp -r "$T/g/v3" "$T/r3" && refused_base "$T/r3" "a step ahead"
cp -r "$T/g/v1" "$T/rx" && $MKST xor "$T/rx" model.norm.weight 0=1
refused_base "$T/rx" "one bit off"
run 0 gen-checkpoint -q --size 1M --steps 0 --shards 2 --seed 9 "$T/other"
refused_base "$T/other/v0" "another model"
# twice in a row: still refused, still untouched (the state cache is honest)
refused_base "$T/r0" "a step behind, again"
say "ok: wrong bases refused with exit 1"

cp -r "$T/g/v2" "$T/r2"
snapshot "$T/r2" >"$T/snap0"
run 0 dcr-apply "$T/r2" "$T/d12"
grep -q 'already at the target' "$T/err" || fail "no 'already at the target' message"
snapshot "$T/r2" >"$T/snap1"
cmp -s "$T/snap0" "$T/snap1" || fail "an apply at the target changed files"

cp -r "$T/g/v1" "$T/r1"
run 0 dcr-apply "$T/r1" "$T/d12"
same "$T/r1" "$T/g/v2"
# a receiver edited behind dcr's back after an apply is not mistaken for the
# cached state: the next delta is refused
cp -r "$T/g/v1" "$T/r4"
run 0 dcr-apply "$T/r4" "$T/d12"
run 0 dcr-diff "$T/g/v2" "$T/g/v3"
mv "$T/out" "$T/d23"
$MKST xor "$T/r4" model.norm.weight 1=1
snapshot "$T/r4" >"$T/snap0"
run 1 dcr-apply "$T/r4" "$T/d23"
snapshot "$T/r4" >"$T/snap1"
cmp -s "$T/snap0" "$T/snap1" || fail "edited receiver: files changed"
