#!/bin/sh
# kill -9 at every durable step of an apply that rebuilds files (a tensor
# added, one removed, one changing dtype, one moving between files, a file
# disappearing and a new one appearing, plus XOR changes), then a rerun,
# always ends bit-identical to B with B's file set.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new --files 3 "$T/a" l.0:BF16:64 l.1:BF16:8x8 l.2:F32:16 l.3:BF16:128 l.4:BF16:32 l.5:I32:7 l.6:BF16:40
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" l.0 1=1 && $MKST xor "$T/b" l.3 100=3
$MKST rm "$T/b" l.2
$MKST retype "$T/b" l.4:F32:32
$MKST move "$T/b" l.6 model-00001-of-00003.safetensors
$MKST add "$T/b" n.0:BF16:50 --file model-new.safetensors
# model-00002 holds l.3 and l.4: drop it by moving both away
$MKST move "$T/b" l.3 model-new.safetensors
$MKST move "$T/b" l.4 model-new.safetensors
[ ! -e "$T/b/model-00002-of-00003.safetensors" ] || fail "setup: file 2 still there"
crash_loop "$T/a" "$T/b"
f1=$FAULTS
(cd "$T/cr" && ls *.safetensors) >"$T/f1"
(cd "$T/b" && ls *.safetensors) >"$T/f2"
cmp -s "$T/f1" "$T/f2" || fail "file sets differ after the crash loop"
# and back (files reappear)
crash_loop "$T/b" "$T/a"
say "ok: $((f1 + FAULTS)) faults injected during file rebuilds, every rerun ended at B"
