# lib-apply-mem.sh - the in-memory apply against the file path, sourced by
# t0450 (DEV=cpu: host memory) and t0455 (DEV=cuda: device memory) after
# lib-dcr.sh: a pack applied to tensors in memory (dcr_apply_mem, through
# tests/mem-apply, which writes the memory back into the files) leaves
# exactly the bits dcr-apply leaves in the files: a step of generated bf16
# weights (pack directory and tar, small batches, a named base, items held
# squeezed), every
# dtype's XOR changes, a layout change, a dense copy onto tensors in
# another state; and it refuses, with nothing written, a wrong named base,
# bits the pack does not fit (the target digests), a corrupt payload, a
# missing tensor, a tensor of the old layout.
: "${DCR_BUILD:?run through make check}"
: "${DEV:?DEV must be cpu or cuda}"
MA="$DCR_BUILD/tests/mem-apply"
[ -x "$MA" ] || fail "$MA is not built"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
command -v dcr-pack >/dev/null 2>&1 || skip "dcr-pack is not on PATH"

# fresh COPY of checkpoint SRC, without .dcr (mem-apply rewrites its files)
copy() { rm -rf "$2"; cp -r "$1" "$2"; rm -rf "$2/.dcr"; }

# pack A B into DIR (and a tar of it beside) [dcr-diff options]
pack() {
	_pa=$1 _pb=$2 _pd=$3
	shift 3
	run 0 dcr-diff --no-cache "$@" "$_pa" "$_pb"
	mv "$T/out" "$T/pk.delta"
	rm -rf "$_pd"
	run 0 dcr-pack -q -o "$_pd" "$T/pk.delta"
	run 0 dcr-pack -q "$T/pk.delta"
	mv "$T/out" "$_pd.tar"
}

# mem_vs_file A PACK NAME [mem-apply options]: A's copy through the file
# path and another through memory end the same
mem_vs_file() {
	_a=$1 _p=$2 _n=$3
	shift 3
	copy "$_a" "$T/f.$_n"
	run 0 dcr-apply "$T/f.$_n" "$_p"
	copy "$_a" "$T/m.$_n"
	run 0 "$MA" --device "$DEV" "$@" "$T/m.$_n" "$_p"
	grep -q '^applied [0-9]* changes' "$T/out" || fail "$_n: unexpected report: $(cat "$T/out")"
	same "$T/m.$_n" "$T/f.$_n"
}

run 0 gen-checkpoint -q --size 2M --steps 2 --shards 2 --change 0.03 "$T/g"
pack "$T/g/v0" "$T/g/v1" "$T/p01"
mem_vs_file "$T/g/v0" "$T/p01" step
same "$T/m.step" "$T/g/v1"
mem_vs_file "$T/g/v0" "$T/p01.tar" tar --check-all
mem_vs_file "$T/g/v0" "$T/p01" batch --batch 7
id0=$(state_id "$T/g/v0")
id1=$(state_id "$T/g/v1")
id2=$(state_id "$T/g/v2")
mem_vs_file "$T/g/v0" "$T/p01" named --base "$id0" --check-all
say "ok: a step through memory equals the file path (dir, tar, batches of 7, named base)"

# items held squeezed (--held-plain 1: every one of 4 KiB or more that
# zstd halves): a tensor of zeros become ones, whose items are long runs
$MKST new "$T/z0" x:BF16:64 z:BF16:512x512:zero w:F32:64x64
$MKST new "$T/z1" x:BF16:64 z:BF16:512x512:rep/3f80 w:F32:64x64:rep/0000803f
pack "$T/z0" "$T/z1" "$T/pz"
mem_vs_file "$T/z0" "$T/pz" squeezed --held-plain 1
same "$T/m.squeezed" "$T/z1"
say "ok: items held squeezed decode to the file path's bits"

# named as the target: nothing to do, nothing changed
copy "$T/g/v1" "$T/m"
run 0 "$MA" --device "$DEV" --base "$id1" "$T/m" "$T/p01"
grep -q '^already at the target' "$T/out" || fail "no 'already': $(cat "$T/out")"
same_fast "$T/m" "$T/g/v1"

# refusals: the files are as they were (mem-apply writes memory back)
refused() {
	_src=$1 _want=$2 _pat=$3
	shift 3
	copy "$_src" "$T/m"
	run "$_want" "$MA" --device "$DEV" "$@"
	grep -q "$_pat" "$T/err" || fail "'$*': no '$_pat' in: $(cat "$T/err")"
	same_fast "$T/m" "$_src"
}
refused "$T/g/v2" 1 "base is" --base "$id2" "$T/m" "$T/p01"
# (delta-coded XOR values do not even decode against other bits; masks do,
# and the target digests refuse what they would make)
refused "$T/g/v2" 1 "would not match its target digest.*decode" "$T/m" "$T/p01"
refused "$T/g/v1" 1 "would not match its target digest" "$T/m" "$T/p01"
pack "$T/g/v0" "$T/g/v1" "$T/p01x" --codec plain
mem_vs_file "$T/g/v0" "$T/p01x" plain
refused "$T/g/v2" 1 "would not match its target digest: the pack does not fit" "$T/m" "$T/p01x"
# a payload changed on its way: refused before anything
cp -r "$T/p01" "$T/pbad"
p=$(ls "$T/pbad"/payload-*.dcrp | head -1)
printf 'X' | dd of="$p" bs=1 seek=200 conv=notrunc 2>/dev/null
refused "$T/g/v0" 1 "payload" "$T/m" "$T/pbad"
say "ok: a wrong base, bits the pack does not fit, a corrupt payload: refused, nothing written"

# every dtype's XOR changes, scalars and empty tensors
dtypes="BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64 C64 F4 F6_E2M3"
specs=""
for d in $dtypes; do
	specs="$specs v.$d:$d:4x16 e.$d:$d:0x4 s.$d:$d:8"
done
$MKST new --files 2 "$T/a" $specs scalar.f32:F32:scalar
cp -r "$T/a" "$T/b"
for d in $dtypes; do
	case $d in
	BOOL|U8|I8|F8_*|F4|F6_*) hi=80 ;;
	I16|U16|F16|BF16) hi=8000 ;;
	I32|U32|F32) hi=80000000 ;;
	*) hi=8000000000000000 ;;
	esac
	$MKST xor "$T/b" "v.$d" 0=1 5=$hi 31=$(echo "$hi" | sed 's/8/f/; s/0/f/g')
done
$MKST set "$T/b" scalar.f32 0=80000000
pack "$T/a" "$T/b" "$T/pab"
mem_vs_file "$T/a" "$T/pab" dtypes --check-all
same "$T/m.dtypes" "$T/b"
say "ok: XOR changes of $(echo $dtypes | wc -w) dtypes through memory"

# --check-all also hashes what no item touches
copy "$T/a" "$T/s"
$MKST set "$T/s" s.F32 3=7fc00001
refused "$T/s" 1 "leaves as it is" --check-all "$T/m" "$T/pab"
copy "$T/s" "$T/m"
run 0 "$MA" --device "$DEV" "$T/m" "$T/pab"
# a tensor the pack changes that memory lacks
copy "$T/a" "$T/s"
$MKST rm "$T/s" v.BF16
refused "$T/s" 128 "no tensor 'v.BF16' in memory" "$T/m" "$T/pab"
say "ok: --check-all, a missing tensor"

# a tensor whose dtype changes is new in the pack: memory of the old
# layout is refused, memory of the new layout (any bits) is rewritten whole
copy "$T/a" "$T/c"
$MKST retype "$T/c" v.F32:BF16:4x16
pack "$T/a" "$T/c" "$T/pac"
refused "$T/a" 128 "not of the target's dtype and shape" "$T/m" "$T/pac"
copy "$T/a" "$T/m"
$MKST retype "$T/m" v.F32:BF16:4x16:rand/9
run 0 "$MA" --device "$DEV" --check-all "$T/m" "$T/pac"
same "$T/m" "$T/c"

# a dense copy of v1 onto tensors at v2 (any base), every tensor rewritten
run 0 dcr-diff --dense --no-cache "$T/g/v1"
mv "$T/out" "$T/dense.delta"
run 0 dcr-pack -q -o "$T/pdense" "$T/dense.delta"
mem_vs_file "$T/g/v2" "$T/pdense" dense --check-all --base "$id2"
same "$T/m.dense" "$T/g/v1"
say "ok: a layout change, a dense copy through memory"

# under a key: a pack signed by it goes in; an unsigned one, or one signed
# by another key, is refused at the manifest with nothing written
if command -v dcr-keygen >/dev/null 2>&1; then
	run 0 dcr-keygen -p "$T/k.pub" -s "$T/k.sec"
	run 0 dcr-keygen -p "$T/o.pub" -s "$T/o.sec"
	run 0 dcr-pack -q --sign "$T/k.sec" --version 1 -o "$T/psigned" "$T/dense.delta"
	run 0 dcr-pack -q --sign "$T/o.sec" --version 1 -o "$T/pother" "$T/dense.delta"
	run 0 dcr-pack -q -o "$T/punsigned" "$T/dense.delta"
	mem_vs_file "$T/g/v2" "$T/psigned" signed --check-all --verify-key "$T/k.pub"
	refused "$T/g/v2" 1 "not signed" --verify-key "$T/k.pub" "$T/m" "$T/punsigned"
	refused "$T/g/v2" 1 "which is not one of the" --verify-key "$T/k.pub" "$T/m" "$T/pother"
	say "ok: a key's signature required through memory"
fi
