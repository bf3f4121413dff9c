#!/bin/sh
# examples/serve-apply --host: the same refit with the weights in host
# memory (tests/lib-serve-apply.sh), everywhere, so that the example's
# own proof (its hash of the weights' bytes) is checked without a GPU.
. "$DCR_SRC/tests/lib-dcr.sh"
: "${DCR_BUILD:?run through make check}"
MODE=--host WHERE=host
. "$DCR_SRC/tests/lib-serve-apply.sh"
