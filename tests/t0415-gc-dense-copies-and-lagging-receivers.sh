#!/bin/sh
# dcr-push --gc bounds a store that runs for many steps: a dense copy
# (every tensor whole: the size of the model) is removed once a newer
# complete one of a committed version is in the store, not kept forever;
# a dense copy still being pushed (no manifest yet) supersedes nothing. A
# receiver that stopped acknowledging holds every later pack back, and GC
# says which one does; --max-behind N lets such a receiver go once a dense
# copy newer than its version is there (packs after that copy stay, so it
# can still catch up: shown by doing it), and refuses to while none is. A
# receiver's acknowledgements of committed versions before its latest go.
# dcr-commit --store --status shows all of it: each receiver's latest
# acknowledgement, the packs and the dense copies.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-commit dcr-push dcr-pull gen-checkpoint
run 0 gen-checkpoint -q --size 1M --steps 5 "$T/g"
G=$T/g S=$T/store
lagging_chain "$G" "$S" 5 # ra follows, rb stops at v1

# no dense copy yet: rb, 4 versions behind, is still waited for, and
# said to be; only v1 can go
run 0 dcr-push --gc "$S" --policy pol --max-behind 2 --dry-run
grep -q "receiver 'rb' is at v1, more than 2 versions behind, and still waited for: no dense copy" "$T/err" ||
	{ cat "$T/err"; fail "no word that rb is still waited for"; }
grep -q "would remove the packs of 1 version and 0 dense copies of 'pol'; packs after v1 stay for receiver 'rb'" "$T/err" ||
	{ cat "$T/err"; fail "unclear dry-run summary"; }
[ "$(cut -f1 "$T/out")" = v1 ] || fail "dry run listed '$(cat "$T/out")'"
[ -f "$S/pol/v1/manifest.dcrm" ] || fail "a dry run removed v1"

# dense copies of v2 and v4, and one of v5 still being pushed (its
# payloads there, its manifest not yet)
for v in 2 4 5; do
	run 0 dcr-diff --dense "$G/v$v" -o "$T/dd$v"
	run 0 dcr-pack -o "$T/pd$v" "$T/dd$v"
	run 0 dcr-push -q "$T/pd$v" "$S/pol/v$v.dense"
done
rm "$S/pol/v5.dense/manifest.dcrm"

# without --max-behind: v1's pack and the v2 dense copy go (the v4 one
# serves whoever v2's would); rb still holds v2..v5 back
run 0 dcr-push --gc "$S" --policy pol
[ "$(cut -f1 "$T/out" | tr '\n' ' ')" = "v1 v2.dense " ] || fail "gc removed '$(cat "$T/out")'"
grep -q "removed the packs of 1 version and 1 dense copy of 'pol'; packs after v1 stay for receiver 'rb'" "$T/err" ||
	{ cat "$T/err"; fail "unclear summary"; }
# (in a directory store, the directories emptied go too)
[ ! -e "$S/pol/v1" ] || fail "gc kept v1: $(ls -a "$S/pol/v1")"
[ ! -e "$S/pol/v2.dense" ] || fail "gc kept the superseded dense copy"
for v in 1 2 3 4; do
	[ ! -e "$S/pol/acks/v$v" ] || [ $v = 1 ] || fail "gc kept acks/v$v: $(ls -a "$S/pol/acks/v$v")"
done
for p in v2 v3 v4 v5 v4.dense; do
	[ -f "$S/pol/$p/manifest.dcrm" ] || fail "gc removed $p, which is needed"
done
[ -n "$(ls "$S/pol/v5.dense")" ] || fail "gc removed a dense copy still being pushed"
# ra's acknowledgements of v1..v4 went, its v5 and rb's v1 stay
[ "$(cd "$S/pol/acks" && ls */* | tr '\n' ' ')" = "v1/rb v5/ra " ] ||
	fail "acknowledgements left: $(cd "$S/pol/acks" && ls */* | tr '\n' ' ')"

# where the policy stands, as an operator asks it before the next step
run 0 dcr-commit --store "$S" --policy pol --status
grep -q "^receiver rb: v1, 4 behind$" "$T/out" && grep -q "^receiver ra: v5$" "$T/out" &&
	grep -q "^packs: v2-v5$" "$T/out" && grep -q "^dense copies: v4$" "$T/out" ||
	{ cat "$T/out"; fail "status does not show the receivers, packs and dense copies"; }
run 0 dcr-commit --store "$S" --policy pol --status --porcelain
[ "$(grep -v '^head' "$T/out" | cut -f1-3 | tr '\t\n' ': ')" = "receiver:ra:5 receiver:rb:1 pack:2 pack:3 pack:4 pack:5 dense:4 " ] ||
	{ cat "$T/out"; fail "porcelain status"; }

# --max-behind 2: rb (at v1) is let go, since the v4 dense copy is newer;
# the packs after that copy stay
run 0 dcr-push --gc "$S" --policy pol --max-behind 2 -j 3
grep -q "receiver 'rb' is at v1, more than 2 versions behind: not waited for" "$T/err" ||
	{ cat "$T/err"; fail "no word that rb was let go"; }
[ "$(cut -f1 "$T/out" | tr '\n' ' ')" = "v2 v3 v4 " ] || fail "gc removed '$(cat "$T/out")'"
[ -f "$S/pol/v5/manifest.dcrm" ] && [ -f "$S/pol/v4.dense/manifest.dcrm" ] ||
	fail "gc removed what the let-go receiver catches up by"
[ -f "$S/pol/refs/v5" ] && [ -f "$S/pol/refs/v1" ] || fail "gc removed a ref"

# and rb catches up: the dense copy, then the pack after it
run 0 dcr-pull -q --dense "$S/pol/v4" -o "$T/rb.d4"
run 0 dcr-apply -q --version 4 "$T/rb" "$T/rb.d4"
run 0 dcr-commit -q "$T/rb" --store "$S" --policy pol --receiver rb
run 0 dcr-pull -q "$S/pol/v5" -o "$T/rb.p5"
run 0 dcr-apply -q --version 5 "$T/rb" "$T/rb.p5"
run 0 dcr-commit -q "$T/rb" --store "$S" --policy pol --receiver rb
same "$T/rb" "$G/v5"
say "ok: superseded dense copies go, a lagging receiver is named, let go, and catches up"

# a fresh host joins (elastic join) as dcr(7) says: the newest dense copy
# of a committed version, found through the status, into an empty
# directory, then the chain to the head
run 0 dcr-commit --store "$S" --policy pol --status --porcelain
V=$(awk -F '\t' '$1 == "head" { h = $2 } $1 == "dense" && $2 <= h { v = $2 } END { print v }' "$T/out")
H=$(awk -F '\t' '$1 == "head" { print $2 }' "$T/out")
[ "$V" = 4 ] && [ "$H" = 5 ] || fail "status porcelain: $(cat "$T/out")"
mkdir "$T/rc"
run 0 sh -c "dcr-pull -q --dense '$S/pol/v$V' | dcr-apply -q --version $V '$T/rc'"
run 0 dcr-commit -q "$T/rc" --store "$S" --policy pol --receiver rc
v=$((V + 1))
while [ $v -le "$H" ]; do
	run 0 sh -c "dcr-pull -q '$S/pol/v$v' | dcr-apply -q --version $v '$T/rc'"
	run 0 dcr-commit -q "$T/rc" --store "$S" --policy pol --receiver rc
	v=$((v + 1))
done
same "$T/rc" "$G/v5"
say "ok: a fresh host seeds from the newest dense copy and follows the chain"

run 129 dcr-push --keep 2 "$T/p1" "$S/pol/v9"
run 129 dcr-push --gc "$S" --policy pol --max-behind x
