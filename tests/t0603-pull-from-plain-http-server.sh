#!/bin/sh
# A pack served by an HTTP server nobody here wrote: Python's http.server
# over the directory dcr-push wrote (GET and HEAD of files, no Range, an
# HTML page for a directory, 404 for anything else). dcr-pull | dcr-apply
# must end bit-identical to the new checkpoint: with small payloads, each
# fetched once; with payloads fetched in parts (--part-size), which this
# server answers with the whole file (200, no Content-Range); and with
# --wait, which follows a version already there. --wait for a version that
# never comes gives up after its time with one line, and the receiver is
# untouched.
. "$DCR_SRC/tests/lib-xfer.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

# serve_dir DIR: python3 -m http.server on a free loopback port; sets URL
serve_dir() {
	python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$1" >"$T/srv.out" 2>&1 &
	PIDS="$PIDS $!"
	i=0
	until port=$(sed -n 's/^Serving HTTP on .* port \([0-9][0-9]*\) .*/\1/p' "$T/srv.out") &&
		[ -n "$port" ]; do
		i=$((i + 1))
		[ $i -lt 200 ] || { cat "$T/srv.out"; fail "http.server did not start"; }
		sleep 0.05
	done
	URL="http://127.0.0.1:$port"
}

gen 32M 1
publish "$T/www/pol/v1" -s 64K
np=$(ls "$T/www/pol/v1" | grep -c '^payload-')
[ "$np" -ge 3 ] || fail "expected several payloads, made $np"
serve_dir "$T/www"

receiver r
st pull dcr-pull -q "$URL/pol/v1" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v1"
for f in "$T"/www/pol/v1/payload-*.dcrp; do
	n=$(grep -c "\"GET /pol/v1/$(basename "$f") " "$T/srv.out") || true
	[ "$n" = 1 ] || fail "$(basename "$f") was fetched $n times"
done

# payloads in parts: every value changes between two unrelated checkpoints
rm -rf "$T/g"
gen 8M 0
mv "$T/g/v0" "$T/a"
gen 8M 0 --seed 2
mv "$T/g/v0" "$T/g/v1"
mv "$T/a" "$T/g/v0"
publish "$T/www/pol/v2" -s 32M
big=$(wc -c <"$T/www/pol/v2/payload-000000.dcrp")
[ "$big" -gt $((2 << 20)) ] || fail "payload 0 is only $big bytes"
refit r2 --part-size 1M "$URL/pol/v2"
n=$(grep -c '"GET /pol/v2/payload-000000.dcrp HTTP/1.1" 200 ' "$T/srv.out") || true
[ "$n" -ge 2 ] || fail "payload 0 was not asked for in parts, each answered whole ($n GETs)"

# --wait: a version that is there, and one that never comes
refit r3 --wait 10 "$URL/pol/v2"
receiver r4
snapshot "$T/r4" >"$T/snap4"
st pull dcr-pull --wait 2 "$URL/pol/v3" | st apply dcr-apply -q "$T/r4"
rc_is pull 128
one_line pull dcr-pull
contains "$ERR" "no manifest for 'v3'"
[ "$(cat "$T/apply.rc")" != 0 ] || fail "dcr-apply took an empty stream"
untouched "$T/r4" "$T/snap4"

# a payload that ends 1 to 31 bytes past a part boundary: its last part
# would lie wholly in the 32-byte trailer, which no piece covers, and its
# check started past the pieces' end ("the part at 1048576 was not hashed
# whole"); such a tail goes with the part before it. 33 bytes past, the
# last part holds a byte of the last piece and the trailer.
for extra in 1 31 32 33; do
	"$DCR_BUILD/tests/hostile" oddsize $((1048576 + extra)) "$T/odd.tar" ||
		fail "hostile oddsize exited $?"
	dcr-push -q - "$T/www/odd/v$extra" <"$T/odd.tar" || fail "dcr-push of the odd pack exited $?"
	st pull dcr-pull -q --part-size 1M "$URL/odd/v$extra" >"$T/odd-$extra.tar"
	rc_is pull 0
	mkdir "$T/odd-$extra"
	tar -xf "$T/odd-$extra.tar" -C "$T/odd-$extra" || fail "tar -x exited $?"
	for f in payload-000000.dcrp manifest.dcrm; do
		cmp "$T/odd-$extra/$f" "$T/www/odd/v$extra/$f" || fail "$f pulled differs ($extra past)"
	done
done
n=$(grep -c '"GET /odd/v33/payload-000000.dcrp ' "$T/srv.out") || true
[ "$n" = 2 ] || fail "the payload 33 bytes past 1 MiB was not pulled in 2 parts ($n GETs)"
echo "ok: dcr-pull from python3 http.server: $np payloads once each, parts, --wait, odd sizes"
