#!/bin/sh
# dcr-pull from a store holding bad objects, through the directory store and
# HTTP: a corrupted, truncated, missing or swapped payload (another
# payload's bytes, or the same index of another delta), a corrupted
# manifest, a FIFO in place of a payload in a directory store (pulled, or
# applied as a pack directory: refused without being opened). Each ends in exit 128 and one line naming
# the object by its store URL and the cause; dcr-pull | dcr-apply leaves
# the receiver's files as they were; restoring the object makes the same
# pull succeed.
. "$DCR_SRC/tests/lib-xfer.sh"
need_node
gen 8M 1
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 32K -o "$T/p" "$T/d"
st diff dcr-diff "$T/g/v0" "$T/g/v1" | st pack dcr-pack -s 32K -o "$T/other"
rc_is diff 0
rc_is pack 0
receiver r
snapshot "$T/r" >"$T/snap"
start_server http http-store.js
H="http://127.0.0.1:$PORT/store"

# put_obj STORE NAME FILE: replace one object (a file, or through store-tool)
put_obj() {
	run_ok "$TOOL" "$1" put "$2" "$3"
}
del_obj() {
	run_ok "$TOOL" "$1" delete "$2"
}
# broken STORE ENTRY CAUSE: pull must fail naming STORE/v1/ENTRY and CAUSE,
# pull | apply must leave the receiver alone
broken() {
	expect_fail 128 dcr-pull -q "$1/v1"
	contains "$ERR" "$1/v1/$2"
	contains "$ERR" "$3"
	st pull dcr-pull -q "$1/v1" | st apply dcr-apply -q "$T/r"
	rc_is pull 128
	rc_is apply 128
	one_line apply dcr-apply
	untouched "$T/r" "$T/snap"
}
restore() { # STORE ENTRY
	put_obj "$1" "v1/$2" "$T/p/$2"
}

for S in "$T/store" "$H"; do
	run_ok dcr-push -q "$T/p" "$S/v1"
	P1=payload-000001.dcrp
	python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[300] ^= 1; open(sys.argv[2], "wb").write(b)' \
		"$T/p/$P1" "$T/bad" || fail "python3"
	put_obj "$S" "v1/$P1" "$T/bad"
	case $S in # from a server, payloads are checked piece by piece
	http*) broken "$S" $P1 "does not match the manifest's digest (piece 0)" ;;
	*) broken "$S" $P1 "is corrupt: checksum mismatch" ;;
	esac
	head -c 1000 "$T/p/$P1" >"$T/bad"
	put_obj "$S" "v1/$P1" "$T/bad"
	broken "$S" $P1 "(truncated)"
	put_obj "$S" "v1/$P1" "$T/p/payload-000002.dcrp"
	broken "$S" $P1 "holds payload 2"
	put_obj "$S" "v1/$P1" "$T/other/$P1"
	broken "$S" $P1 "does not match the manifest's digest"
	del_obj "$S" "v1/$P1"
	case $S in
	http*) broken "$S" $P1 "404" ;;
	*) broken "$S" $P1 "no such object" ;;
	esac
	restore "$S" $P1
	case $S in
	http*) ;;
	*)	# a FIFO where an object was: refused, not waited on for a
		# writer (timeout only catches the hang)
		# writer, nor opened at all: a writer waiting on it still
		# waits (an open for reading would have let it go)
		rm "$S/v1/$P1" && mkfifo "$S/v1/$P1" || fail "mkfifo"
		rm -f "$T/fifo-opened"
		(exec 3>"$S/v1/$P1" && echo opened >"$T/fifo-opened") &
		fifo_writer=$!
		expect_fail 128 timeout 60 dcr-pull -q "$S/v1"
		contains "$ERR" "$S/v1/$P1"
		contains "$ERR" "not a regular file"
		# the same directory applied as a pack directory
		expect_fail 128 timeout 60 dcr-apply -q "$T/r" "$S/v1"
		contains "$ERR" "$S/v1/$P1"
		contains "$ERR" "not a regular file"
		untouched "$T/r" "$T/snap"
		sleep 0.2
		[ ! -e "$T/fifo-opened" ] || fail "the FIFO in the store was opened"
		exec 4<>"$S/v1/$P1" # (lets the writer go)
		wait "$fifo_writer" 2>/dev/null || :
		exec 4>&-
		rm "$S/v1/$P1"
		restore "$S" $P1 ;;
	esac
	python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[60] ^= 1; open(sys.argv[2], "wb").write(b)' \
		"$T/p/manifest.dcrm" "$T/bad" || fail "python3"
	put_obj "$S" v1/manifest.dcrm "$T/bad"
	broken "$S" manifest.dcrm "is corrupt: checksum mismatch"
	restore "$S" manifest.dcrm
	# into a directory: payloads are written and flushed in parallel, made
	# visible in order; a bad one leaves those before it, no temporary
	# file and no manifest, and a second pull finishes the job
	put_obj "$S" "v1/$P1" "$T/other/$P1"
	rm -rf "$T/o"
	expect_fail 128 dcr-pull -q -o "$T/o" "$S/v1"
	contains "$ERR" "$S/v1/$P1"
	[ -f "$T/o/payload-000000.dcrp" ] || fail "payload 0 is not in the directory"
	[ ! -e "$T/o/$P1" ] && [ ! -e "$T/o/manifest.dcrm" ] || fail "a bad pull left $(ls "$T/o")"
	[ -z "$(ls -A "$T/o" | grep tmp)" ] || fail "temporary files left: $(ls -A "$T/o")"
	restore "$S" $P1
	run_ok dcr-pull -q -o "$T/o" "$S/v1"
	for f in $(ls "$T/p"); do cmp -s "$T/p/$f" "$T/o/$f" || fail "$f differs after the second pull"; done
	[ -z "$(ls -A "$T/o" | grep tmp)" ] || fail "temporary files left: $(ls -A "$T/o")"
	# all restored: the same pull now works
	refit ok "$S/v1"
done
