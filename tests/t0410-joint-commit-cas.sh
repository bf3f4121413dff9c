#!/bin/sh
# Joint commit through a directory store: receivers acknowledge, the trainer
# commits version V only with N acknowledgements of the right state and only
# once (compare-and-set: of trainers racing with different states exactly one
# wins; one that finds V committed with the state it wanted, racing or
# retried, is done: exit 0), and prints the base id for the next diff; a receiver refuses a delta
# whose base is not its committed HEAD; GC removes only unneeded packs; a
# push to a committed version's name is refused unless --force.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-commit dcr-push dcr-pull gen-checkpoint
run 0 gen-checkpoint -q --size 1M --steps 3 "$T/g"
G=$T/g S=$T/store
S0=$(state_id "$G/v0"); S1=$(state_id "$G/v1"); S2=$(state_id "$G/v2"); S3=$(state_id "$G/v3")

# bootstrap: version 0 needs no acknowledgement and no predecessor
run 0 dcr-commit --store "$S" --policy pol --version 0 --expect 0 --state "$S0"
[ "$(cat "$T/out")" = "$S0" ] || fail "commit of v0 printed '$(cat "$T/out")'"
# again (a retried step): done already, the same state printed; with
# another state: refused
run 0 dcr-commit --store "$S" --policy pol --version 0 --expect 0 --state "$S0"
[ "$(cat "$T/out")" = "$S0" ] || fail "a retried commit of v0 printed '$(cat "$T/out")'"
grep -q "version 0 is committed with this state already: nothing to do" "$T/err" ||
	fail "no word of the commit done already: $(cat "$T/err")"
run 1 dcr-commit --store "$S" --policy pol --version 0 --expect 0 --state "$S1"
one_line_error dcr-commit
grep -q "already committed (state $S0)" "$T/err" || fail "no 'already committed' message"
# v2 cannot be committed before v1
run 1 dcr-commit --store "$S" --policy pol --version 2 --expect 0 --state "$S2"

for v in 1 2 3; do
	run 0 dcr-diff --base-id "$(eval echo \$S$((v - 1)))" "$G/v$((v - 1))" "$G/v$v" -o "$T/d$v"
	run 0 dcr-pack -o "$T/p$v" "$T/d$v"
	run 0 dcr-push -q "$T/p$v" "$S/pol/v$v"
done

for r in ra rb; do
	cp -r "$G/v0" "$T/$r"
	rm -rf "$T/$r/.dcr"
	run 0 dcr-pull -q -o "$T/$r.p1" "$S/pol/v1"
	run 0 dcr-apply -q --version 1 "$T/$r" "$T/$r.p1"
done
# not enough acknowledgements yet: refused, nothing committed
run 1 dcr-commit --store "$S" --policy pol --version 1 --expect 2 --timeout 0.3
grep -q "0 of 2" "$T/err" || fail "no acknowledgement count in '$(cat "$T/err")'"
run 0 dcr-commit "$T/ra" --store "$S" --policy pol --receiver ra
# the trainer's wait shows the count as it goes (--progress: stderr is a file)
run 1 dcr-commit --progress --store "$S" --policy pol --version 1 --expect 2 --timeout 0.3
grep -q "policy pol: v1: 1 of 2 acknowledged, 0 s of 0.3 s" "$T/err" ||
	fail "no progress of the wait in '$(cat -v "$T/err")'"
run 1 dcr-commit --store "$S" --policy pol --version 1 --expect 2 --timeout 0.3
! grep -q "acknowledged, " "$T/err" || fail "progress without --progress: '$(cat -v "$T/err")'"
# an acknowledgement naming another state does not count
printf 'dcr-ack 1\nversion 1\nstate %s\nreceiver rx\n' "$S3" >"$S/pol/acks/v1/rx"
run 1 dcr-commit --store "$S" --policy pol --version 1 --expect 2
# nor does one of the right state padded past 64 KiB: the trainer reads no
# acknowledgement or ref larger than that (the store's holder could make
# each a gigabyte)
{
	printf 'dcr-ack 1\nversion 1\nstate %s\nreceiver ry\n' "$S1"
	head -c 70000 /dev/zero | tr '\0' ' '
} >"$S/pol/acks/v1/ry"
run 1 dcr-commit --store "$S" --policy pol --version 1 --expect 2
grep -q "1 of 2" "$T/err" || fail "a padded acknowledgement counted: '$(cat "$T/err")'"
rm "$S/pol/acks/v1/ry"
run 0 dcr-commit "$T/rb" --store "$S" --policy pol --receiver rb
[ -f "$S/pol/acks/v1/rb" ] || fail "rb did not acknowledge"
# the local HEAD moved
run 0 dcr-commit --status --porcelain "$T/rb"
grep -q "^head	1	$S1$" "$T/out" || fail "rb's HEAD is not v1"

# two trainers at once: exactly one commits, the other finds it done with
# the state it wanted (both exit 0 and print it)
set +e
dcr-commit --store "$S" --policy pol --version 1 --expect 2 >"$T/o1" 2>"$T/e1" &
p=$!
dcr-commit --store "$S" --policy pol --version 1 --expect 2 >"$T/o2" 2>"$T/e2"
rc2=$?
wait $p
rc1=$?
set -e
[ $rc1 = 0 ] && [ $rc2 = 0 ] || fail "two trainers: exit codes $rc1 and $rc2, want 0 and 0"
[ "$(cat "$T/o1")" = "$S1" ] && [ "$(cat "$T/o2")" = "$S1" ] || fail "the trainers printed '$(cat "$T/o1")' and '$(cat "$T/o2")', not the v1 state"
[ "$(cat "$T/e1" "$T/e2" | grep -c "committed version 1 (2 acknowledgements)")" = 1 ] &&
	[ "$(cat "$T/e1" "$T/e2" | grep -c "nothing to do")" = 1 ] ||
	fail "not one commit and one found done: $(cat "$T/e1" "$T/e2")"
# a retried trainer finds it done; one wanting another state is refused
run 0 dcr-commit --store "$S" --policy pol --version 1 --expect 2
grep -q "nothing to do" "$T/err" || fail "a retried trainer: $(cat "$T/err")"
run 1 dcr-commit --store "$S" --policy pol --version 1 --expect 0 --state "$S3"
grep -q "already committed (state $S1)" "$T/err" || fail "another state: $(cat "$T/err")"
run 0 dcr-commit --store "$S" --policy pol --status --porcelain
grep -q "^head	1	$S1$" "$T/out" || fail "store head is not v1"
# a committed version's pack stays: another step pushed under its name is
# refused before a byte is written (it replaced the pack receivers behind
# fetch), and --force replaces it; the same step again (a rerun: the same
# base and target, here cut into other payloads and streamed) is nothing
# to push, exit 0
cp -r "$S/pol/v1" "$T/v1.before"
dcr-pack -s 16K "$T/d1" >"$T/p1.tar"
run 0 dcr-push - "$S/pol/v1" <"$T/p1.tar"
grep -q "has committed version 1 (state ${S1%"${S1#????????????}"}), and its pack there has this pack's base and target: nothing pushed" "$T/err" ||
	fail "no word of the step there already: $(cat "$T/err")"
diff -r "$T/v1.before" "$S/pol/v1" >/dev/null || fail "a push of the same step changed the committed pack"
run 1 dcr-push "$T/p2" "$S/pol/v1"
grep -q "has committed version 1 (state ${S1%"${S1#????????????}"})" "$T/err" ||
	fail "unclear refusal of a committed version's push: $(cat "$T/err")"
one_line_error dcr-push
diff -r "$T/v1.before" "$S/pol/v1" >/dev/null || fail "a refused push changed the committed pack"
run 0 dcr-push -q --force "$T/p2" "$S/pol/v1"
diff -r "$T/p2" "$S/pol/v1" >/dev/null || fail "--force did not replace the pack"
run 0 dcr-push -q --force "$T/p1" "$S/pol/v1"
run 129 dcr-push --force --gc "$S" --policy pol

# many trainers racing for v2 (with no acknowledgement needed): one
# commits, the others find it done
for i in 1 2 3 4 5 6; do
	(set +e; dcr-commit --store "$S" --policy pol --version 2 --expect 0 --state "$S2" >/dev/null 2>"$T/race$i.err"; echo $? >"$T/race$i") &
done
wait
for i in 1 2 3 4 5 6; do [ "$(cat "$T/race$i")" = 0 ] || fail "racing trainer $i: $(cat "$T/race$i.err")"; done
[ "$(cat "$T"/race?.err | grep -c "committed version 2 (0 acknowledgements)")" = 1 ] ||
	fail "not one commit of v2: $(cat "$T"/race?.err)"
# and racing with as many states, for another policy's v0: exactly one wins,
# the ref names its state, the others are refused
for i in 1 2 3 4 5 6; do
	st=$(printf '%064x' "$i")
	(set +e; dcr-commit -q --store "$S" --policy race --version 0 --expect 0 --state "$st" >"$T/rs$i" 2>/dev/null; echo $? >"$T/rc$i") &
done
wait
wins=0
for i in 1 2 3 4 5 6; do
	case $(cat "$T/rc$i") in
	0) wins=$((wins + 1)); won=$(cat "$T/rs$i") ;;
	1) ;;
	*) fail "racing trainer $i exited $(cat "$T/rc$i")" ;;
	esac
done
[ $wins -eq 1 ] || fail "$wins of 6 trainers racing with different states committed"
grep -q "^state $won$" "$S/race/refs/v0" || fail "the ref does not name the winner's state $won"

# a receiver at HEAD v1 refuses a delta whose base is not v1 (v2->v3),
# and v1->v2 applies; committing v2 without applying it is refused
run 1 dcr-apply "$T/ra" "$T/d3"
grep -q "committed state\|not at the delta's base" "$T/err" || fail "unclear refusal: $(cat "$T/err")"
run 1 dcr-commit --version 2 "$T/ra"
run 0 dcr-apply -q "$T/ra" "$T/p2"
run 0 dcr-commit --version 2 "$T/ra" --store "$S" --policy pol --receiver ra
run 0 dcr-apply -q "$T/ra" "$T/d3"
run 1 dcr-commit --version 2 "$T/ra"   # version would not move forward
run 0 dcr-commit --version 3 "$T/ra" --store "$S" --policy pol --receiver ra
same "$T/ra" "$G/v3"
run 0 dcr-commit --log --porcelain "$T/ra"
[ "$(cut -f1 "$T/out" | tr '\n' ' ')" = "1 2 3 " ] || fail "log: $(cat "$T/out")"
run 0 dcr-commit --store "$S" --policy pol --version 3 --expect 1
[ "$(cat "$T/out")" = "$S3" ] || fail "v3 commit printed the wrong state"

# GC: rb acknowledged v1 only, so v1 (and older) may go, v2 and v3 stay
rm -f "$S/pol/acks/v1/rx"
run 0 dcr-push --gc "$S" --policy pol --keep 1
[ ! -e "$S/pol/v1" ] || [ -z "$(ls "$S/pol/v1")" ] || fail "gc kept v1"
[ -f "$S/pol/v2/manifest.dcrm" ] && [ -f "$S/pol/v3/manifest.dcrm" ] || fail "gc removed a needed pack"
# once rb is at v3, keep 1 still keeps v3 only... and v2 may go
printf 'dcr-ack 1\nversion 3\nstate %s\nreceiver rb\n' "$S3" >"$S/pol/acks/v3/rb"
run 0 dcr-push --gc "$S" --policy pol --keep 1
[ -z "$(ls "$S/pol/v2" 2>/dev/null)" ] || fail "gc kept v2"
[ -f "$S/pol/v3/manifest.dcrm" ] || fail "gc removed the head's pack"
[ -f "$S/pol/refs/v3" ] || fail "gc removed a ref"
say "ok: joint commit, compare-and-set, GC"
