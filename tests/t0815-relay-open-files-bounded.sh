#!/bin/sh
# A finished object holds no open file: each response opens the object's
# spool file for itself, so the files a relay has open follow the work in
# flight, not what its cache holds. Under a limit of 64 open files, a relay
# serves five packs of about 18 objects each (90 objects cached), and again
# after a restart that reloads them all from its cache, with no more
# files open at the end than at the start, plus a few (connections the
# relay has not seen closed yet).
. "$DCR_SRC/tests/lib-relay.sh"
S="$T/s"
gen_full 1M
publish "$S/v1" -s 8K
n=$(ls "$S/v1" | wc -l)
[ "$n" -ge 16 ] || fail "the pack has $n objects, want 16 or more"
for i in 2 3 4 5; do cp -r "$S/v1" "$S/v$i"; done
ulimit -n 64 || skip "cannot lower the open-file limit"

start_relay a --cache "$T/c" "$S"
base=$(ls "/proc/$RPID/fd" | wc -l)
for i in 1 2 3 4 5; do
	run_ok dcr-pull -q -o "$T/a$i" "$RURL/v$i"
done
open=$(ls "/proc/$RPID/fd" | wc -l)
[ "$open" -le $((base + 12)) ] || fail "the relay holds $open files open after 5 packs ($base at start)"
stop_relay "$RPID"
[ "$STOPPED" = 0 ] || fail "the relay exited $STOPPED: $(cat "$T/a.log")"

start_relay b --cache "$T/c" "$S"
[ "$(ls "/proc/$RPID/fd" | wc -l)" -le $((base + 12)) ] || fail "the relay opened its cache's files at start"
for i in 1 2 3 4 5; do
	run_ok dcr-pull -q -o "$T/b$i" "$RURL/v$i"
	for f in "$S/v1"/*; do
		cmp -s "$f" "$T/b$i/${f##*/}" || fail "v$i: ${f##*/} differs"
	done
done
open=$(ls "/proc/$RPID/fd" | wc -l)
[ "$open" -le $((base + 12)) ] || fail "the relay holds $open files open after a restart ($base at start)"
exit 0
