#!/bin/sh
# A 99,999,999-byte safetensors header costs memory in proportion to what
# it declares, not to its JSON: one tensor padded with a 100 MB array of
# numbers under an unknown key (jansson built 50 million values from it)
# reads within a few hundred MiB in dcr-verify and dcr-diff; a header
# declaring more than 1,000,000 tensors, or nesting 100,000 arrays deep, is
# refused with one line and exit 128.
. "$DCR_SRC/tests/lib-dcr.sh"
need_gnu_time

python3 - "$T" <<'PY'
import struct, sys
d = sys.argv[1]
def write(name, body, data=b""):
    hdr = body.encode()
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + data)
t = '"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]'
pad = 99999999 - len('{' + t + ',"x":[' + ']}}')
n = pad // 2
arr = "0," * n
arr = arr[:-1] + " " * (pad - len(arr) + 1)
write("padded.safetensors", '{' + t + ',"x":[' + arr + ']}}', b"\0\0")
assert len('{' + t + ',"x":[' + arr + ']}}') == 99999999
many = ",".join('"%d":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}' % i for i in range(1000001))
write("many.safetensors", "{" + many + "}")
write("deep.safetensors", '{' + t + ',"x":' + "[" * 100000 + "]" * 100000 + '}}', b"\0\0")
PY
mkdir "$T/c"
$MKST new "$T/c" t:U8:2:zero

m=$(peak_rss 0 dcr-verify "$T/padded.safetensors")
say "dcr-verify of a 99,999,999-byte header: $m MiB"
[ "$m" -lt 600 ] || fail "dcr-verify took $m MiB for one tensor"
m=$(peak_rss 0 dcr-diff -o "$T/d" "$T/padded.safetensors" "$T/padded.safetensors")
say "dcr-diff of two: $m MiB"
[ "$m" -lt 900 ] || fail "dcr-diff took $m MiB for one tensor"

for f in many deep; do
	run 128 dcr-verify "$T/$f.safetensors"
	one_line_error dcr-verify
done
grep -q 'more than 1000000 tensors' "$T/err" && fail "the deep file was refused for its tensors"
run 128 dcr-verify "$T/many.safetensors"
grep -q 'more than 1000000 tensors' "$T/err" || { cat "$T/err"; fail "no tensor-count refusal"; }
