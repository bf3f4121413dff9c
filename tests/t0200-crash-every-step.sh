#!/bin/sh
# kill -9 of dcr-apply at every durable step (DCR_FAULT_AT=N, N = 1 until a
# run completes) of an in-place XOR apply on a sharded checkpoint, then a
# rerun with the same delta, always ends bit-identical to B; after a kill
# the receiver is A or B (never a mix) once the journal is replayed; the
# XOR is never applied twice.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 2 --shards 3 --change 0.05 "$T/g"
crash_loop "$T/g/v0" "$T/g/v1"
f1=$FAULTS
# a single-file checkpoint too
run 0 gen-checkpoint -q --size 1M --steps 1 --shards 1 --change 0.03 "$T/s"
crash_loop "$T/s/v0" "$T/s/v1"
say "ok: $((f1 + FAULTS)) faults injected ($f1 sharded, $FAULTS single-file), every rerun ended at B"
