#!/bin/bash
# An interrupted command leaves no temporary file. Every atomic write is a
# hidden temporary file beside its final name (.NAME.tmp-PID-K), as large
# as a dense delta for -o; a command killed by SIGTERM (a job scheduler
# cancelling a refit), SIGINT (^C) or SIGHUP left it there for good. Now:
#   - dcr-pack --squash --delta -o, blocked on a FIFO input, dies of
#     SIGTERM, SIGHUP and SIGINT (its status the signal's) with no
#     temporary file left; a SIGINT ignored by its starter stays ignored;
#   - temporary files of processes killed with SIGKILL (which no handler
#     sees) are removed by the next write of the same pack directory and
#     the next apply of the receiver (.dcr/), those of live processes kept;
#   - dcr-pack -o DIR and dcr-pull -o DIR that fail on a full disk (a
#     64 KiB tmpfs, where the root user may mount one) say so, and leave
#     neither a temporary file nor the new empty directory DIR.
if [ -z "${BASH_VERSION:-}" ]; then
	command -v bash >/dev/null 2>&1 || { echo "SKIP: bash is missing"; exit 77; }
	exec bash "$0" "$@"
fi
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-push dcr-pull gen-checkpoint mkfifo

run 0 gen-checkpoint -q --size 1M --steps 2 "$T/g"
run 0 dcr-diff -q "$T/g/v0" "$T/g/v1" -o "$T/d1"
run 0 dcr-diff -q "$T/g/v1" "$T/g/v2" -o "$T/d2"

# temps DIR: the temporary files of atomic writes under DIR
temps() { find "$1" -name '.*.tmp-*' | sort; }

# squash_blocked: dcr-pack --squash --delta -o $T/sq.out with its first
# delta a FIFO that gets 4000 bytes and then waits for $T/go; sets pid
# (the command's) and feeder
squash_blocked() {
	rm -f "$T/f1" "$T/go" "$T/sq.out"
	mkfifo "$T/f1"
	(head -c 4000 "$T/d1"
	 for _ in $(seq 600); do [ -e "$T/go" ] && break; sleep 0.05; done
	 tail -c +4001 "$T/d1") >"$T/f1" &
	feeder=$!
	"$@" dcr-pack -q --squash --base "$T/g/v0" --delta -o "$T/sq.out" "$T/f1" "$T/d2" \
		2>"$T/sq.err" &
	pid=$!
	for _ in $(seq 200); do [ -n "$(temps "$T")" ] && break; sleep 0.05; done
	[ -n "$(temps "$T")" ] || fail "dcr-pack --squash -o never made its temporary file"
}

for sig in TERM HUP INT; do
	# the signal at its default action, as for a foreground command at a
	# terminal: a background job of a script starts with SIGINT ignored,
	# and under nohup (a test run started with it) SIGHUP is ignored too
	squash_blocked python3 -S -c 'import os, signal, sys
signal.signal(getattr(signal, "SIG" + sys.argv[1]), signal.SIG_DFL)
os.execvp(sys.argv[2], sys.argv[2:])' $sig
	kill -$sig $pid
	rc=0
	wait $pid || rc=$?
	touch "$T/go"
	wait $feeder 2>/dev/null || true
	[ $rc = $((128 + $(kill -l $sig))) ] || fail "SIG$sig: dcr-pack exited $rc: $(cat "$T/sq.err")"
	[ -z "$(temps "$T")" ] || fail "SIG$sig left $(temps "$T")"
	[ ! -e "$T/sq.out" ] || fail "SIG$sig: an output appeared"
done

# SIGINT ignored when it starts stays ignored (then SIGTERM ends it)
squash_blocked
kill -INT $pid
sleep 0.3
kill -0 $pid 2>/dev/null || fail "an ignored SIGINT killed dcr-pack"
kill -TERM $pid
wait $pid || true
touch "$T/go"
wait $feeder 2>/dev/null || true
[ -z "$(temps "$T")" ] || fail "SIGTERM after an ignored SIGINT left $(temps "$T")"

# a pack directory and a receiver
run 0 dcr-pack -q --payload-size 4K -o "$T/p" "$T/d1"
mkdir "$T/store"
run 0 dcr-push -q "$T/p" "$T/store/v1"
run 0 dcr-pull -q -j 4 -o "$T/o" "$T/store/v1"
cp -r "$T/g/v0" "$T/r"
run 0 dcr-apply -q "$T/r" "$T/o"

# SIGKILL: what no handler saw is removed by the next write there; a live
# process's temporary file is kept
sh -c 'echo $$ >"$1"' sh "$T/deadpid"
dead=$(cat "$T/deadpid")
kill -0 "$dead" 2>/dev/null && skip "pid $dead was reused at once"
live=$$
touch "$T/o/.payload-000000.dcrp.tmp-$dead-0" "$T/o/.manifest.dcrm.tmp-$live-0"
run 0 dcr-pull -q -o "$T/o" "$T/store/v1"
[ "$(temps "$T/o")" = "$T/o/.manifest.dcrm.tmp-$live-0" ] ||
	fail "pull -o DIR: temporary files after it: $(temps "$T/o")"
touch "$T/r/.dcr/.state.tmp-$dead-2" "$T/r/.dcr/.state.tmp-$live-0"
run 0 dcr-apply -q "$T/r" "$T/d2"
[ "$(temps "$T/r")" = "$T/r/.dcr/.state.tmp-$live-0" ] ||
	fail "apply: temporary files in .dcr after it: $(temps "$T/r")"
run 0 dcr-verify -q "$T/r" --against "$T/g/v2"

# a full disk at the first payload: no new empty directory stays behind
if [ "$(id -u)" = 0 ] && mkdir -p "$T/mnt" && mount -t tmpfs -o size=64k tmpfs "$T/mnt" 2>/dev/null; then
	trap 'umount "$T/mnt" 2>/dev/null || true; rm -rf "$T"' EXIT
	run 0 dcr-diff -q --dense "$T/g/v1" -o "$T/dense"
	run 0 dcr-pack -q -o "$T/pd" "$T/dense"
	run 0 dcr-push -q "$T/pd" "$T/store/dense"
	[ "$(stat -c %s "$T/pd/payload-000000.dcrp")" -gt 65536 ] || fail "the test's payload fits 64 KiB"
	run 128 dcr-pack -q -o "$T/mnt/p" "$T/dense"
	grep -q "No space left on device" "$T/err" || fail "pack -o on a full disk: $(cat "$T/err")"
	run 128 dcr-pull -q -o "$T/mnt/o" "$T/store/dense"
	grep -q "No space left on device" "$T/err" || fail "pull -o on a full disk: $(cat "$T/err")"
	left=$(find "$T/mnt" -mindepth 1)
	[ -z "$left" ] || fail "a full disk left: $left"
	umount "$T/mnt"
fi
say "ok: interrupted commands leave no temporary files; killed ones' are cleared"
