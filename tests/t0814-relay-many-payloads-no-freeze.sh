#!/bin/sh
# A manifest that lists many payloads does not freeze the relay: one of
# 262,144 (10 MB, its payloads absent at the parent, which the relay
# starts to prefetch) is answered at once, and while the relay works
# through its list it keeps answering other requests at once (a real
# pack's refit, the status document). The objects table grows with what
# it holds, and the prefetch never holds the relay's lock for a whole pack.
. "$DCR_SRC/tests/lib-relay.sh"
S="$T/s"
gen 1M 1
publish "$S/v1" -s 64K
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack --digest sha256 -o "$T/p" "$T/d"
mkdir -p "$S/big"
# pack p's manifest, its payload table replaced by 262,144 payloads of
# 4 KiB with made-up digests, its SHA-256 trailer made anew
pyrun '
import hashlib, struct, sys
m = open(sys.argv[1], "rb").read()[:-32]
n = struct.unpack_from("<I", m, 96)[0]
flags = struct.unpack_from("<I", m, 12)[0]
assert flags & (4 | 16) == 0, "a piece table or an index table"
count = 262144
table = b"".join(struct.pack("<Q", 4096) + hashlib.sha256(b"%d" % i).digest() for i in range(count))
out = m[:96] + struct.pack("<I", count) + table + m[100 + 40 * n:]
open(sys.argv[2], "wb").write(out + hashlib.sha256(out).digest())' \
	"$T/p/manifest.dcrm" "$S/big/manifest.dcrm"

start_relay a "$S"
A=$RURL
code=$(curl -sS -m 10 -o "$T/big.dcrm" -w '%{http_code}' "$A/big/manifest.dcrm" 2>"$T/curl.err") ||
	fail "the manifest of 262144 payloads took over 10 s: $(cat "$T/curl.err")"
[ "$code" = 200 ] || fail "the big manifest is $code"
cmp -s "$T/big.dcrm" "$S/big/manifest.dcrm" || fail "the big manifest differs"
for i in 1 2 3; do
	curl -sS -f -m 5 -o /dev/null "$A/.dcr/status" 2>"$T/curl.err" ||
		fail "the status took over 5 s while the relay prefetches: $(cat "$T/curl.err")"
done
receiver r1
st pull timeout 20 dcr-pull -q "$A/v1" | st apply dcr-apply -q "$T/r1"
rc_is pull 0
rc_is apply 0
same "$T/r1" "$T/g/v1"
kill -0 "$RPID" || fail "the relay died: $(cat "$T/a.log")"
exit 0
