# lib-serve-apply.sh - the body of t0056 (device memory) and t0057 (host
# memory): examples/serve-apply, a serving process's refit through the
# public API alone, loads a checkpoint into memory, applies a chain of
# packs there in place (each from the state the last reached), and the
# weights' own bytes then hash, as libdcr names tensors, to the last
# target; a pack from another base is refused (exit 1). Sourced after
# lib-dcr.sh with MODE set: "" (device memory) or "--host"; WHERE names
# the memory in the example's output.
EX="$DCR_BUILD/examples/serve-apply"
[ -x "$EX" ] || fail "examples/serve-apply is not built"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
set +e
"$EX" $MODE /nonexistent /nonexistent >"$T/out" 2>&1
rc=$?
set -e
[ $rc -ne 77 ] || skip "$(cat "$T/out")"
[ $rc -eq 128 ] || fail "a missing checkpoint: exit $rc, not 128: $(cat "$T/out")"

run 129 "$EX"
run 129 "$EX" $MODE "$T/only-a-checkpoint"
run 0 gen-checkpoint -q --size 1M --steps 2 --shards 2 --change 0.03 "$T/g"
for s in 01 12; do
	a=v$(echo $s | cut -c1) b=v$(echo $s | cut -c2)
	run 0 dcr-diff --no-cache "$T/g/$a" "$T/g/$b"
	mv "$T/out" "$T/$s.delta"
	run 0 dcr-pack -q -o "$T/p$s" "$T/$s.delta"
done
id1=$(state_id "$T/g/v1")
id2=$(state_id "$T/g/v2")
run 0 "$EX" $MODE "$T/g/v0" "$T/p01" "$T/p12"
grep -q "^$WHERE memory holds $id2\$" "$T/out" || fail "not at v2: $(cat "$T/out")"
[ "$(grep -c "tensors rewritten in $WHERE memory" "$T/out")" -eq 2 ] ||
	fail "two refits expected: $(cat "$T/out")"
# one pack: the example's own hash of the bytes names v1, not v2
run 0 "$EX" $MODE "$T/g/v0" "$T/p01"
grep -q "^$WHERE memory holds $id1\$" "$T/out" || fail "not at v1: $(cat "$T/out")"
# v1 -> v2 onto weights at v0: another base, refused
run 1 "$EX" $MODE "$T/g/v0" "$T/p12"
grep -q "base is" "$T/err" || fail "refusal does not name the base: $(cat "$T/err")"
say "ok: examples/serve-apply $MODE refits $WHERE memory through two packs, its own hash of the bytes names the target, another base refused"
