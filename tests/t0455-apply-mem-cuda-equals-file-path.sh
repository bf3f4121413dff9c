#!/bin/sh
# A pack applied to tensors in CUDA device memory (dcr_apply_mem: the
# changes uploaded as gaps and units, positions by dcr_cuda_positions,
# dcr_cuda_scatter) equals the file path, and its refusals write nothing:
# tests/lib-apply-mem.sh with DEV=cuda. Skipped without a device.
. "$DCR_SRC/tests/lib-dcr.sh"
: "${DCR_BUILD:?run through make check}"
set +e
"$DCR_BUILD/tests/mem-apply" --device cuda /dev/null /dev/null >"$T/probe" 2>&1
rc=$?
set -e
[ $rc -ne 77 ] || skip "$(cat "$T/probe")"
DEV=cuda
. "$DCR_SRC/tests/lib-apply-mem.sh"
