#!/bin/sh
# A receiver that gives up on a version (its disk full, a pack refused)
# tells the trainer why: dcr-commit --failed writes a failure report in
# the place of its acknowledgement, and the trainer's wait for
# acknowledgements ends at once, exit 1, naming the receiver and its
# reason, instead of running to its timeout; --max-failed N tolerates N
# such reports (a quorum). The store's status shows the report; the
# receiver's later acknowledgement replaces it. A report written by a
# hostile store (control characters, a reason far too long) is shown
# quoted and bounded, never raw.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-commit dcr-push dcr-pull gen-checkpoint
run 0 gen-checkpoint -q --size 1M --steps 2 "$T/g"
G=$T/g S=$T/store
run 0 dcr-commit -q --store "$S" --policy pol --version 0 --expect 0 --state "$(state_id "$G/v0")"
for v in 1 2; do
	run 0 dcr-diff "$G/v$((v - 1))" "$G/v$v" -o "$T/d$v"
	run 0 dcr-pack -o "$T/p$v" "$T/d$v"
	run 0 dcr-push -q "$T/p$v" "$S/pol/v$v"
done
for r in ra rb; do
	cp -r "$G/v0" "$T/$r"
	run 0 dcr-apply -q --version 1 "$T/$r" "$T/p1"
	run 0 dcr-commit -q "$T/$r" --store "$S" --policy pol --receiver $r
done
run 0 dcr-commit -q --store "$S" --policy pol --version 1 --expect 2

# v2: ra applies it; rb's apply fails (here: a pack it refuses) and rb
# reports why
run 0 dcr-apply -q --version 2 "$T/ra" "$T/p2"
run 0 dcr-commit -q "$T/ra" --store "$S" --policy pol --receiver ra
run 0 dcr-diff "$G/v0" "$G/v2" -o "$T/d02"
run 1 dcr-apply -q --version 2 "$T/rb" "$T/d02"
reason=$(cat "$T/err")
run 0 dcr-commit --store "$S" --policy pol --receiver rb --version 2 --failed "$reason"
grep -q "reported 'rb' failing version 2 to policy pol" "$T/err" || fail "no word of the report: $(cat "$T/err")"
start=$(date +%s)
run 1 dcr-commit --store "$S" --policy pol --version 2 --expect 2 --timeout 60
[ $(($(date +%s) - start)) -lt 20 ] || fail "the trainer waited for its timeout despite the report"
one_line_error dcr-commit
grep -q "1 of 2 receivers acknowledged version 2 .*; nothing committed; 1 receiver failed it, 'rb': dcr-apply: error: " "$T/err" ||
	{ cat "$T/err"; fail "the trainer's error does not give rb's reason"; }
grep -q "not its committed state\|base" "$T/err" || { cat "$T/err"; fail "rb's reason was lost"; }
[ ! -e "$S/pol/refs/v2" ] || fail "v2 was committed"
say "ok: the trainer stops at once with the receiver's reason"

# the status shows it
run 0 dcr-commit --store "$S" --policy pol --status
grep -q "^receiver rb: failed v2: dcr-apply: error: " "$T/out" || { cat "$T/out"; fail "status: no failure"; }
run 0 dcr-commit --store "$S" --policy pol --status --porcelain
grep -q "^failed	rb	2	dcr-apply: error: " "$T/out" || { cat "$T/out"; fail "porcelain status: no failure"; }
grep -q "^receiver	rb	1	" "$T/out" || { cat "$T/out"; fail "porcelain status: rb's last acknowledgement"; }

# --max-failed 1: one report is tolerated; the wait runs to its timeout
run 1 dcr-commit --store "$S" --policy pol --version 2 --expect 2 --timeout 0.5 --max-failed 1
grep -q "after 0 s; nothing committed; 1 receiver failed it, 'rb'" "$T/err" || { cat "$T/err"; fail "timeout message"; }
# and with one acknowledgement enough, v2 commits despite rb
run 0 dcr-commit -q --store "$S" --policy pol --version 2 --expect 1 --max-failed 1

# rb recovers: its acknowledgement replaces the report
run 0 dcr-apply -q --version 2 "$T/rb" "$T/p2"
run 0 dcr-commit -q "$T/rb" --store "$S" --policy pol --receiver rb
run 0 dcr-commit --store "$S" --policy pol --status
grep -q "failed" "$T/out" && { cat "$T/out"; fail "the report outlived the acknowledgement"; }
grep -q "^receiver rb: v2$" "$T/out" || { cat "$T/out"; fail "status after the recovery"; }
say "ok: status shows the report until the acknowledgement replaces it"

# a report of another attempt of the version (a trainer that restarted
# publishes v3 again): stale, it does not end the wait; the timeout's
# message still tells of it
run 0 dcr-diff "$G/v2" "$G/v2" -o "$T/d3"
run 0 dcr-pack -o "$T/p3a" "$T/d3"
run 0 dcr-push -q "$T/p3a" "$S/pol/v3"
run 0 dcr-commit -q --store "$S" --policy pol --receiver rb --version 3 --failed "pull of attempt A timed out"
grep -q "^attempt [0-9a-f]\{32\}$" "$S/pol/acks/v3/rb" || fail "the report names no attempt: $(cat "$S/pol/acks/v3/rb")"
run 0 dcr-diff "$G/v2" "$G/v2" -o "$T/d3b"
run 0 dcr-pack -o "$T/p3b" "$T/d3b"
rm -rf "$S/pol/v3"
run 0 dcr-push -q "$T/p3b" "$S/pol/v3"
run 1 dcr-commit --store "$S" --policy pol --version 3 --expect 1 --timeout 0.5
grep -q "after 0 s; nothing committed; receiver 'rb' reported failing another attempt of it: pull of attempt A timed out" "$T/err" ||
	{ cat "$T/err"; fail "a stale report ended the wait, or was not told"; }
# rb fails attempt B too: that ends the wait
run 0 dcr-commit -q --store "$S" --policy pol --receiver rb --version 3 --failed "apply of attempt B failed"
run 1 dcr-commit --store "$S" --policy pol --version 3 --expect 1 --timeout 60
grep -q "1 receiver failed it, 'rb': apply of attempt B failed" "$T/err" || { cat "$T/err"; fail "attempt B's report"; }
say "ok: a report of another attempt does not end the wait"

# where no pack names the attempt (a push that never finished), a report
# counts only if it came during the wait
rm -rf "$S/pol/v3" "$S/pol/acks/v3"
run 0 dcr-commit -q --store "$S" --policy pol --receiver rb --version 3 --failed "no manifest came"
grep -q "^attempt" "$S/pol/acks/v3/rb" && fail "a report names an attempt it never saw"
S3=$(state_id "$G/v2")
run 1 dcr-commit --store "$S" --policy pol --version 3 --expect 1 --state "$S3" --timeout 0.3
grep -q "receiver 'rb' reported failing it before this wait began: no manifest came" "$T/err" || { cat "$T/err"; fail "an old report"; }
start=$(date +%s)
(sleep 1; dcr-commit -q --store "$S" --policy pol --receiver rb --version 3 --failed "still no manifest") &
run 1 dcr-commit --store "$S" --policy pol --version 3 --expect 1 --state "$S3" --timeout 60
wait
[ $(($(date +%s) - start)) -lt 20 ] || fail "a report that came during the wait did not end it"
grep -q "1 receiver failed it, 'rb': still no manifest" "$T/err" || { cat "$T/err"; fail "the new report"; }
say "ok: an attempt-less report counts when it comes during the wait"

# a report that a hostile store holds: an escape sequence and 60 KB
rm -rf "$S/pol/acks/v3"
mkdir -p "$S/pol/acks/v3"
(sleep 1
 { printf 'dcr-nack 1\nversion 3\nreceiver rc\nerror \033]0;pwned\007'; head -c 60000 /dev/zero | tr '\0' x; printf '\n'; } >"$T/rc.tmp"
 printf 'dcr-nack 1\nversion 3\nreceiver rd\nerror \033[31mred\n' >"$T/rd.tmp"
 mv "$T/rc.tmp" "$S/pol/acks/v3/rc"; mv "$T/rd.tmp" "$S/pol/acks/v3/rd") &
run 1 dcr-commit --store "$S" --policy pol --version 3 --expect 1 --state "$S3" --timeout 60
wait
one_line_error dcr-commit
grep -q "$(printf '\033')" "$T/err" && fail "the trainer's error holds a raw escape"
grep -q "receivers\? failed it, 'rc': (a report dcr cannot read)" "$T/err" ||
	{ cat "$T/err"; fail "the long report"; }
run 0 dcr-commit --store "$S" --policy pol --status
grep -q "$(printf '\033')" "$T/out" && fail "the status holds a raw escape"
grep -q "^receiver rd: failed v3: \\\\x1b\[31mred$" "$T/out" || { cat "$T/out"; fail "status: the quoted report"; }
# what a receiver sends is one printable line, bounded
run 0 dcr-commit -q --store "$S" --policy pol --receiver re --version 3 --failed "$(printf 'a\tb\nc'; head -c 5000 /dev/zero | tr '\0' y)"
[ "$(wc -l <"$S/pol/acks/v3/re")" = 4 ] || fail "the report is not one line: $(cat "$S/pol/acks/v3/re")"
grep -q "^error a?b?cyyy" "$S/pol/acks/v3/re" || fail "control characters kept: $(cat "$S/pol/acks/v3/re")"
[ "$(sed -n 's/^error //p' "$S/pol/acks/v3/re" | tr -d '\n' | wc -c)" = 1000 ] || fail "the report is not cut to 1000 bytes"
say "ok: hostile and unruly reports are quoted and bounded"

run 129 dcr-commit --store "$S" --policy pol --version 3 --failed x
run 129 dcr-commit "$T/ra" --store "$S" --policy pol --receiver ra --version 3 --failed x
run 129 dcr-commit "$T/ra" --max-failed 1
