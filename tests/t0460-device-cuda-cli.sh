#!/bin/sh
# dcr-diff --device cuda and dcr-apply --device cuda: with a CUDA device,
# the same delta bytes (all but the random attempt id and the trailer over
# it) and the same receiver bits as on the CPU, for generated bf16 weights
# and every width's XOR changes; without one (or with a libdcr built
# without CUDA), exit 128 with one line that says so, nothing on stdout,
# no output file, the receiver untouched. A bad --device is a usage error.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 1 --shards 2 --change 0.03 "$T/g"
A=$T/g/v0 B=$T/g/v1

run 129 dcr-diff --device gpu "$A" "$B"
grep -q "device wants cpu or cuda" "$T/err" || fail "no usage message: $(cat "$T/err")"
run 129 dcr-diff --overwrite --device cuda "$A" "$B"
run 129 dcr-apply --device tpu "$T/g/v0"

# the delta's bytes past the header's attempt id, without the trailer
body() { tail -c +65 "$1" | head -c -32; }

# --device cpu is the default
run 0 dcr-diff --no-cache "$A" "$B"
mv "$T/out" "$T/cpu.delta"
run 0 dcr-diff --no-cache --device cpu "$A" "$B"
mv "$T/out" "$T/cpu2.delta"
body "$T/cpu.delta" >"$T/b1"
body "$T/cpu2.delta" >"$T/b2"
cmp -s "$T/b1" "$T/b2" || fail "--device cpu wrote another delta"

set +e
dcr-diff --no-cache --device cuda "$A" "$B" >"$T/gpu.delta" 2>"$T/err"
rc=$?
set -e
if [ $rc -ne 0 ]; then
	# no device (or no CUDA in libdcr): a clear, early error everywhere
	[ $rc -eq 128 ] || { cat "$T/err"; fail "dcr-diff --device cuda exited $rc, not 128"; }
	one_line_error dcr-diff
	grep -Eq "no CUDA device|built without CUDA" "$T/err" || fail "unclear: $(cat "$T/err")"
	[ ! -s "$T/gpu.delta" ] || fail "dcr-diff --device cuda wrote to stdout"
	run 128 dcr-diff --no-cache --device cuda -o "$T/o.delta" "$A" "$B"
	[ ! -e "$T/o.delta" ] || fail "dcr-diff --device cuda left an output file"
	cp -r "$A" "$T/r"
	snapshot "$T/r" >"$T/s0"
	run 128 dcr-apply --device cuda "$T/r" "$T/cpu.delta"
	one_line_error dcr-apply
	grep -Eq "no CUDA device|built without CUDA" "$T/err" || fail "unclear: $(cat "$T/err")"
	run 128 dcr-apply --device cuda --recover "$T/r"
	snapshot "$T/r" >"$T/s1"
	cmp -s "$T/s0" "$T/s1" || fail "a refused dcr-apply --device cuda changed the receiver"
	[ ! -e "$T/r/.dcr/journal" ] || fail "a refused dcr-apply --device cuda left a journal"
	say "ok: no CUDA here ($(cat "$T/err" | sed "s/^dcr-apply: error: //")): --device cuda is exit 128, one line, nothing written"
	exit 0
fi

# with a device: the CPU's bytes and bits
gpu_vs_cpu() {
	_ga=$1 _gb=$2
	shift 2
	run 0 dcr-diff --no-cache "$@" "$_ga" "$_gb"
	mv "$T/out" "$T/c.delta"
	run 0 dcr-diff --no-cache --device cuda "$@" "$_ga" "$_gb"
	mv "$T/out" "$T/d.delta"
	body "$T/c.delta" >"$T/b1"
	body "$T/d.delta" >"$T/b2"
	cmp -s "$T/b1" "$T/b2" || fail "dcr-diff --device cuda $*: another delta than the CPU's"
	rm -rf "$T/rc" "$T/rd"
	cp -r "$_ga" "$T/rc"
	cp -r "$_ga" "$T/rd"
	run 0 dcr-apply "$T/rc" "$T/c.delta"
	run 0 dcr-apply --device cuda "$T/rd" "$T/c.delta"
	same "$T/rd" "$T/rc"
	same "$T/rd" "$_gb"
}
gpu_vs_cpu "$A" "$B"
gpu_vs_cpu "$A" "$B" --chunk 1000 --threads 3

dtypes="U8 I8 F8_E4M3 F4 BF16 F16 I16 F32 I32 F64 I64 C64"
specs=""
for d in $dtypes; do
	specs="$specs v.$d:$d:64x33 s.$d:$d:2"
done
$MKST new --files 2 "$T/a" $specs
cp -r "$T/a" "$T/b"
for d in $dtypes; do
	case $d in
	U8|I8|F8_*|F4) hi=80 ;;
	I16|F16|BF16) hi=8000 ;;
	I32|F32) hi=80000000 ;;
	*) hi=8000000000000000 ;;
	esac
	$MKST xor "$T/b" "v.$d" 0=1 5=$hi 1000=3 1055=$hi
	$MKST xor "$T/b" "s.$d" 0=$hi
done
gpu_vs_cpu "$T/a" "$T/b"
gpu_vs_cpu "$T/b" "$T/a" --chunk 7
say "ok: dcr-diff and dcr-apply --device cuda give the CPU's delta and bits"
