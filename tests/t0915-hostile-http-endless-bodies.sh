#!/bin/sh
# An HTTP store that never stops sending. A server that ignores Range and
# sends a payload's bytes and then "x" without end kept dcr-pull reading
# forever (its part was there after the first bytes); pulled into a
# directory (whole objects in memory), the same payload grew dcr-pull
# without bound, and so did a manifest sent without end (4.7 GB in 20 s).
# Now a range stops at its end, a payload at the size its manifest lists,
# and anything else dcr_store_get reads at DCR_STORE_GET_MAX (1 GiB, the
# format's largest manifest): each pull ends, in one line where it fails.
# A manifest's signature is read up to 4 KiB, its limit (it was read up to
# 1 GiB). With --wait, before the manifest, a payload sent without end
# grew dcr-pull to 6.9 GB in 40 s (read up to 8 GiB, 4 at once); now it is
# read up to 128 MiB and, larger than that, waits for the manifest. A
# listing's names were each looked for in the whole list, CPU time
# quadratic in their number (40 000: 23 s, held past a --wait of 2 s);
# now they are sorted once, and 200 000 take a moment.
# A server that trickles (256 B/s, never silent) is dropped once a
# transfer has averaged under 16 KiB/s for the store's timeout.
. "$DCR_SRC/tests/lib-xfer.sh"
TIME=/usr/bin/time
[ -x "$TIME" ] && "$TIME" -f %M true >/dev/null 2>&1 || skip "GNU time(1) is missing"
# pull_bounded MIB SECONDS ARGS...: dcr-pull -q ARGS under GNU time exits 128
# within SECONDS, in one line, having taken under MIB MiB
pull_bounded() {
	_mib=$1 _s=$2
	shift 2
	rc=0
	timeout "$_s" "$TIME" -f %M -o "$T/rss" dcr-pull -q "$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc -eq 128 ] || fail "dcr-pull $* exited $rc: $(cat "$T/err")"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "not one line: $(cat "$T/err")"
	m=$(( $(tail -n 1 "$T/rss") / 1024 ))
	[ "$m" -lt "$_mib" ] || fail "dcr-pull $* took $m MiB"
}
gen 2M 1
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack -s 4K -o "$T/p" "$T/d"
run_ok dcr-push -q "$T/p" "$T/store/v1"
n=$(ls "$T/store/v1" | grep -c '^payload-')
[ "$n" -ge 2 ] || fail "the pack has $n payloads, the test wants several"

# pad: the manifest as it is; payloads with Range ignored, padded without end
start_py lie lie-server.py pad "$T/store"
# to a tar stream (ranged parts): each part taken, the rest left; the pack
# is the one pushed and applies
rc=0
timeout 120 dcr-pull -q --retries 1 "http://127.0.0.1:$PORT/v1" >"$T/s.tar" 2>"$T/err" || rc=$?
[ $rc -eq 0 ] || fail "dcr-pull from a server padding its payloads exited $rc: $(cat "$T/err")"
receiver r
run_ok dcr-apply -q "$T/r" "$T/s.tar"
same "$T/r" "$T/g/v1"
# into a directory (whole payloads in memory): stopped at the size the
# manifest lists, one line, small
pull_bounded 100 120 --retries 1 -o "$T/pd" "http://127.0.0.1:$PORT/v1"
contains "$(cat "$T/err")" "payload-0000"
contains "$(cat "$T/err")" "the server sends more than"
[ ! -e "$T/pd/manifest.dcrm" ] || fail "a refused pull left a manifest"

# flood: a manifest without end is refused at 1 GiB, the format's limit
kill $PIDS 2>/dev/null || :
start_py lie lie-server.py flood "$T/store"
rc=0
timeout 300 dcr-pull -q --retries 1 "http://127.0.0.1:$PORT/v1" >"$T/out" 2>"$T/err" || rc=$?
[ $rc -eq 128 ] || fail "dcr-pull of a manifest without end exited $rc: $(cat "$T/err")"
contains "$(cat "$T/err")" "manifest.dcrm': the server sends more than 1073741824 bytes"
echo "ok: a range stops at its end, a payload at its size, a manifest at 1 GiB"

# sigflood: the signature beside a manifest that names a version, sent
# without end, is refused at 4 KiB, the most a signature may be
kill $PIDS 2>/dev/null || :
run_ok dcr-pack --version 1 -s 4K -o "$T/pv" "$T/d"
run_ok dcr-push -q "$T/pv" "$T/store/vv"
start_py lie lie-server.py sigflood "$T/store"
pull_bounded 100 120 --retries 1 "http://127.0.0.1:$PORT/vv"
contains "$(cat "$T/err")" "manifest.dcrm.sig': the server sends more than 4096 bytes"
echo "ok: a signature sent without end is refused at 4 KiB"

# ahead: payloads listed, no manifest, each payload's body 512 MiB and
# cut off (1 TiB by HEAD): read up to 128 MiB, then it waits for the
# manifest, and is not fetched again each round; the wait ends in one line
kill $PIDS 2>/dev/null || :
start_py lie lie-server.py ahead
pull_bounded 400 60 -j 1 --wait 1 --retries 1 "http://127.0.0.1:$PORT/v1"
contains "$(cat "$T/err")" "no manifest for 'v1'"
contains "$(cat "$T/err")" "(0 payloads seen, then one over 128 MiB that waits for it)"
n=$(grep -c '^GET /v1/payload-000000.dcrp ' "$T/lie.log") || true
[ "$n" = 1 ] || fail "payload 0 was fetched $n times"
echo "ok: before the manifest, a payload sent without end is read up to 128 MiB"

# list: 200 000 payloads listed (last first), none there: the listing is
# taken in one pass, and the first payload's 404 ends the pull at once
kill $PIDS 2>/dev/null || :
start_py lie lie-server.py list
rc=0
timeout 20 dcr-pull -q --wait 60 --retries 1 "http://127.0.0.1:$PORT/v1" \
	>"$T/out" 2>"$T/err" || rc=$?
[ $rc -eq 128 ] || fail "dcr-pull --wait of a listing of 200 000 exited $rc (124: still at it): $(cat "$T/err")"
[ "$(wc -l <"$T/err")" = 1 ] || fail "not one line: $(cat "$T/err")"
contains "$(cat "$T/err")" "payload-000000.dcrp"
echo "ok: a listing of 200 000 payloads is taken in one pass"

# trickle: 256 bytes a second, never silent, held a transfer for ever (the
# floor was 1 byte a second); under 16 KiB/s for the timeout it has failed
kill $PIDS 2>/dev/null || :
start_py lie lie-server.py trickle "$T/store"
head -c 300000 /dev/urandom >"$T/store/big"
rc=0
timeout 60 "$DCR_BUILD/tests/store-tool" --timeout 2 --retries 0 "http://127.0.0.1:$PORT" get big \
	>"$T/out" 2>"$T/err" || rc=$?
[ $rc -eq 128 ] || fail "a GET trickled at 256 B/s exited $rc (124: it was still reading): $(cat "$T/err")"
contains "$(cat "$T/err")" "(gave up after 1 attempt"
contains "$(cat "$T/err")" "big"
contains "$(cat "$T/err")" "too slow"
echo "ok: a server trickling 256 B/s is dropped after the timeout"

# long206: a range answered 206 with the right Content-Range and then more
# without end was read for ever (only a 200 stopped at the range's end)
kill $PIDS 2>/dev/null || :
start_py lie lie-server.py long206 "$T/store"
rc=0
timeout 20 "$DCR_BUILD/tests/store-tool" --retries 0 "http://127.0.0.1:$PORT" get-range big 1000 5000 \
	>"$T/out" 2>"$T/err" || rc=$?
[ $rc -eq 0 ] || fail "a 206 without end: exit $rc (124: it was still reading): $(cat "$T/err")"
dd if="$T/store/big" bs=1000 skip=1 count=5 status=none | cmp - "$T/out" ||
	fail "the range read from a 206 without end differs"
echo "ok: a 206 that goes on past its range is read to the range's end"
