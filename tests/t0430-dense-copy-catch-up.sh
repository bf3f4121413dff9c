#!/bin/sh
# A receiver too far behind is refused a delta with a hint, and a dense copy
# (dcr-diff --dense, pushed as NAME.dense, fetched by dcr-pull --dense)
# brings a receiver in any state -- an older version, a committed HEAD, a
# file that should not be there -- to the exact target, crash-safely.
. "$DCR_SRC/tests/lib-dcr.sh"
for c in dcr-pack dcr-push dcr-pull dcr-commit gen-checkpoint; do
	command -v "$c" >/dev/null 2>&1 || skip "$c is not on PATH"
done

run 0 gen-checkpoint -q --size 2M --steps 3 --shards 2 "$T/g"
store="$T/store"
# trainer: delta v2 -> v3 and the dense copy of v3
run 0 sh -c "dcr-diff '$T/g/v2' '$T/g/v3' | dcr-pack | dcr-push - '$store/v3'"
run 0 sh -c "dcr-diff --dense '$T/g/v3' | dcr-pack | dcr-push - '$store/v3.dense'"

# a receiver that applied and committed v1, then fell behind: v3's delta is
# refused with the hint
cp -r "$T/g/v0" "$T/r"
rm -rf "$T/r/.dcr"
run 0 sh -c "dcr-diff '$T/g/v0' '$T/g/v1' | dcr-apply '$T/r'"
run 0 dcr-commit "$T/r" --version 1
before=$(snapshot "$T/r")
run 1 sh -c "dcr-pull '$store/v3' | dcr-apply '$T/r'"
grep -q "dense copy" "$T/err" || fail "no hint to take a dense copy: $(cat "$T/err")"
[ "$(snapshot "$T/r")" = "$before" ] || fail "a refused delta changed the receiver"

# the dense copy fits; a crash at every durable step, then a rerun, ends at v3
run 0 dcr-pull --dense -o "$T/pack" "$store/v3"
faults=0
for n in $(seq 1 40); do
	rm -rf "$T/k"
	cp -r "$T/g/v1" "$T/k"
	rm -rf "$T/k/.dcr"
	set +e
	DCR_FAULT_AT=$n dcr-apply -q "$T/k" "$T/pack" >/dev/null 2>&1
	rc=$?
	set -e
	[ "$rc" -eq 0 ] && break
	faults=$((faults + 1))
	run 0 dcr-apply -q "$T/k" "$T/pack"
	same_fast "$T/k" "$T/g/v3"
done
[ "$faults" -ge 5 ] || fail "only $faults crash points in a dense apply"

run 0 sh -c "dcr-pull --dense '$store/v3' | dcr-apply '$T/r'"
same "$T/r" "$T/g/v3"
run 0 dcr-commit "$T/r" --version 3

# a dense copy as a raw delta, onto a single-file receiver of another shape
cp "$T/g/v2/model-00001-of-00002.safetensors" "$T/one.safetensors"
mkdir "$T/s"
cp "$T/one.safetensors" "$T/s/model.safetensors"
run 0 sh -c "dcr-diff --dense '$T/g/v3' > '$T/d3'"
run 0 dcr-apply "$T/s" "$T/d3"
same "$T/s" "$T/g/v3"
[ ! -e "$T/s/model.safetensors" ] || fail "the old file outside the target was kept"

# --dense refuses a pack that is not a dense copy
run 128 dcr-pull --dense "$T/bad"
mv "$store/v3" "$store/v9.dense"
run 128 dcr-pull --dense "$store/v9"
grep -q "not a dense copy" "$T/err" || fail "pulled a delta as a dense copy"
# a dense copy is no link in a squash chain
run 128 dcr-pack --squash "$T/d3" "$T/d3"
echo "dense copy: $faults crash points survived"
