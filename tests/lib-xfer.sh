# lib-xfer.sh - sourced by the transport tests (tests/t06*.sh): the helpers
# of lib-store.sh (scratch directory $T, loopback servers killed at exit,
# expect_fail, contains) plus checkpoints, receivers, pipelines whose every
# stage's exit status is checked, and before/after snapshots of a receiver.
. "$DCR_SRC/tests/lib-store.sh"

need dcr-diff dcr-pack dcr-push dcr-pull dcr-apply dcr-verify gen-checkpoint
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

# gen SIZE STEPS [ARGS...]: synthetic checkpoints $T/g/v0 .. $T/g/vSTEPS.
gen() {
	size=$1 steps=$2
	shift 2
	gen-checkpoint -q --size "$size" --steps "$steps" --shards 2 "$@" "$T/g" ||
		fail "gen-checkpoint exited $?"
}

# receiver NAME [VERSION]: a receiver $T/NAME holding $T/g/vVERSION (default v0).
receiver() {
	rm -rf "${T:?}/$1"
	cp -r "$T/g/v${2:-0}" "$T/$1"
}

# snapshot DIR: sha256 of every file under DIR but its .dcr/ state directory.
snapshot() {
	(cd "$1" && find . -path ./.dcr -prune -o -type f -print | LC_ALL=C sort |
		xargs -r sha256sum)
}

# untouched DIR SNAPFILE: DIR's files hash as they did in SNAPFILE.
untouched() {
	snapshot "$1" >"$T/snap.now"
	cmp -s "$2" "$T/snap.now" || { diff "$2" "$T/snap.now" | head; fail "$1 was modified"; }
}

# same CKPT REF: dcr-verify --against finds CKPT identical to REF.
same() {
	dcr-verify "$1" --against "$2" >"$T/verify.out" 2>&1 ||
		fail "dcr-verify $1 --against $2 exited $?: $(cat "$T/verify.out")"
}

# st NAME CMD...: run CMD as one stage of a pipeline: its stderr goes to
# $T/NAME.err and its exit status to $T/NAME.rc; st itself always succeeds.
st() {
	_st_n=$1
	shift
	_st_rc=0
	"$@" 2>"$T/$_st_n.err" || _st_rc=$?
	echo "$_st_rc" >"$T/$_st_n.rc"
}

# rc_is NAME STATUS: the stage NAME exited STATUS.
rc_is() {
	got=$(cat "$T/$1.rc")
	[ "$got" = "$2" ] || fail "stage $1 exited $got, want $2: $(cat "$T/$1.err")"
}

# one_line NAME CMDNAME: the stage NAME printed one line, "CMDNAME: error: ...";
# the line is left in ERR.
one_line() {
	ERR=$(cat "$T/$1.err")
	[ "$(wc -l <"$T/$1.err")" = 1 ] || fail "stage $1 did not print one line: $ERR"
	contains "$ERR" "$2: error: "
}

# publish STORE/NAME [PACK-ARGS...]: dcr-diff v0 v1 | dcr-pack | dcr-push, all checked.
publish() {
	dest=$1
	shift
	st diff dcr-diff "$T/g/v0" "$T/g/v1" | st pack dcr-pack --linger 0 "$@" | st push dcr-push -q - "$dest"
	rc_is diff 0
	rc_is pack 0
	rc_is push 0
}

# refit NAME [DCR-PULL ARGS...] URL: a fresh receiver $T/NAME at v0, then
# dcr-pull | dcr-apply: both exit 0 and $T/NAME is bit-identical to v1.
refit() {
	_rn=$1
	shift
	receiver "$_rn"
	st pull dcr-pull -q "$@" | st apply dcr-apply -q "$T/$_rn"
	rc_is pull 0
	rc_is apply 0
	same "$T/$_rn" "$T/g/v1"
}

# tiled LOG URLPATH DIR: the successful GETs of each payload of pack DIR
# that server log LOG holds for URLPATH (e.g. /store/v1) read every byte
# of it exactly once: a whole GET, or Range parts that tile it.
tiled() {
	for f in $(cd "$3" && ls payload-*.dcrp); do
		size=$(wc -c <"$3/$f")
		grep "^GET $2/$f 20[06]" "$1" | grep -v ' CUT' | awk -v size="$size" '
			BEGIN { n = 0 }
			$3 == 200 { lo[n] = 0; hi[n++] = size - 1; next }
			{ split(substr($4, 13), r, "-"); lo[n] = r[1] + 0; hi[n++] = r[2] + 0 }
			END {
				for (i = 0; i < n; i++) for (j = i + 1; j < n; j++)
					if (lo[j] < lo[i]) { t = lo[i]; lo[i] = lo[j]; lo[j] = t; t = hi[i]; hi[i] = hi[j]; hi[j] = t }
				at = 0
				for (i = 0; i < n; i++) { if (lo[i] != at) exit 1; at = hi[i] + 1 }
				exit at != size
			}' || fail "the GETs of $f do not read it exactly once: $(grep "^GET $2/$f " "$1")"
	done
}

# pyrun SCRIPT ARGS...: python3 -c SCRIPT, failing the test if it fails.
pyrun() {
	python3 -c "$@" || fail "python3 helper exited $?"
}

# gated_publish DEST BYTES [PACK-ARGS...]: in the background,
# dcr-diff v0 v1 | gate | dcr-pack | dcr-push - DEST, joined by FIFOs so that
# each stage is a process of its own in PIDS (killed at exit), where the gate
# passes the first BYTES of the delta and holds the rest until open_gate.
# Sets DIFFPID and PUSHPID; wait_published waits for every stage and checks
# its exit status.
gated_publish() {
	dest=$1 pass=$2
	shift 2
	rm -f "$T/delta.fifo" "$T/gated.fifo" "$T/packed.fifo" "$T/release"
	mkfifo "$T/delta.fifo" "$T/gated.fifo" "$T/packed.fifo"
	dcr-diff "$T/g/v0" "$T/g/v1" >"$T/delta.fifo" 2>"$T/diff.err" &
	DIFFPID=$!
	python3 -c "$GATE" "$pass" "$T/release" <"$T/delta.fifo" >"$T/gated.fifo" 2>"$T/gate.err" &
	GATEPID=$!
	dcr-pack --linger 0 "$@" <"$T/gated.fifo" >"$T/packed.fifo" 2>"$T/pack.err" &
	PACKPID=$!
	dcr-push -q - "$dest" <"$T/packed.fifo" 2>"$T/push.err" &
	PUSHPID=$!
	PIDS="$PIDS $DIFFPID $GATEPID $PACKPID $PUSHPID"
}
# The gate gives up (exit 1) if the scratch directory goes away, so a failed
# test never leaves it behind.
GATE='
import os, sys, time
n, release = int(sys.argv[1]), sys.argv[2]
i, o = sys.stdin.buffer, sys.stdout.buffer
def copy(left):
    while left is None or left > 0:
        b = i.read(65536 if left is None else min(65536, left))
        if not b:
            break
        o.write(b)
        o.flush()
        if left is not None:
            left -= len(b)
copy(n)
while not os.path.exists(release):
    if not os.path.isdir(os.path.dirname(release)):
        sys.exit(1)
    time.sleep(0.02)
copy(None)
'
open_gate() {
	touch "$T/release"
}
wait_published() {
	for _wp in diff:$DIFFPID gate:$GATEPID pack:$PACKPID push:$PUSHPID; do
		_wp_rc=0
		wait "${_wp#*:}" || _wp_rc=$?
		[ "$_wp_rc" = 0 ] || fail "${_wp%%:*} exited $_wp_rc: $(cat "$T/${_wp%%:*}.err")"
	done
}

# wait_for FILE WHAT: poll (20 ms) until FILE exists, at most 60 s; fail if
# gated_publish's dcr-push ends first.
wait_for() {
	i=0
	while [ ! -e "$1" ]; do
		kill -0 "$PUSHPID" 2>/dev/null ||
			fail "the push ended before $2: $(cat "$T/pack.err" "$T/push.err" 2>/dev/null)"
		i=$((i + 1))
		[ $i -lt 3000 ] || fail "$2 did not happen in 60 s"
		sleep 0.02
	done
}

# proc_running PID: PID has not exited (running or sleeping, not a zombie).
proc_running() {
	s=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || true
	case $s in R | S | D) return 0 ;; *) return 1 ;; esac
}

# packtar SRC DST OP ARGS...: tests/packtar.py (see there).
packtar() {
	python3 "$DCR_SRC/tests/packtar.py" "$@" || fail "packtar.py $* exited $?"
}

# refused NAME CMDNAME CAUSE CKPT: stage NAME exited 128 with one line,
# "CMDNAME: error: ..." holding CAUSE, and CKPT still matches $T/snap.
refused() {
	rc_is "$1" 128
	one_line "$1" "$2"
	contains "$ERR" "$3"
	untouched "$4" "$T/snap"
}

# The server-fault scenarios of t0650 (HTTP) and t0651 (S3), against a
# server just started with the matching fault option. S is the store URL
# of the pack, OBJ the path the server logs for it ("/store/v1"), LOG the
# server's log; the pack is $T/p, the target $T/g/v1.
#
# fault_500_twice S OBJ LOG: every request is answered 500 twice, then
# served: push and pull | apply retry and end bit-identical, and the log
# shows 500 500 200 for every PUT and GET of every object (206 for GETs of
# payload parts, checked piece by piece as they arrive).
fault_500_twice() {
	st push dcr-push -q "$T/p" "$1/v1"
	rc_is push 0
	refit r "$1/v1"
	for f in $(ls "$T/p"); do
		for m in PUT GET; do
			got=$(grep "^$m $2/$f " "$3" | cut -d' ' -f3 | tr '\n' ' ')
			case $m.$f.$got in
			PUT.*.'500 500 200 ' | GET.manifest.dcrm.'500 500 200 ') ;;
			GET.payload-*.'500 500 200 ' | GET.payload-*.'500 500 206 '*) ;;
			*) fail "$m $f: statuses '$got', want 500 500 200" ;;
			esac
		done
	done
}

# fault_cut_once S OBJ LOG: the first GET of each object is cut half way:
# dcr-pull resumes payload 1 with a Range request from where the cut left
# it and the refit is exact.
fault_cut_once() {
	run_ok dcr-push -q "$T/p" "$1/v1"
	refit r "$1/v1"
	cut=$(grep "^GET $2/payload-000001.dcrp 20[06] .*CUT" "$3") || fail "no cut GET in the log"
	# a whole GET (200) resumes at some byte > 0; a part (206 A-B) at
	# some byte of it past A, up to the same B
	case $cut in
	*' 200 '*) want='206 range=bytes=[1-9][0-9]*-' ;;
	*) a=${cut#*range=bytes=}; b=${a#*-}; a=${a%%-*}; b=${b%% *}
	   want="206 range=bytes=[0-9]*-$b\$" ;;
	esac
	grep "^GET $2/payload-000001.dcrp $want" "$3" | grep -v CUT |
		awk -v a="${a:-0}" '{ split(substr($4, 13), r, "-"); if (r[1] + 0 > a + 0) ok = 1 } END { exit !ok }' ||
		fail "dcr-pull did not resume payload 1 with a Range request: $(grep payload-000001 "$3")"
}

# fault_always_cut S: payload 1 is cut on every GET: dcr-pull gives up
# with one line naming the object, and the receiver is untouched.
fault_always_cut() {
	run_ok dcr-push -q "$T/p" "$1/v1"
	receiver r
	snapshot "$T/r" >"$T/snap"
	st pull dcr-pull -q --retries 2 "$1/v1" | st apply dcr-apply -q "$T/r"
	rc_is pull 128
	one_line pull dcr-pull
	contains "$ERR" "cannot GET '$1/v1/payload-000001.dcrp'"
	contains "$ERR" "gave up after 3 attempts"
	rc_is apply 128
	one_line apply dcr-apply
	untouched "$T/r" "$T/snap"
}
