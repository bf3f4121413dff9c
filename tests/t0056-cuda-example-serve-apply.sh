#!/bin/sh
# examples/serve-apply refits weights in CUDA device memory through the
# public API alone (tests/lib-serve-apply.sh). Skipped without a device.
. "$DCR_SRC/tests/lib-dcr.sh"
: "${DCR_BUILD:?run through make check}"
MODE= WHERE=device
. "$DCR_SRC/tests/lib-serve-apply.sh"
