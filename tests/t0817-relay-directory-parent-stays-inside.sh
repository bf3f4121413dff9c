#!/bin/sh
# A relay over a directory store serves only what lies under it. Somebody
# who can write into the store puts symbolic links there: to a file of the
# relay's machine, to a directory outside the store, to a FIFO outside
# that a writer waits on, and links that stay inside: relative, absolute,
# and one that climbs out and back in. Through the relay the ones leading
# out are 404 (the file's bytes never served, the FIFO never opened: its
# writer still waits) and no listing names them; the ones inside are
# served, both ways the relay checks, and a refit through the relay is
# exact. dcr-pull straight from the directory (no relay) still follows
# the links an operator set up.
. "$DCR_SRC/tests/lib-relay.sh"
gen 1M 1
S="$T/store"
publish "$S/v1" -s 256K
printf 'TOPSECRET-file\n' >"$T/secret"
mkdir "$T/outside"
printf 'TOPSECRET-dir\n' >"$T/outside/key"
ln -s "$T/secret" "$S/v1/leak"
ln -s "$T/outside" "$S/ldir"
ln -s ../secret "$S/rel-leak"
ln -s v1 "$S/alias"
ln -s "$S/v1" "$S/absalias"
ln -s ../store/v1 "$S/climb"
mkfifo "$T/fifo"
ln -s "$T/fifo" "$S/v1/pipe"
(exec 3>"$T/fifo" && echo opened >"$T/fifo-opened") &
FIFO_PID=$!
# twice: with openat2(2), and as on a kernel without it (the opened
# file's own path checked against the store's)
for how in openat2 proc; do
if [ $how = proc ]; then
	stop_relay "$A_PID"
	DCR_TEST_NO_OPENAT2=1
	export DCR_TEST_NO_OPENAT2
fi
start_relay a "$S"
A=$RURL A_PID=$RPID

for p in v1/leak ldir/key rel-leak v1/pipe; do
	[ "$(http_code "$A/$p")" = 404 ] || fail "'$p' through the relay is not 404: $(cat "$T/body")"
	! grep -q TOPSECRET "$T/body" || fail "'$p': the relay served a file outside its store"
	[ "$(http_code -I "$A/$p")" = 404 ] || fail "HEAD of '$p' is not 404"
done
for q in "" "v1/" "ldir/" "l"; do
	[ "$(http_code "$A/?prefix=$q")" = 200 ] || fail "listing '$q': $(cat "$T/body")"
	! grep -q "leak\|ldir" "$T/body" || fail "listing '$q' names a link out of the store: $(cat "$T/body")"
done
http_code "$A/?prefix=" >/dev/null
grep -q "v1/manifest.dcrm" "$T/body" || fail "the listing lacks v1/manifest.dcrm: $(cat "$T/body")"
http_code "$A/?prefix=alias/" >/dev/null
grep -q "alias/manifest.dcrm" "$T/body" || fail "the listing of alias/ lacks the link inside: $(cat "$T/body")"
[ "$(http_code "$A/alias/manifest.dcrm")" = 200 ] || fail "a link inside the store is not served"
cmp -s "$T/body" "$S/v1/manifest.dcrm" || fail "alias/manifest.dcrm is not v1's manifest"
for p in absalias climb; do
	[ "$(http_code "$A/$p/manifest.dcrm")" = 200 ] || fail "'$p', a link that lands inside, is not served ($how)"
	cmp -s "$T/body" "$S/v1/manifest.dcrm" || fail "$p/manifest.dcrm is not v1's manifest"
done
sleep 0.2
[ ! -e "$T/fifo-opened" ] || fail "the relay opened a FIFO outside its store ($how)"
refit r1 "$A/v1"
echo "ok: the relay serves nothing outside its directory ($how)"
done
unset DCR_TEST_NO_OPENAT2
exec 4<>"$T/fifo" # (lets the waiting writer go)
wait "$FIFO_PID" 2>/dev/null || :
exec 4>&-

# without a relay the directory store follows what an operator links
run_ok "$TOOL" "$S" get ldir/key
grep -q TOPSECRET-dir "$T/out" || fail "the directory store no longer follows links"
echo "ok: relay over a directory"
