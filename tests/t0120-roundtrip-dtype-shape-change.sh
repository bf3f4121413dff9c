#!/bin/sh
# A tensor whose dtype or shape changes (same name) is sent whole as an
# overwrite and the receiver ends bit-identical to B: bf16 -> f32, f32 ->
# bf16 (the file shrinks), a reshape with the same byte count, a reshape
# to more and to fewer elements, and u8 -> f4 (sub-byte).
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new "$T/a" a:BF16:8x8 b:F32:4x4 c:BF16:2x32 d:BF16:10 e:F32:100 f:U8:16 g:BF16:64
cp -r "$T/a" "$T/b"
$MKST retype "$T/b" a:F32:8x8
$MKST retype "$T/b" b:BF16:4x4
$MKST retype "$T/b" c:BF16:64:rand/2
$MKST retype "$T/b" d:BF16:5x4
$MKST retype "$T/b" e:F32:3
$MKST retype "$T/b" f:F4:16
$MKST xor "$T/b" g 7=1
differs "$T/a" "$T/b"
roundtrip "$T/a" "$T/b"
roundtrip "$T/b" "$T/a"

# a reshape keeping every byte is still a change of the state
cp -r "$T/a" "$T/c"
$MKST retype "$T/c" c:BF16:64:rand/0
$MKST retype "$T/c" c:BF16:4x16:rand/0
run 1 dcr-verify --porcelain "$T/c" --against "$T/a"
grep -q '^layout	c$' "$T/out" || fail "reshape not seen"
roundtrip "$T/a" "$T/c"
say "ok: dtype and shape changes"
