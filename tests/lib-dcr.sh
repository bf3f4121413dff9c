# lib-dcr.sh - shared helpers for tests/tNNNN-*.sh (sourced, POSIX sh).
#
# Sets T (a temporary directory removed at exit) and MKST (tests/mkst.py),
# and checks the commands the tests need. Every dcr command's output is
# captured to $T/out and $T/err and its exit status checked before anything
# greps it.

set -eu

: "${DCR_SRC:?DCR_SRC must name the source directory}"
T=$(mktemp -d "${TMPDIR:-/tmp}/dcr-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
say() { echo "$*"; }
# need CMD...: skip unless every CMD is on PATH.
need() {
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || skip "$c is not on PATH"
	done
}

need dcr-diff dcr-apply dcr-verify
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
# (-S: the helpers need only the standard library, and a site-packages
# full of .pth files costs a tenth of a second a start)
MKST="python3 -S $DCR_SRC/tests/mkst.py"

# sanitized: true in a build with AddressSanitizer and UBSan (make check
# exports the flags configure chose as DCR_SAN_CFLAGS).
sanitized() { [ -n "${DCR_SAN_CFLAGS:-}" ]; }

# small_quarantine: ASan keeps 256 MiB of freed memory in quarantine by
# default, resident like any other; keep 8 MiB (no effect unsanitized).
small_quarantine() {
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8"
	export ASAN_OPTIONS
}

# run EXPECTED CMD...: run CMD with stdout in $T/out, stderr in $T/err;
# fail unless it exits EXPECTED.
run() {
	_want=$1
	shift
	set +e
	"$@" >"$T/out" 2>"$T/err"
	_got=$?
	set -e
	if [ "$_got" != "$_want" ]; then
		echo "FAIL: '$*' exited $_got, expected $_want" >&2
		head -c 2000 "$T/out" | cat -v | sed 's/^/  stdout: /' | head -20 >&2
		sed 's/^/  stderr: /' "$T/err" | head -20 >&2
		exit 1
	fi
}

# need_gnu_time: skip unless GNU time(1) is /usr/bin/time; sets TIME.
need_gnu_time() {
	TIME=/usr/bin/time
	[ -x "$TIME" ] && "$TIME" -f %M true >/dev/null 2>&1 || skip "GNU time(1) is missing"
}

# peak_rss EXPECTED CMD...: run CMD as run does (stdout in $T/out, stderr in
# $T/err), fail unless it exits EXPECTED, print its peak RSS in MiB (the
# kernel's maxrss, as GNU time -f %M gives it; need_gnu_time first).
peak_rss() {
	_want=$1
	shift
	set +e
	"$TIME" -f %M -o "$T/rss" "$@" >"$T/out" 2>"$T/err"
	_got=$?
	set -e
	[ "$_got" -eq "$_want" ] || { cat "$T/err" >&2; fail "'$*' exited $_got, expected $_want"; }
	echo $(( $(tail -n 1 "$T/rss") / 1024 ))
}

# one_line_error CMDNAME: $T/err holds exactly one line, starting "CMDNAME: ".
one_line_error() {
	_n=$(wc -l <"$T/err")
	[ "$_n" -eq 1 ] || { cat "$T/err" >&2; fail "expected one line on stderr, got $_n"; }
	grep -q "^$1: " "$T/err" || { cat "$T/err" >&2; fail "stderr does not start with '$1: '"; }
}

# mmap_shim: build tests/mmap-shim.c (an LD_PRELOAD shim that changes a
# file right after a command maps it) into SHIM, or skip the test.
mmap_shim() {
	SHIM="$T/mmap-shim.so"
	"${DCR_CC:-cc}" -shared -fPIC -O1 -o "$SHIM" "$DCR_SRC/tests/mmap-shim.c" -ldl \
		2>"$T/cc.err" || skip "cannot build the LD_PRELOAD shim: $(head -1 "$T/cc.err")"
	# (an ASan build wants its runtime first among the libraries; the
	# shim only forwards mmap to it)
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
	export ASAN_OPTIONS
}

# snapshot DIR: sha256 of every file of the checkpoint outside .dcr/.
snapshot() {
	(cd "$1" && find . -path ./.dcr -prune -o -type f -print | LC_ALL=C sort |
		xargs -r sha256sum)
}

# state_id CKPT: print the state id.
state_id() {
	run 0 dcr-verify "$1"
	cat "$T/out"
}

# lagging_chain G S N: the policy "pol" in store S committed at v0..vN of
# the generated chain G (gen-checkpoint --steps N), each step diffed,
# packed ($T/pV) and pushed; receiver $T/ra applies and acknowledges every
# version, $T/rb only v1 and then stops (a receiver left behind).
lagging_chain() {
	run 0 dcr-commit --store "$2" --policy pol --version 0 --expect 0 --state "$(state_id "$1/v0")"
	rm -rf "$T/ra" "$T/rb"
	cp -r "$1/v0" "$T/ra"
	cp -r "$1/v0" "$T/rb"
	_v=1
	while [ $_v -le "$3" ]; do
		run 0 dcr-diff "$1/v$((_v - 1))" "$1/v$_v" -o "$T/d$_v"
		run 0 dcr-pack -o "$T/p$_v" "$T/d$_v"
		run 0 dcr-push -q "$T/p$_v" "$2/pol/v$_v"
		run 0 dcr-apply -q --version $_v "$T/ra" "$T/p$_v"
		run 0 dcr-commit -q "$T/ra" --store "$2" --policy pol --receiver ra
		if [ $_v = 1 ]; then
			run 0 dcr-apply -q --version 1 "$T/rb" "$T/p1"
			run 0 dcr-commit -q "$T/rb" --store "$2" --policy pol --receiver rb
		fi
		run 0 dcr-commit -q --store "$2" --policy pol --version $_v --expect 1
		_v=$((_v + 1))
	done
}

# same CKPT REF: CKPT holds exactly REF's tensors, checked three ways:
# dcr-verify --against, equal state ids, and mkst.py's independent compare.
same() {
	run 0 dcr-verify "$1" --against "$2"
	_a=$(state_id "$1")
	_b=$(state_id "$2")
	[ "$_a" = "$_b" ] || fail "state ids differ: $_a vs $_b"
	run 0 $MKST same "$1" "$2"
}

# same_fast CKPT REF: dcr-verify --against and equal state ids only.
same_fast() {
	run 0 dcr-verify "$1" --against "$2"
	[ "$(state_id "$1")" = "$(state_id "$2")" ] || fail "state ids differ"
}

# differs CKPT REF: dcr-verify --against finds a difference (exit 1).
differs() {
	run 1 dcr-verify "$1" --against "$2"
	run 1 $MKST same "$1" "$2"
}

# roundtrip A B: copy A to a receiver, dcr-diff A B | dcr-apply, prove it equals B.
roundtrip() {
	rm -rf "$T/rt"
	if [ -d "$1" ]; then cp -r "$1" "$T/rt"; else mkdir "$T/rt" && cp "$1" "$T/rt/"; fi
	run 0 dcr-diff "$1" "$2"
	mv "$T/out" "$T/rt.delta"
	run 0 dcr-apply "$T/rt" "$T/rt.delta"
	same "$T/rt" "$2"
	[ ! -e "$T/rt/.dcr/journal" ] || fail "journal left behind after a successful apply"
}

# crash_committed A DELTA DIR [fresh]: DIR a copy of A (fresh: without
# A's .dcr/) in which dcr-apply DELTA was killed (DCR_FAULT_AT) at the
# first durable step after which its journal stands committed; FAULT is
# that step.
crash_committed() {
	FAULT=1
	while :; do
		rm -rf "$3"
		cp -r "$1" "$3"
		[ -z "${4:-}" ] || rm -rf "$3/.dcr"
		_rc=0
		(DCR_FAULT_AT=$FAULT exec dcr-apply -q "$3" "$2") >/dev/null 2>"$T/err" || _rc=$?
		[ $_rc -ne 0 ] || fail "no fault point with a journal pending"
		[ $_rc -eq 137 ] || { cat "$T/err" >&2; fail "DCR_FAULT_AT=$FAULT: exit $_rc, not killed"; }
		[ ! -e "$3/.dcr/journal" ] || return 0
		FAULT=$((FAULT + 1))
		[ $FAULT -lt 200 ] || fail "never a journal"
	done
}

# crash_loop A B: for N = 1, 2, ... kill dcr-apply (DCR_FAULT_AT=N: SIGKILL
# at its Nth durable step) turning a copy of A into B, until a run passes
# every step. After each kill the receiver must be A or B exactly, never a
# mix (checked after `dcr-apply --recover` on every other N), and rerunning
# dcr-apply with the same delta must end bit-identical to B. Sets FAULTS to
# the number of faults injected.
crash_loop() {
	run 0 dcr-diff "$1" "$2"
	mv "$T/out" "$T/crash.delta"
	_ida=$(state_id "$1")
	_idb=$(state_id "$2")
	FAULTS=0
	_fn=1
	while :; do
		rm -rf "$T/cr"
		cp -r "$1" "$T/cr"
		set +e
		DCR_FAULT_AT=$_fn dcr-apply "$T/cr" "$T/crash.delta" >"$T/out" 2>"$T/err"
		_rc=$?
		set -e
		if [ $_rc -eq 0 ]; then
			same "$T/cr" "$2"
			break
		fi
		[ $_rc -eq 137 ] || { cat "$T/err" >&2; fail "DCR_FAULT_AT=$_fn: exit $_rc, not killed"; }
		FAULTS=$((FAULTS + 1))
		if [ $((_fn % 2)) -eq 0 ]; then
			run 0 dcr-apply --recover "$T/cr"
			_id=$(state_id "$T/cr")
			[ "$_id" = "$_ida" ] || [ "$_id" = "$_idb" ] ||
				fail "DCR_FAULT_AT=$_fn: after --recover the receiver is neither A nor B"
		fi
		run 0 dcr-apply "$T/cr" "$T/crash.delta"
		same_fast "$T/cr" "$2"
		[ ! -e "$T/cr/.dcr/journal" ] || fail "DCR_FAULT_AT=$_fn: journal left behind"
		# and once more: a finished receiver stays at B
		run 0 dcr-apply "$T/cr" "$T/crash.delta"
		[ "$(state_id "$T/cr")" = "$_idb" ] || fail "DCR_FAULT_AT=$_fn: a second apply moved the receiver"
		_fn=$((_fn + 1))
		[ $_fn -le 500 ] || fail "dcr-apply never finished under DCR_FAULT_AT"
	done
	[ $FAULTS -gt 0 ] || fail "DCR_FAULT_AT injected no fault: the hook is not wired"
}
