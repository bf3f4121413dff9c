#!/bin/sh
# Many producers, one pack, through a directory store: the training ranks
# of Megatron layouts with replicated tensors (TP=4 of a dense GQA model,
# whose norms every rank holds; TP=2 x EP=2 of a MoE model, whose
# non-expert weights both expert groups hold) each diff, pack and push
# only their own shards, as separate processes at once; any process
# finalizes; a receiver pulls and applies the pack and ends bit-identical
# to the canonical target, with the state id dcr-verify gives the target.
# The manifest is the last object written and names the joined target; the
# finalizer reads the summaries and 32 bytes of each payload, not the
# payloads. Finalize --sign makes a signed pack that a receiver with the
# key takes, and one with another key refuses. dcr-pack --attempt names
# the pack's attempt on every producer; producers that disagree make none.
. "$DCR_SRC/tests/lib-producers.sh"

for spec in "qwen2-kv8 4 1" "qwen2-moe 2 2"; do
	set -- $spec
	cfg=$1
	pair $cfg
	w="$T/w-$cfg"
	ranks $cfg $2 $3 "$w"
	[ "$NR" = 4 ] || fail "$cfg TP=$2 EP=$3: $NR ranks, want 4"
	S="$T/store"
	producers "$w" $cfg $NR "$S/$cfg" -s 4K
	[ ! -e "$S/$cfg/manifest.dcrm" ] || fail "a manifest before finalize"
	for r in $(seq 0 $((NR - 1))); do
		[ -f "$S/$cfg/summary-00000$r.dcrs" ] || fail "no summary of producer $r"
		# producer R's payloads are R * 10000 + j: payload-0R000j.dcrp
		[ -f "$S/$cfg/payload-0${r}0000.dcrp" ] || fail "no payload of producer $r"
	done
	run_ok "$B/dcr-push" --finalize --producers $NR --timeout 10 "$S/$cfg"
	fin=$(cat "$T/err")
	contains "$fin" "finalized $S/$cfg: 4 producers"
	contains "$fin" "target $(cat "$T/$cfg/new-id")"
	# what the finalizer read: the summaries and a trailer per payload
	sum=$(cat "$S/$cfg"/summary-*.dcrs | wc -c)
	np=$(ls "$S/$cfg" | grep -c '^payload-')
	contains "$fin" "read $sum bytes of summaries and $((32 * np)) of payload trailers"
	# the manifest lists every producer's payloads and the joined target
	"$B/dcr-pack" --list --porcelain "$S/$cfg" >"$T/list" || fail "list the finalized pack"
	grep "^manifest" "$T/list" | cut -f4 | grep -qx "$(cat "$T/$cfg/new-id")" ||
		fail "the manifest does not name the target"
	[ "$(grep "^manifest" "$T/list" | cut -f6)" = "$np" ] || fail "the manifest does not list $np payloads"
	receive $cfg "$S/$cfg" "r-$cfg"
	# finalizing again changes nothing
	run_ok "$B/dcr-push" --finalize --producers $NR "$S/$cfg"
	receive $cfg "$S/$cfg" "r2-$cfg"
	echo "ok $cfg TP=$2 EP=$3: $np payloads, summaries $sum bytes"
done

# a signed pack: the same producers, finalized with --sign
cfg=qwen2-kv8
w="$T/w-$cfg"
run_ok "$B/dcr-keygen" -p "$T/k.pub" -s "$T/k.sec"
run_ok "$B/dcr-keygen" -p "$T/o.pub" -s "$T/o.sec"
producers "$w" $cfg 4 "$S/signed" -s 4K
rc=0
"$B/dcr-push" --finalize --producers 4 --sign "$T/k.sec" "$S/signed" 2>"$T/err" || rc=$?
[ $rc = 129 ] || fail "--sign without --version exited $rc"
contains "$(head -n 1 "$T/err")" "--sign needs --version"
run_ok "$B/dcr-push" --finalize --producers 4 --sign "$T/k.sec" --version 7 --policy llama \
	"$S/signed"
[ -f "$S/signed/manifest.dcrm.sig" ] || fail "no signature beside the manifest"
receive $cfg "$S/signed" r-signed --verify-key "$T/k.pub"
expect_fail 128 "$B/dcr-pull" --verify-key "$T/o.pub" "$S/signed"
echo "ok signed"

# a producer retried with fewer payloads (another --payload-size): its
# payloads of the earlier try beyond the ones it now makes are deleted
# before its summary goes up; the other producers' are not touched
producers "$w" $cfg 4 "$S/retry" -s 1K
n1=$(ls "$S/retry" | grep -c '^payload-01')
[ "$n1" -ge 2 ] || fail "producer 1 made $n1 payloads at -s 1K"
others=$(ls "$S/retry" | grep '^payload-0[023]' | sha256sum)
produce "$w" $cfg 1 4 "$S/retry" -s 64M
[ "$(cat "$w/rc-1")" = "0 0 0" ] || fail "producer 1 retried: $(cat "$w/err-1")"
[ "$(ls "$S/retry" | grep -c '^payload-01')" = 1 ] ||
	fail "producer 1's earlier payloads left: $(ls "$S/retry" | grep '^payload-01' | tr '\n' ' ')"
[ "$(ls "$S/retry" | grep '^payload-0[023]' | sha256sum)" = "$others" ] ||
	fail "the retry touched other producers' payloads"
run_ok "$B/dcr-push" --finalize --producers 4 "$S/retry"
receive $cfg "$S/retry" r-retry
echo "ok retry"

# --attempt names the pack's attempt on every producer: the manifest
# carries it; producers that disagree make no pack
A=0123456789abcdef0123456789abcdef
producers "$w" $cfg 4 "$S/att" -s 4K --attempt $A
run_ok "$B/dcr-push" --finalize --producers 4 "$S/att"
"$B/dcr-pack" --list --porcelain "$S/att" >"$T/list" || fail "list the attempt's pack"
grep "^manifest" "$T/list" | tr '\t' '\n' | grep -qx $A ||
	fail "the manifest does not name attempt $A: $(grep '^manifest' "$T/list")"
receive $cfg "$S/att" r-att
produce "$w" $cfg 2 4 "$S/att" -s 4K --attempt fedcba9876543210fedcba9876543210
[ "$(cat "$w/rc-2")" = "0 0 0" ] || fail "producer 2 of another attempt: $(cat "$w/err-2")"
rc=0
"$B/dcr-push" --finalize --producers 4 "$S/att" 2>"$T/err" || rc=$?
[ $rc = 128 ] || fail "summaries of two attempts finalized (exit $rc): $(cat "$T/err")"
echo "ok --attempt: $(head -n 1 "$T/err")"

# a committed version's pack stays as it is: the step run again (a trainer
# restarted after its joint commit reruns it: every producer pushes, then
# a finalize) writes nothing and exits 0, the producers' payloads cut
# otherwise; a producer's share of another step (another base) is refused
# before anything is written, as is a finalize whose summaries join to
# another manifest; --force writes what joins to the same one
producers "$w" $cfg 4 "$S/pol/v1" -s 4K
run_ok "$B/dcr-push" --finalize --producers 4 "$S/pol/v1"
run_ok "$B/dcr-commit" --store "$S" --policy pol --version 0 --expect 0 --state "$(cat "$T/$cfg/base-id")"
run_ok "$B/dcr-commit" --store "$S" --policy pol --version 1 --expect 0 --state "$(cat "$T/$cfg/new-id")"
snap() { (cd "$S/pol/v1" && ls -l --time-style=full-iso && cat ./* | sha256sum); }
snap >"$T/v1.before"
producers "$w" $cfg 4 "$S/pol/v1" -s 16K
for r in 0 1 2 3; do
	contains "$(cat "$w/err-$r")" "has committed version 1 (state $(cut -c1-12 "$T/$cfg/new-id")), and its pack there has this pack's producer's share of the step: nothing pushed"
done
run_ok "$B/dcr-push" --finalize --producers 4 "$S/pol/v1"
contains "$(cat "$T/err")" "has committed version 1, and its manifest is the one the summaries join to: nothing written"
snap | cmp -s - "$T/v1.before" || fail "the step run again changed committed v1"
rc=0
"$B/dcr-diff" --layout "$w/map.json" --rank 0 --base-id "$(cat "$T/$cfg/new-id")" "$w/t0/rank-0" \
	"$w/t1/rank-0" 2>/dev/null | "$B/dcr-pack" --producer 0/4 | "$B/dcr-push" - "$S/pol/v1" 2>"$T/err" || rc=$?
[ $rc = 1 ] || fail "another step's share under committed v1 exited $rc: $(cat "$T/err")"
contains "$(cat "$T/err")" "has committed version 1 (state $(cut -c1-12 "$T/$cfg/new-id")): its pack is what receivers behind fetch"
snap | cmp -s - "$T/v1.before" || fail "a refused producer changed committed v1"
# summaries that join to another manifest (a version named in it now)
rc=0
"$B/dcr-push" --finalize --producers 4 --version 1 "$S/pol/v1" 2>"$T/err" || rc=$?
[ $rc = 1 ] || fail "finalize of committed v1 to another manifest exited $rc: $(cat "$T/err")"
contains "$(cat "$T/err")" "already has another manifest: it is final: '$S/pol' has committed version 1, and the summaries there join to another manifest"
snap | cmp -s - "$T/v1.before" || fail "a refused finalize changed committed v1"
run_ok "$B/dcr-push" --finalize --force --producers 4 "$S/pol/v1"
receive $cfg "$S/pol/v1" r-v1
echo "ok a committed step run again by its producers writes nothing; another is refused"
exit 0
