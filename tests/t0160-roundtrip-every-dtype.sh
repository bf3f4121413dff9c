#!/bin/sh
# Every safetensors dtype round-trips bit-identical through XOR items
# (changes in the lowest and highest bits of 1-, 2-, 4- and 8-byte units,
# and byte-wise changes of packed F4/F6 data), through overwrites (a dtype
# change to and from each), with scalars and empty tensors (a zero
# dimension) in the mix, including a file that holds only empty tensors.
. "$DCR_SRC/tests/lib-dcr.sh"

dtypes="BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64 C64 F4 F6_E2M3 F6_E3M2"
specs=""
for d in $dtypes; do
	specs="$specs v.$d:$d:4x16 e.$d:$d:0x4 s.$d:$d:8"
done
specs="$specs scalar.f32:F32:scalar scalar.bf16:BF16:"
$MKST new --files 2 "$T/a" $specs
cp -r "$T/a" "$T/b"
n=0
for d in $dtypes; do
	case $d in
	BOOL|U8|I8|F8_*|F4|F6_*) hi=80 ;;
	I16|U16|F16|BF16) hi=8000 ;;
	I32|U32|F32) hi=80000000 ;;
	*) hi=8000000000000000 ;;
	esac
	# element/byte 0 low bit, 5 top bit, last every bit that fits
	$MKST xor "$T/b" "v.$d" 0=1 5=$hi 9=$(echo "$hi" | sed 's/8/f/; s/0/f/g')
	n=$((n + 3))
done
$MKST set "$T/b" scalar.f32 0=80000000
n=$((n + 1))
differs "$T/a" "$T/b"
run 0 dcr-diff --stats "$T/a" "$T/b"
grep -q " $n changed values" "$T/err" || { cat "$T/err"; fail "expected $n changed values"; }
roundtrip "$T/a" "$T/b"
roundtrip "$T/b" "$T/a"
say "ok: XOR changes in $(echo $dtypes | wc -w) dtypes ($n changed values)"

# overwrites: every dtype's small tensor becomes the next dtype
cp -r "$T/a" "$T/c"
prev=F32
for d in $dtypes; do
	$MKST retype "$T/c" "s.$d:$prev:8:rand/7"
	prev=$d
done
$MKST retype "$T/c" e.BF16:BF16:4x0
$MKST retype "$T/c" e.F32:F32:3
roundtrip "$T/a" "$T/c"
roundtrip "$T/c" "$T/a"
say "ok: dtype changes to and from every dtype"

# a file that holds only empty tensors; an empty checkpoint file appears
$MKST new "$T/d" x:BF16:0 y:F64:3x0x2
cp -r "$T/d" "$T/e"
$MKST add "$T/e" z:U8:0 --file model-empty.safetensors
$MKST add "$T/e" w:BF16:2 --file model-w.safetensors
roundtrip "$T/d" "$T/e"
roundtrip "$T/e" "$T/d"
say "ok: empty tensors"
