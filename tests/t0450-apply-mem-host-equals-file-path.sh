#!/bin/sh
# A pack applied to tensors in host memory (dcr_apply_mem) equals the file
# path, and its refusals write nothing: tests/lib-apply-mem.sh with
# DEV=cpu, on every machine.
. "$DCR_SRC/tests/lib-dcr.sh"
DEV=cpu
. "$DCR_SRC/tests/lib-apply-mem.sh"
