#!/bin/sh
# The README's first command, scripts/demo, runs its refit on this build
# (DCR_BUILD, no package installation, a small checkpoint): two receivers
# end bit-identical to each step, each acknowledges it in the store, the
# trainer's joint commit takes both, and the store's status shows version 2
# with both receivers at it. A demo that rots fails here.
. "$DCR_SRC/tests/lib-dcr.sh"
need gen-checkpoint dcr-commit
run 0 env DCR_SKIP_DEPS=1 DCR_BUILD="$DCR_BUILD" DCR_DEMO_SIZE=8M DCR_DEMO_DIR="$T/demo" \
	"$DCR_SRC/scripts/demo"
[ "$(grep -c '^identical: ' "$T/out")" = 4 ] || fail "want 4 'identical' proofs in: $(cat "$T/out")"
grep -q '^policy demo: version 2, state ' "$T/out" || fail "no committed version 2 in the status"
grep -q '^receiver r1: v2$' "$T/out" && grep -q '^receiver r2: v2$' "$T/out" ||
	fail "the status does not show both receivers at v2"
[ "$(grep -c 'committed version [12] (2 acknowledgements)' "$T/err")" = 2 ] ||
	fail "the trainer's joint commits are missing: $(cat "$T/err")"
s=$(dcr-verify "$T/demo/train/v2")
for r in r1 r2; do
	[ "$(dcr-verify "$T/demo/$r")" = "$s" ] || fail "receiver $r is not at v2"
done
say "ok: the demo refits two receivers through the joint commit"
