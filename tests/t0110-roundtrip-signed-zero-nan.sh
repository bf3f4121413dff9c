#!/bin/sh
# Changes that compare equal as floats are still changes of stored bits:
# +0 <-> -0 (bf16 0x0000 <-> 0x8000, f32, f16) and NaN payloads (0x7fc0 ->
# 0x7fc1, sign of a NaN, f32 payloads) are counted by dcr-diff and carried
# by dcr-apply, ending bit-identical to B.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new "$T/a" \
	zp:BF16:64:zero zn:BF16:64:rep/0080 nan:BF16:32:rep/c07f \
	f32z:F32:16:zero f32nan:F32:16:rep/0000c07f f16z:F16:8:zero other:BF16:128
cp -r "$T/a" "$T/b"
$MKST set "$T/b" zp 0=8000 17=8000 63=8000
$MKST set "$T/b" zn 5=0000 6=0000
$MKST set "$T/b" nan 0=7fc1 1=ffc0 31=7fff
$MKST set "$T/b" f32z 9=80000000
$MKST set "$T/b" f32nan 3=7fc00001 4=ffc00000
$MKST set "$T/b" f16z 7=8000
differs "$T/a" "$T/b"

run 0 dcr-diff --stats "$T/a" "$T/b"
grep -q ' 12 changed values' "$T/err" || { cat "$T/err"; fail "expected 12 changed values"; }
roundtrip "$T/a" "$T/b"
# and back: -0 -> +0, NaN payloads restored
roundtrip "$T/b" "$T/a"
say "ok: 12 sign-of-zero and NaN-payload changes carried both ways"
