#!/bin/sh
# An RL job's step, run again as a whole after it was done (a trainer
# restarted after its joint commit, a retried pipeline): the trainer's
# dcr-diff | dcr-pack | dcr-push and dcr-commit, and the receivers'
# dcr-pull | dcr-apply && dcr-commit, each exit 0 with nothing written, so
# that a script under `set -e` goes on; the store's and the receivers'
# files are byte for byte as before. The step run again with other new
# weights (training is not deterministic) is refused at the push (exit
# 1), before anything is written, and the commit of its state too.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-commit dcr-push dcr-pull gen-checkpoint
run 0 gen-checkpoint -q --size 1M --steps 1 "$T/g"
run 0 gen-checkpoint -q --size 1M --steps 1 --seed 2 "$T/h"
G=$T/g S=$T/store
cp -r "$G/v0" "$T/r1"
cp -r "$G/v0" "$T/r2"
base=$(state_id "$G/v0")

# publish NEW: dcr-diff | dcr-pack | dcr-push of the step to v1; every
# stage must exit 0 (as under bash's pipefail: a push that stopped reading
# early would kill dcr-pack with SIGPIPE)
publish() {
	{ dcr-diff -q --base-id "$base" "$G/v0" "$1"; echo $? >"$T/rc.0"; } |
		{ dcr-pack; echo $? >"$T/rc.1"; } | dcr-push - "$S/pol/v1"
	echo $? >"$T/rc.2"
	[ "$(cat "$T/rc.0" "$T/rc.1" "$T/rc.2" | tr '\n' ' ')" = "0 0 0 " ] ||
		{ echo "diff, pack, push exited $(cat "$T/rc.0" "$T/rc.1" "$T/rc.2" | tr '\n' ' ')" >&2; return 1; }
}
step() { # NEW: the step to v1 from v0, as a job script runs it
	set -e
	publish "$1"
	for r in r1 r2; do
		dcr-pull -q "$S/pol/v1" | dcr-apply -q "$T/$r"
		dcr-commit -q "$T/$r" --version 1 --store "$S" --policy pol --receiver $r
	done
	dcr-commit --store "$S" --policy pol --version 1 --expect 2
}
run 0 dcr-commit --store "$S" --policy pol --version 0 --expect 0 --state "$base"
run 0 step "$G/v1"
id1=$(cat "$T/out")
[ "$id1" = "$(state_id "$G/v1")" ] || fail "the commit printed '$id1'"

store_snap() { (cd "$S" && find . -type f | LC_ALL=C sort | xargs -r sha256sum); }
store_snap >"$T/store.before"
snapshot "$T/r1" >"$T/r1.before"
run 0 step "$G/v1"
[ "$(cat "$T/out")" = "$id1" ] || fail "the step run again printed '$(cat "$T/out")'"
grep -q "and its pack there has this pack's base and target: nothing pushed" "$T/err" ||
	fail "no word from the push: $(cat "$T/err")"
grep -q "version 1 is committed with this state already: nothing to do" "$T/err" ||
	fail "no word from the commit: $(cat "$T/err")"
store_snap | cmp -s - "$T/store.before" || fail "the step run again changed the store"
snapshot "$T/r1" | cmp -s - "$T/r1.before" || fail "the step run again changed r1"
# the push reads the stream to its end-of-archive blocks, which its writer
# sends last: here half a second after the manifest, and still taken
dcr-diff -q --base-id "$base" "$G/v0" "$G/v1" | dcr-pack >"$T/p1.tar"
n=$(wc -c <"$T/p1.tar")
{ head -c $((n - 1024)) "$T/p1.tar"; sleep 0.5; tail -c 1024 "$T/p1.tar"; echo $? >"$T/rc.w"; } |
	dcr-push -q - "$S/pol/v1" || fail "the same step from a slow writer: exit $?"
[ "$(cat "$T/rc.w")" = 0 ] || fail "the push stopped reading before the end-of-archive blocks (writer exit $(cat "$T/rc.w"))"
say "ok: a step run again as a whole exits 0 and writes nothing"

# other weights for the same step: refused before anything is written
set +e
dcr-diff -q --base-id "$base" "$G/v0" "$T/h/v1" | dcr-pack | dcr-push - "$S/pol/v1" 2>"$T/err"
rc=$?
set -e
[ $rc = 1 ] || fail "another step under committed v1 exited $rc: $(cat "$T/err")"
grep -q "has committed version 1 (state $(echo "$id1" | cut -c1-12)): its pack is what receivers behind fetch" "$T/err" ||
	fail "unclear refusal: $(cat "$T/err")"
run 1 dcr-commit --store "$S" --policy pol --version 1 --expect 0 --state "$(state_id "$T/h/v1")"
grep -q "version 1 is already committed (state $id1)" "$T/err" || fail "unclear refusal: $(cat "$T/err")"
store_snap | cmp -s - "$T/store.before" || fail "a refused step changed the store"
say "ok: the step with other weights is refused, nothing written"
