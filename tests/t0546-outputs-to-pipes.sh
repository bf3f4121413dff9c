#!/bin/bash
# Outputs may be pipes: -o naming a FIFO, a process substitution
# (/dev/fd/N) or an open descriptor (/proc/self/fd/N) is written in place,
# as a stream, where a file is replaced atomically (a temporary file
# renamed onto the name). Renaming onto such a name replaced the FIFO with
# a regular file (its reader waited forever) and, run as root, replaced
# /dev/stdout or /dev/null themselves with a file. Covered: dcr-diff -o,
# dcr-pack -o (a tar stream, not a pack directory), dcr-pack --squash
# --delta -o, dcr-pull -o, dcr-layout generate -o and dcr-relay
# --port-file. A descriptor's offset and append mode are kept (the shell's
# >> stays an append); a descriptor that is not open is a clear error; a
# failed diff into a FIFO leaves the FIFO a FIFO and exits 128; -o naming a
# directory is refused before any work, and a pack's -o naming a regular
# file too. (Character
# devices take the FIFO's path; the test writes to none, so that a
# regression cannot replace /dev/null on the machine running it.)
if [ -z "${BASH_VERSION:-}" ]; then
	command -v bash >/dev/null 2>&1 || { echo "SKIP: bash is missing (process substitution)"; exit 77; }
	exec bash "$0" "$@"
fi
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-push dcr-pull dcr-layout gen-checkpoint
command -v mkfifo >/dev/null 2>&1 || skip "mkfifo is missing"

run 0 gen-checkpoint -q --size 1M --steps 2 "$T/g"
run 0 dcr-diff -q "$T/g/v0" "$T/g/v1" -o "$T/d1"
run 0 dcr-diff -q "$T/g/v1" "$T/g/v2" -o "$T/d2"

# same_delta A B: the same delta but for the attempt id (bytes 48-63,
# random per run) and the trailer's checksum over it (the last 32 bytes)
same_delta() {
	_n=$(stat -c %s "$2")
	[ "$(stat -c %s "$1")" = "$_n" ] &&
		cmp -s <(head -c 48 "$1") <(head -c 48 "$2") &&
		cmp -s <(head -c $((_n - 32)) "$1" | tail -c +65) <(head -c $((_n - 32)) "$2" | tail -c +65)
}

# fifo_run NAME CMD...: run CMD (its -o naming the FIFO $T/NAME) while cat
# reads the FIFO into $T/NAME.got; the FIFO must stay a FIFO.
fifo_run() {
	_f="$T/$1"
	shift
	rm -f "$_f" "$_f.got"
	mkfifo "$_f"
	cat "$_f" >"$_f.got" &
	_cat=$!
	set +e
	timeout 60 "$@" >"$T/out" 2>"$T/err"
	_rc=$?
	set -e
	if ! [ -p "$_f" ]; then
		kill $_cat 2>/dev/null || true
		fail "'$*' replaced the FIFO $_f with $(stat -c %F "$_f" 2>/dev/null || echo nothing)"
	fi
	# a command that never opened the FIFO leaves cat waiting: open it
	if kill -0 $_cat 2>/dev/null; then
		timeout 10 sh -c ': >"$1"' sh "$_f" || true
	fi
	wait $_cat || true
	return $_rc
}

# dcr-diff -o FIFO: the reader gets the delta, the FIFO stays
fifo_run fd dcr-diff -q "$T/g/v0" "$T/g/v1" -o "$T/fd" || fail "dcr-diff -o FIFO: $(cat "$T/err")"
same_delta "$T/fd.got" "$T/d1" || fail "dcr-diff -o FIFO: the reader got another delta"

# dcr-diff -o <(...): a process substitution
dcr-diff -q "$T/g/v0" "$T/g/v1" -o >(cat >"$T/ps.got") || fail "dcr-diff -o <(...)"
for _ in $(seq 50); do same_delta "$T/ps.got" "$T/d1" && break; sleep 0.1; done
same_delta "$T/ps.got" "$T/d1" || fail "dcr-diff -o >(...): the reader got another delta"

# /proc/self/fd/N: the descriptor itself, its append mode kept
printf 'head' >"$T/app"
dcr-diff -q "$T/g/v0" "$T/g/v1" -o /proc/self/fd/3 3>>"$T/app" || fail "dcr-diff -o /proc/self/fd/3"
[ "$(head -c 4 "$T/app")" = head ] || fail "-o /proc/self/fd/3 3>>FILE: the append was lost"
tail -c +5 "$T/app" >"$T/app.d"
same_delta "$T/app.d" "$T/d1" || fail "-o /proc/self/fd/3 3>>FILE: another delta after the head"
dcr-diff -q "$T/g/v0" "$T/g/v1" -o /proc/self/fd/1 >"$T/fd1" || fail "dcr-diff -o /proc/self/fd/1"
same_delta "$T/fd1" "$T/d1" || fail "-o /proc/self/fd/1 >FILE: another delta"
run 128 dcr-diff -q "$T/g/v0" "$T/g/v1" -o /proc/self/fd/9
grep -q "no such open descriptor" "$T/err" || fail "-o of a closed descriptor: $(cat "$T/err")"

# -o naming a directory: refused before the diff (not by the rename after)
mkdir "$T/adir"
run 128 dcr-diff -q "$T/g/v0" "$T/g/v1" -o "$T/adir"
grep -q "^dcr-diff: error: cannot write '$T/adir': Is a directory$" "$T/err" ||
	fail "-o DIR: $(cat "$T/err")"
[ -z "$(find "$T" -maxdepth 1 -name '.adir.tmp-*')" ] || fail "-o DIR left a temporary file"

# a pack's -o naming a regular file: refused before any work, one line
# naming what -o takes (it failed at the first payload with "cannot create
# a temporary file for 'FILE/payload-000000.dcrp': Not a directory")
echo keep >"$T/afile"
run 0 dcr-pack -q -o "$T/pd" "$T/d1"
run 0 dcr-push -q "$T/pd" "$T/st1/v1"
for cmd in "dcr-pack -q -o $T/afile $T/d1" "dcr-pack -q --squash -o $T/afile $T/d1 $T/d2" \
	"dcr-pull -q -o $T/afile $T/st1/v1"; do
	run 128 $cmd
	one_line_error "${cmd%% *}"
	grep -q "'$T/afile' exists and is not a directory: -o names a pack directory" "$T/err" ||
		fail "$cmd: $(cat "$T/err")"
	[ "$(cat "$T/afile")" = keep ] || fail "$cmd changed the file"
done

# a failed diff into a FIFO: exit 128, the FIFO stays (fifo_run checks)
rc=0
fifo_run bad dcr-diff -q "$T/g/v0" "$T/nonexistent" -o "$T/bad" || rc=$?
[ $rc = 128 ] || fail "a failed dcr-diff -o FIFO exited $rc"

# dcr-pack -o FIFO: a tar stream there, not a pack directory
run 0 dcr-pack -q "$T/d1"
mv "$T/out" "$T/p.tar"
fifo_run fp dcr-pack -q -o "$T/fp" "$T/d1" || fail "dcr-pack -o FIFO: $(cat "$T/err")"
run 0 dcr-pack --list --porcelain "$T/fp.got"
grep -q '^manifest	' "$T/out" || fail "dcr-pack -o FIFO: no pack in the stream"

# dcr-pack --squash --delta -o FIFO
run 0 dcr-pack -q --squash --base "$T/g/v0" --delta -o "$T/sq" "$T/d1" "$T/d2"
fifo_run fsq dcr-pack -q --squash --base "$T/g/v0" --delta -o "$T/fsq" "$T/d1" "$T/d2" ||
	fail "dcr-pack --squash --delta -o FIFO: $(cat "$T/err")"
same_delta "$T/fsq.got" "$T/sq" || fail "dcr-pack --squash --delta -o FIFO: another delta"

# dcr-pull -o FIFO: a tar stream, which dcr-apply takes
mkdir "$T/store"
run 0 dcr-push -q "$T/p.tar" "$T/store/step1"
fifo_run fpl dcr-pull -q -o "$T/fpl" "$T/store/step1" || fail "dcr-pull -o FIFO: $(cat "$T/err")"
cp -r "$T/g/v0" "$T/r"
run 0 dcr-apply -q "$T/r" "$T/fpl.got"
run 0 dcr-verify -q "$T/r" --against "$T/g/v1"

# dcr-layout generate -o FIFO
run 0 dcr-layout generate --config "$DCR_SRC/tests/layout/llama-gqa.json" --framework vllm --tp 2 -o "$T/map"
fifo_run fmap dcr-layout generate --config "$DCR_SRC/tests/layout/llama-gqa.json" --framework vllm \
	--tp 2 -o "$T/fmap" || fail "dcr-layout generate -o FIFO: $(cat "$T/err")"
cmp -s "$T/fmap.got" "$T/map" || fail "dcr-layout generate -o FIFO: another map"

# dcr-relay --port-file FIFO: a script reads the port as the relay starts
if command -v dcr-relay >/dev/null 2>&1; then
	rm -f "$T/pf"
	mkfifo "$T/pf"
	dcr-relay --listen 127.0.0.1:0 --port-file "$T/pf" "$T/store" 2>"$T/relay.log" &
	relay=$!
	port=$(timeout 30 cat "$T/pf") || true
	[ -p "$T/pf" ] || fail "dcr-relay --port-file replaced the FIFO"
	case $port in
	'' | *[!0-9]*) kill $relay; fail "dcr-relay --port-file FIFO gave '$port': $(cat "$T/relay.log")" ;;
	esac
	run 0 dcr-pull -q "http://127.0.0.1:$port/step1"
	kill $relay
	wait $relay || true
	# (the same pack: a tar stream's headers carry the time it was written)
	mv "$T/out" "$T/relay.tar"
	run 0 dcr-pack --list --porcelain "$T/relay.tar"
	mv "$T/out" "$T/relay.list"
	run 0 dcr-pack --list --porcelain "$T/fpl.got"
	cmp -s "$T/out" "$T/relay.list" || fail "the relay served another pack"
fi
say "ok: -o FIFO, <(...), /proc/self/fd/N written in place; the FIFOs stay FIFOs"
