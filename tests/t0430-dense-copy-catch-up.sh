#!/bin/sh
# A receiver too far behind is refused a delta with a hint, and a dense copy
# (dcr-diff --dense, pushed as NAME.dense, fetched by dcr-pull --dense)
# brings a receiver in any state -- an older version, a committed HEAD, a
# file that should not be there -- to the exact target, crash-safely. Its
# files are built whole in .dcr/stage/, each byte written once there by
# the check before the commit, and renamed over the old ones: the journal
# holds the renames, not the items (a crash just after its commit leaves
# a journal of a few KB, not one as large as the copy). A dense copy
# whose items leave their tensors' order is hashed again from the staged
# bytes and its late items, which the journal does hold. A dense copy in
# a regular file is read twice where it lies rather than copied.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-push dcr-pull dcr-commit gen-checkpoint

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

# the dense copy fits; a crash at every durable step, then a rerun, ends at
# v3 with an empty stage; a journal left by a crash holds no items
run 0 dcr-pull --dense -o "$T/pack" "$store/v3"
copy_bytes=$(du -bs "$T/pack" | cut -f1)
f1=model-00001-of-00002.safetensors
faults=0 journals=0
for n in $(seq 1 60); do
	rm -rf "$T/k"
	cp -r "$T/g/v1" "$T/k"
	rm -rf "$T/k/.dcr"
	ino=$(stat -c %i "$T/k/$f1")
	set +e
	DCR_FAULT_AT=$n dcr-apply -q "$T/k" "$T/pack" >/dev/null 2>&1
	rc=$?
	set -e
	[ "$rc" -eq 0 ] && break
	faults=$((faults + 1))
	if [ -f "$T/k/.dcr/journal" ]; then
		journals=$((journals + 1))
		j=$(stat -c %s "$T/k/.dcr/journal")
		[ "$j" -lt $((copy_bytes / 20)) ] ||
			fail "fault $n: a journal of $j bytes for a dense copy of $copy_bytes: it holds the items"
	fi
	run 0 dcr-apply -q "$T/k" "$T/pack"
	same_fast "$T/k" "$T/g/v3"
	[ -z "$(ls -A "$T/k/.dcr/stage" 2>/dev/null)" ] || fail "fault $n: the stage is not empty"
done
[ "$rc" -eq 0 ] || fail "still faulting after $n points"
[ "$faults" -ge 5 ] || fail "only $faults crash points in a dense apply"
[ "$journals" -ge 1 ] || fail "no crash left a journal"
same_fast "$T/k" "$T/g/v3"
[ "$(stat -c %i "$T/k/$f1")" != "$ino" ] || fail "the dense copy was not built in the stage"

run 0 sh -c "dcr-pull --dense '$store/v3' | dcr-apply '$T/r'"
same "$T/r" "$T/g/v3"
run 0 dcr-commit "$T/r" --version 3

# a dense copy as a raw delta, onto a single-file receiver of another shape
cp "$T/g/v2/model-00001-of-00002.safetensors" "$T/one.safetensors"
mkdir "$T/s"
cp "$T/one.safetensors" "$T/s/model.safetensors"
run 0 sh -c "dcr-diff --dense '$T/g/v3' > '$T/d3'"
run 0 dcr-apply "$T/s" "$T/d3"
grep -q "applied [1-9][0-9]* changes in [1-9][0-9]* items" "$T/err" ||
	fail "the staged dense copy does not say what it applied: $(cat "$T/err")"
same "$T/s" "$T/g/v3"
[ ! -e "$T/s/model.safetensors" ] || fail "the old file outside the target was kept"
# a delta in a regular file is read again where it lies, not copied: also
# one that starts further into a file on standard input (the shell read
# the line before it)
{ echo "a line before the delta"; cat "$T/d3"; } > "$T/d3p"
mkdir "$T/s2"
cp "$T/one.safetensors" "$T/s2/model.safetensors"
run 0 sh -c "{ read -r line; dcr-apply '$T/s2' -; } < '$T/d3p'"
same "$T/s2" "$T/g/v3"

# the same dense copy in items of 4096 elements, out of tensor order (the
# first half's and the second half's in turn): the tensors a late item
# comes for are hashed again from their staged bytes and their late items,
# which the journal keeps and the replay writes again
run 0 sh -c "dcr-diff --dense --chunk 4096 '$T/g/v3' > '$T/d3c'"
"$DCR_BUILD/tests/hostile" interleave "$T/d3c" "$T/d3x" || fail "hostile interleave exited $?"
rm -rf "$T/k"
cp -r "$T/g/v0" "$T/k"
rm -rf "$T/k/.dcr"
run 0 dcr-apply "$T/k" "$T/d3x"
same "$T/k" "$T/g/v3"

# --dense refuses a pack that is not a dense copy
run 128 dcr-pull --dense "$T/bad"
mv "$store/v3" "$store/v9.dense"
run 128 dcr-pull --dense "$store/v9"
grep -q "not a dense copy" "$T/err" || fail "pulled a delta as a dense copy"
# a dense copy is no link in a squash chain
run 128 dcr-pack --squash "$T/d3" "$T/d3"
echo "dense copy: $faults crash points survived"
