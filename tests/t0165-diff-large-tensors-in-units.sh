#!/bin/sh
# dcr-diff cuts a large tensor into units of whole rows that its threads
# diff and hash apart (lib/refit/diff.c, SEG_BYTES), and joins the units'
# digest parts into the tensor's target digest: every target digest equals
# dcr-verify's, every delta applies bit-exact, and the delta's records do
# not depend on the number of threads or on where units end. Tensors of
# 9-13 MB (units of 8 MB) in 1-, 2-, 4- and 8-byte units, 1-, 2- and 3-D
# (rows that are not a multiple of a band), a packed F4 tensor (not cut),
# changes at both ends and on each side of a unit's edge. Its memory holds
# the units in flight, not a whole tensor's items.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new --files 2 "$T/a" w.bf16:BF16:4100x1100 v.f32:F32:3000000 b.u8:U8:5000x2600 \
	t.f64:F64:3x700x700 p.f4:F4:6000x4000 n.bf16:BF16:16
cp -r "$T/a" "$T/b"
# 4194304 bf16 / f32 elements and 8388608 u8 are 8 MiB: a unit's edge
$MKST xor "$T/b" w.bf16 0=1 4194303=8000 4194304=1 4194305=7fff 4509999=1
$MKST xor "$T/b" v.f32 0=80000000 2097151=1 2097152=1 2999999=ffffffff
$MKST xor "$T/b" b.u8 0=1 8388607=80 8388608=1 12999999=ff
$MKST xor "$T/b" t.f64 0=1 1048575=1 1048576=8000000000000000 1469999=1
$MKST xor "$T/b" p.f4 0=1 11999999=ff
$MKST xor "$T/b" n.bf16 15=1
target=$(dcr-verify "$T/b")

# the target digests the diff made: the state id dcr-verify hashes
for args in "--threads 1" "--threads 3" "--threads 2 --chunk 65536" "--threads 3 --chunk 1000"; do
	# shellcheck disable=SC2086
	run 0 dcr-diff --no-cache --stats --porcelain $args "$T/a" "$T/b"
	mv "$T/out" "$T/d-$(echo "$args" | tr -d ' -')"
	got=$(sed -n 's/^target=//p' "$T/err")
	[ "$got" = "$target" ] || fail "dcr-diff $args: target $got, dcr-verify says $target"
	grep -q '^changed=20$' "$T/err" || { cat "$T/err"; fail "dcr-diff $args: expected 20 changed values"; }
done

# the same records with one thread or three (the attempt and the trailer
# aside: bytes 48-63 and the last 32)
body() { python3 -S -c 'import sys; b = open(sys.argv[1], "rb").read(); sys.stdout.buffer.write(b[:48] + b[64:-32])' "$1"; }
body "$T/d-threads1" >"$T/b1"
body "$T/d-threads3" >"$T/b3"
cmp -s "$T/b1" "$T/b3" || fail "dcr-diff --threads 1 and --threads 3 wrote different records"

# each delta applies, bit-exact
for d in "$T"/d-*; do
	rm -rf "$T/r"
	cp -r "$T/a" "$T/r"
	run 0 dcr-apply "$T/r" "$d"
	same "$T/r" "$T/b"
done
say "ok: large tensors diffed in units: target digests joined, the same records on 1 or 3 threads, applied bit-exact"

# memory: a unit's items are held until it is written, not a tensor's. A
# dense copy of a 256 MiB tensor of random bits (its items as large as
# the tensor) peaks well below the tensor's size: 105-125 MiB on 2
# threads, the workers' chunks (about 30 MiB each) and the units in
# flight, where holding the tensor's items took 175 MiB for half the
# tensor (in the normal build: a sanitized one keeps freed memory in
# quarantine)
sanitized && { say "ok: (memory bound checked in the normal build only)"; exit 0; }
need_gnu_time
mkdir "$T/big"
python3 -S -c '
import json, os, struct, sys
n = 16384 * 8192 * 2
h = json.dumps({"big.bf16": {"dtype": "BF16", "shape": [16384, 8192], "data_offsets": [0, n]}}).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(n >> 24):
        f.write(os.urandom(1 << 24))' "$T/big/model.safetensors"
rss=$(peak_rss 0 dcr-diff --no-cache --threads 2 --dense "$T/big" -o "$T/dense")
[ "$(wc -c <"$T/dense")" -gt $((256 << 20)) ] || fail "the dense copy is only $(wc -c <"$T/dense") bytes"
[ "$rss" -lt 200 ] || fail "dcr-diff --dense of a 256 MiB tensor peaked at $rss MiB (under 200 expected)"
say "ok: dcr-diff --dense of a 256 MiB tensor peaked at $rss MiB"
