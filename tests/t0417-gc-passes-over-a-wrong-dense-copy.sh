#!/bin/sh
# dcr-push --gc relies on a dense copy NAME/vX.dense (to remove older
# dense copies, and to let a receiver far behind go, which then catches
# up by it) only when it holds version X's committed state: its manifest
# a dense copy's whose target is refs/vX. A dense copy of another
# checkpoint pushed under vX's name (the trainer's dense job given the
# wrong step), or a delta's pack pushed there, is passed over with a
# warning that names it; before, GC removed the good older dense copy and
# every pack up to vX, and the receiver it let go reached a state no
# later delta applies to. dcr-pull of such a pack, or of a committed
# version's pack pushed again with --force, is refused; dcr-push refuses
# to write its manifest, and to push another pack over a right dense copy
# already there (the same copy pushed again is nothing to push: exit 0).
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-commit dcr-push dcr-pull gen-checkpoint
run 0 gen-checkpoint -q --size 1M --steps 4 "$T/g"
G=$T/g S=$T/store
lagging_chain "$G" "$S" 4 # ra follows, rb stops at v1
id2=$(state_id "$G/v2" | cut -c1-12)
id3=$(state_id "$G/v3" | cut -c1-12)
# a right dense copy of v2; pushed again (a retried job), nothing is
# written and the push succeeds; a dense copy of another state pushed
# there is refused before anything is written (the payloads of the right
# one would be overwritten first)
run 0 dcr-diff --dense "$G/v2" -o "$T/dd2"
run 0 dcr-pack -o "$T/pd2" "$T/dd2"
run 0 dcr-push -q "$T/pd2" "$S/pol/v2.dense"
ls -l --time-style=full-iso "$S/pol/v2.dense" >"$T/v2.ls"
run 0 dcr-push "$T/pd2" "$S/pol/v2.dense"
grep -q "holds a dense copy of committed version 2 (state $id2) already: nothing pushed" "$T/err" ||
	{ cat "$T/err"; fail "no word of the dense copy already there"; }
ls -l --time-style=full-iso "$S/pol/v2.dense" | cmp -s - "$T/v2.ls" || fail "a push of the same copy wrote to v2.dense"
# the same copy cut into other payloads, as a stream: the same
dcr-pack -s 64K "$T/dd2" >"$T/pd2.tar"
run 0 dcr-push -q - "$S/pol/v2.dense" <"$T/pd2.tar"
ls -l --time-style=full-iso "$S/pol/v2.dense" | cmp -s - "$T/v2.ls" || fail "a push of the same copy wrote to v2.dense"
run 0 dcr-diff --dense "$G/v3" -o "$T/dd3"
run 0 dcr-pack -o "$T/pd3" "$T/dd3"
run 1 dcr-push -q "$T/pd3" "$S/pol/v2.dense"
grep -q "holds a dense copy of committed version 2 (state $id2) already, and this pack reaches state $id3: nothing pushed (--force replaces the copy)" "$T/err" ||
	{ cat "$T/err"; fail "no word of the other state"; }
# v2's step, a delta's pack, there: not a dense copy
run 1 dcr-push -q "$T/p2" "$S/pol/v2.dense"
grep -q "already, and this pack is not a dense copy: nothing pushed" "$T/err" ||
	{ cat "$T/err"; fail "no word of the delta's pack"; }
ls -l --time-style=full-iso "$S/pol/v2.dense" | cmp -s - "$T/v2.ls" || fail "a refused push wrote to v2.dense"
# one of v2's checkpoint under v3's name: its manifest does not go up
run 1 dcr-push -q "$T/pd2" "$S/pol/v3.dense"
grep -q "the pack reaches state $id2, not $id3: its manifest was not written (its payloads were): not a dense copy of committed version 3's state" "$T/err" ||
	{ cat "$T/err"; fail "a dense copy of another state was pushed"; }
[ ! -e "$S/pol/v3.dense/manifest.dcrm" ] || fail "the wrong dense copy's manifest went up"
say "ok: dcr-push refuses a dense copy of another state; the same copy again is a no-op"
# (pushed anyway, with --force, for what follows)
run 0 dcr-push -q --force "$T/pd2" "$S/pol/v3.dense"
run 0 dcr-push --gc "$S" --policy pol --max-behind 1
grep -q "warning: the dense copy v3.dense is not relied on: it holds state $id2, and v3 is committed as $id3; no receiver is let go by it" "$T/err" ||
	{ cat "$T/err"; fail "no word of the wrong dense copy"; }
grep -q "receiver 'rb' is at v1, more than 1 versions behind: not waited for" "$T/err" ||
	{ cat "$T/err"; fail "rb was not let go by the right dense copy"; }
# rb is let go by v2.dense: v1 and v2 go, v3 and v4 stay, and so do both
# dense copies (the right one is the newest that counts)
[ "$(cut -f1 "$T/out" | tr '\n' ' ')" = "v1 v2 " ] || fail "gc removed '$(cat "$T/out")'"
for p in v3 v4 v2.dense v3.dense; do
	[ -f "$S/pol/$p/manifest.dcrm" ] || fail "gc removed $p"
done
# the status an operator (or the elastic join of dcr(7)) picks a dense
# copy from lists only the right one as a dense copy
run 0 dcr-commit --store "$S" --policy pol --status
grep -q "^dense copies: v2$" "$T/out" &&
	grep -q "^dense copy v3: not relied on: it holds state $id2, and v3 is committed as $id3$" "$T/out" ||
	{ cat "$T/out"; fail "status does not tell the wrong dense copy"; }
run 0 dcr-commit --store "$S" --policy pol --status --porcelain
[ "$(grep dense "$T/out" | cut -f1,2 | tr '\t\n' ': ')" = "dense:2 bad-dense:3 " ] ||
	{ cat "$T/out"; fail "porcelain status of the dense copies"; }
# and rb catches up by it
run 0 sh -c "dcr-pull -q --dense '$S/pol/v2' | dcr-apply -q --version 2 '$T/rb'"
run 0 dcr-commit -q "$T/rb" --store "$S" --policy pol --receiver rb
for v in 3 4; do
	run 0 sh -c "dcr-pull -q '$S/pol/v$v' | dcr-apply -q --version $v '$T/rb'"
	run 0 dcr-commit -q "$T/rb" --store "$S" --policy pol --receiver rb
done
same "$T/rb" "$G/v4"
say "ok: a dense copy of another state is passed over, the right older one serves"

# a receiver that pulls the wrong dense copy by hand is refused before
# anything goes on, and so is one that pulls a committed version's pack
# pushed again with --force (another step's, here v4's under v3)
run 128 dcr-pull -q --dense "$S/pol/v3" -o "$T/wrong"
grep -q "reaches state $id2, and its version is committed as $id3: not the pack of that version" "$T/err" ||
	{ cat "$T/err"; fail "the wrong dense copy was pulled"; }
[ ! -e "$T/wrong" ] || fail "a refused pull left '$T/wrong'"
run 0 dcr-push -q --force "$T/p4" "$S/pol/v3"
run 128 dcr-pull -q "$S/pol/v3" -o "$T/wrong"
grep -q "and its version is committed as $id3: not the pack of that version" "$T/err" ||
	{ cat "$T/err"; fail "a replaced pack was pulled"; }
run 0 dcr-push -q --force "$T/p3" "$S/pol/v3"
run 0 dcr-pull -q "$S/pol/v3" -o "$T/right"
say "ok: a pull of a committed version's pack that does not reach its state is refused"

# a delta's pack pushed under a dense copy's name is no dense copy:
# refused, and passed over when forced there
run 128 dcr-push -q "$T/p4" "$S/pol/v4.dense"
grep -q "the pack is not a dense copy (dcr-diff --dense makes one): its manifest was not written" "$T/err" ||
	{ cat "$T/err"; fail "a delta's pack was pushed as a dense copy"; }
run 0 dcr-push -q --force "$T/p4" "$S/pol/v4.dense"
run 0 dcr-push --gc "$S" --policy pol --dry-run
grep -q "warning: the dense copy v4.dense is not relied on: its manifest is not a dense copy's" "$T/err" ||
	{ cat "$T/err"; fail "no word of the pack under v4.dense"; }
# (every receiver is at v4 now: v3's pack may go, no dense copy)
[ "$(cut -f1 "$T/out" | tr '\n' ' ')" = "v3 " ] || fail "gc would remove '$(cat "$T/out")'"
say "ok: a delta's pack under a dense copy's name is passed over"
