#!/bin/sh
# A manifest that lists many payloads does not freeze the relay: one of
# 262,144 (10 MB, its payloads absent at the parent, which the relay
# starts to prefetch) is answered at once, and while the relay works
# through its list it keeps answering other requests at once (a real
# pack's refit, the status document). The objects table grows with what
# it holds, and the prefetch never holds the relay's lock for a whole pack.
# And the status document stays small however much the relay holds: a
# relay that reloads 1,101 objects from its cache lists 1,000 of them
# and says how many it holds (it listed all 2^18 it may hold, some 80 MB
# built under the relay's lock, for each request); ?prefix=PFX lists
# those under PFX.
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
# a cache of 1,100 payloads of 4 KiB and their manifest
mkdir -p "$T/cache/many"
pyrun '
import hashlib, struct, sys
m = open(sys.argv[1], "rb").read()[:-32]
n = struct.unpack_from("<I", m, 96)[0]
count, table = 1100, b""
for i in range(count):
    body = bytes(16) + b"%08d" % i + bytes(4096 - 32 - 24)
    d = hashlib.sha256(body).digest()
    open("%s/payload-%06d.dcrp" % (sys.argv[2], i), "wb").write(body + d)
    table += struct.pack("<Q", 4096) + d
out = m[:96] + struct.pack("<I", count) + table + m[100 + 40 * n:]
open(sys.argv[2] + "/manifest.dcrm", "wb").write(out + hashlib.sha256(out).digest())' \
	"$T/p/manifest.dcrm" "$T/cache/many"
B_PID=$RPID
start_relay b --cache "$T/cache" "$S"
B=$RURL
curl -sS -f -m 5 -o "$T/st.json" "$B/.dcr/status" || fail "no status from relay b"
curl -sS -f -m 5 -o "$T/stp.json" "$B/.dcr/status?prefix=many/payload-00000" || fail "no status under a prefix"
pyrun '
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["objects_held"], d["objects_listed"], len(d["objects"])) == (1101, 1000, 1000), \
    "held %d, listed %d, in the list %d" % (d["objects_held"], d["objects_listed"], len(d["objects"]))
p = json.load(open(sys.argv[2]))
names = sorted(o["name"] for o in p["objects"])
assert names == ["many/payload-%06d.dcrp" % i for i in range(10)], names
assert (p["objects_held"], p["objects_listed"], p["prefix"]) == (10, 10, "many/payload-00000"), p
' "$T/st.json" "$T/stp.json"
[ "$(wc -c <"$T/st.json")" -lt 400000 ] || fail "a status of $(wc -c <"$T/st.json") bytes"
kill "$RPID"
RPID=$B_PID
receiver r1
st pull timeout 20 dcr-pull -q "$A/v1" | st apply dcr-apply -q "$T/r1"
rc_is pull 0
rc_is apply 0
same "$T/r1" "$T/g/v1"
kill -0 "$RPID" || fail "the relay died: $(cat "$T/a.log")"
exit 0
