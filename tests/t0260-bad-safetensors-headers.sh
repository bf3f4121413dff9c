#!/bin/sh
# Hostile safetensors files (the shared invalid/ corpus and crafted ones:
# header length past the end or over 100,000,000, overlapping offsets, a
# hole, unknown dtype, duplicate names, non-string metadata, offsets not
# matching the byte count, element count overflow, invalid UTF-8, a header
# not starting with '{', and more) are refused by dcr-verify, dcr-diff (as
# base and as target) and dcr-apply (as a receiver's file) with one line
# on stderr starting with the command's name and exit 128; a receiver
# holding one stays byte for byte as it was.
. "$DCR_SRC/tests/lib-dcr.sh"

H="$T/h"
mkdir "$H"
raw() { $MKST raw "$H/$1.safetensors" "$2" ${3:-0} ${4:+--hlen $4}; }
t='"t":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}'
raw past-end "{$t}" 8 1000
raw hlen-huge "{$t}" 8 100000001
raw hlen-max "{$t}" 8 18446744073709551615
raw hlen-zero "" 0
raw overlap '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}' 6
raw hole '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}}' 10
raw not-from-zero '{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}' 8
raw short-data "{$t}" 4
raw extra-data "{$t}" 12
raw unknown-dtype '{"t":{"dtype":"BF17","shape":[2],"data_offsets":[0,4]}}' 4
raw lowercase-dtype '{"t":{"dtype":"bf16","shape":[2],"data_offsets":[0,4]}}' 4
raw duplicate '{"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"t":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}' 4
raw meta-int '{"__metadata__":{"a":1},"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}' 2
raw meta-nested '{"__metadata__":{"a":{"b":"c"}},"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}' 2
raw meta-array '{"__metadata__":["a"],"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}' 2
raw bytes-mismatch '{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}' 8
raw offsets-reversed '{"t":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}' 4
raw offsets-three '{"t":{"dtype":"U8","shape":[4],"data_offsets":[0,2,4]}}' 4
raw offsets-negative '{"t":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}}' 4
raw offsets-float '{"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4.0]}}' 4
raw shape-negative '{"t":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}' 4
raw shape-string '{"t":{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}}' 4
raw count-overflow '{"t":{"dtype":"U8","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}}' 0
raw count-overflow-bytes '{"t":{"dtype":"F64","shape":[2305843009213693952,2],"data_offsets":[0,0]}}' 0
raw offset-huge '{"t":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551612,0]}}' 4
raw f4-odd '{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}' 2
raw f6-partial '{"t":{"dtype":"F6_E2M3","shape":[3],"data_offsets":[0,3]}}' 3
raw bad-utf8 "hex:7b2274ff223a7b226474797065223a225538222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c325d7d7d" 2
raw bad-utf8-meta "hex:7b225f5f6d657461646174615f5f223a7b2261223a2280227d7d" 0
raw nul-in-name '{"t\u0000x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}' 2
raw not-brace "[$t]" 8
raw leading-space " {$t}" 8
raw not-json "{$t" 8
raw trailing-garbage "{$t}x" 8
raw top-string '"hello"' 0
raw entry-not-object '{"t":[1,2]}' 0
raw missing-dtype '{"t":{"shape":[2],"data_offsets":[0,2]}}' 2
raw too-many-dims '{"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}' 1
printf 'abc' >"$H/tiny.safetensors"
: >"$H/empty.safetensors"
# header length over 100,000,000 in a file that really is that large (sparse)
python3 -c "
import struct, sys
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<Q', 100000001) + b'{')
    f.truncate(8 + 100000001 + 16)" "$H/hlen-huge-sparse.safetensors"
for f in "$DCR_SRC"/tests/data/safetensors/invalid/*.safetensors; do
	[ -e "$f" ] || fail "no invalid corpus in tests/data/safetensors"
	cp "$f" "$H/shared-$(basename "$f")"
done

$MKST new "$T/good" t:BF16:2x2 u:U8:4
$MKST new "$T/good2" t:BF16:2x2:rand/1 u:U8:4
run 0 dcr-diff "$T/good" "$T/good2"
mv "$T/out" "$T/d"

n=0
for f in "$H"/*.safetensors; do
	name=$(basename "$f" .safetensors)
	run 128 dcr-verify "$f"
	one_line_error dcr-verify
	run 128 dcr-diff "$f" "$T/good/model.safetensors"
	one_line_error dcr-diff
	[ ! -s "$T/out" ] || fail "$name: dcr-diff wrote a delta from a hostile base"
	run 128 dcr-diff "$T/good/model.safetensors" "$f"
	one_line_error dcr-diff
	# a receiver whose only file is the hostile one
	rm -rf "$T/r" && mkdir "$T/r" && cp "$f" "$T/r/model.safetensors"
	snapshot "$T/r" >"$T/s0"
	run 128 dcr-apply "$T/r" "$T/d"
	one_line_error dcr-apply
	snapshot "$T/r" >"$T/s1"
	cmp -s "$T/s0" "$T/s1" || fail "$name: receiver changed"
	# a receiver with a good file and a hostile second shard
	rm -rf "$T/r" && cp -r "$T/good" "$T/r" && cp "$f" "$T/r/model-2.safetensors"
	snapshot "$T/r" >"$T/s0"
	run 128 dcr-apply "$T/r" "$T/d"
	one_line_error dcr-apply
	snapshot "$T/r" >"$T/s1"
	cmp -s "$T/s0" "$T/s1" || fail "$name (second shard): receiver changed"
	n=$((n + 1))
done
run 128 dcr-verify "$H/hlen-huge-sparse.safetensors"
grep -qi 'large\|100000000\|100,000,000' "$T/err" || { cat "$T/err"; fail "no 'too large' message"; }
say "ok: $n hostile files refused by dcr-verify, dcr-diff and dcr-apply"

# the valid corpus still reads (a sanity check of the reader, not of refusals)
for f in "$DCR_SRC"/tests/data/safetensors/valid/*.safetensors; do
	[ -e "$f" ] || fail "no valid corpus in tests/data/safetensors"
	run 0 dcr-verify "$f"
done
