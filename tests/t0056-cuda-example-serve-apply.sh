#!/bin/sh
# examples/serve-apply, a serving process's refit into device memory
# through the public API alone: it loads a checkpoint into GPU memory,
# applies a chain of packs there in place (each from the state the last
# reached), and the weights' own bytes then hash to the last target; a
# pack from another base is refused (exit 1). Skipped where libdcr has no
# CUDA (the example is not built) or there is no device.
. "$DCR_SRC/tests/lib-dcr.sh"
: "${DCR_BUILD:?run through make check}"
EX="$DCR_BUILD/examples/serve-apply"
[ -x "$EX" ] || skip "examples/serve-apply is not built (libdcr has no CUDA)"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
set +e
"$EX" /nonexistent /nonexistent >"$T/out" 2>&1
rc=$?
set -e
[ $rc -ne 77 ] || skip "$(cat "$T/out")"

run 129 "$EX"
run 0 gen-checkpoint -q --size 1M --steps 2 --shards 2 --change 0.03 "$T/g"
for s in 01 12; do
	a=v$(echo $s | cut -c1) b=v$(echo $s | cut -c2)
	run 0 dcr-diff --no-cache "$T/g/$a" "$T/g/$b"
	mv "$T/out" "$T/$s.delta"
	run 0 dcr-pack -q -o "$T/p$s" "$T/$s.delta"
done
id2=$(state_id "$T/g/v2")
run 0 "$EX" "$T/g/v0" "$T/p01" "$T/p12"
grep -q "^device memory holds $id2\$" "$T/out" || fail "not at v2: $(cat "$T/out")"
[ "$(grep -c 'tensors rewritten in device memory' "$T/out")" -eq 2 ] || fail "two refits expected: $(cat "$T/out")"
# v1 -> v2 onto weights at v0: another base, refused
run 1 "$EX" "$T/g/v0" "$T/p12"
grep -q "base is" "$T/err" || fail "refusal does not name the base: $(cat "$T/err")"
say "ok: examples/serve-apply refits device memory through two packs, refuses another base"
