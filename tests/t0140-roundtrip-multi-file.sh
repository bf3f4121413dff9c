#!/bin/sh
# Sharded checkpoints (model-*.safetensors + model.safetensors.index.json)
# round-trip bit-identical, and the receiver ends with B's files: same file
# set, every tensor in the same file, no stale file left. Cases: changes
# spread over files; a tensor moving between files (unchanged, and changed
# while it moves); a file disappearing; a new file appearing; 1 file -> 3
# files and back; a complete renaming of the shards (2 -> 3).
. "$DCR_SRC/tests/lib-dcr.sh"

# same_files R B: same *.safetensors files, every tensor in the same file
same_files() {
	(cd "$1" && ls *.safetensors) >"$T/f1"
	(cd "$2" && ls *.safetensors) >"$T/f2"
	cmp -s "$T/f1" "$T/f2" || { diff "$T/f1" "$T/f2" >&2 || :; fail "file sets differ"; }
	$MKST list "$1" >"$T/l1"
	$MKST list "$2" >"$T/l2"
	cmp -s "$T/l1" "$T/l2" || { diff "$T/l1" "$T/l2" >&2 || :; fail "tensor placement differs"; }
	if [ -e "$2/model.safetensors.index.json" ]; then
		[ -e "$1/model.safetensors.index.json" ] || fail "receiver lost its index"
	fi
}
rt() { roundtrip "$1" "$2"; same_files "$T/rt" "$2"; }

names="t.00:BF16:64 t.01:BF16:8x8 t.02:F32:16 t.03:BF16:128 t.04:BF16:32 t.05:I32:7 t.06:BF16:40 t.07:BF16:8"
$MKST new --files 3 "$T/a" $names
[ -e "$T/a/model.safetensors.index.json" ] || fail "mkst.py wrote no index"

# changes in every file
cp -r "$T/a" "$T/b1"
$MKST xor "$T/b1" t.00 0=1 && $MKST xor "$T/b1" t.03 5=2 && $MKST xor "$T/b1" t.07 7=1
rt "$T/a" "$T/b1"
say "ok: changes in every file"

# an unchanged tensor moves to another file; a changed one moves too
cp -r "$T/a" "$T/b2"
$MKST move "$T/b2" t.00 model-00003-of-00003.safetensors
$MKST move "$T/b2" t.06 model-00001-of-00003.safetensors
$MKST xor "$T/b2" t.06 1=1
rt "$T/a" "$T/b2"
rt "$T/b2" "$T/a"
say "ok: tensors moving between files"

# a file disappears (its tensors move elsewhere, one changes), then reappears
cp -r "$T/a" "$T/b3"
for t in $(python3 -c "import json;m=json.load(open('$T/a/model.safetensors.index.json'))['weight_map'];print(' '.join(k for k,v in m.items() if v=='model-00002-of-00003.safetensors'))"); do
	$MKST move "$T/b3" "$t" model-00001-of-00003.safetensors
done
[ ! -e "$T/b3/model-00002-of-00003.safetensors" ] || fail "mkst.py kept an empty file"
# moving tensors alone leaves the content (and so the state id) as it was:
# dcr-apply finds the receiver already at the target and writes nothing
same "$T/b3" "$T/a"
cp -r "$T/a" "$T/r3"
run 0 dcr-diff "$T/a" "$T/b3"
mv "$T/out" "$T/d3"
snapshot "$T/r3" >"$T/s1"
run 0 dcr-apply "$T/r3" "$T/d3"
grep -q 'already at the target' "$T/err" || fail "pure re-layout not seen as a no-op"
snapshot "$T/r3" >"$T/s2"
cmp -s "$T/s1" "$T/s2" || fail "a no-op apply changed files"
# with a change as well, the receiver takes B's layout
$MKST xor "$T/b3" t.01 0=1
rt "$T/a" "$T/b3"
[ ! -e "$T/rt/model-00002-of-00003.safetensors" ] || fail "stale file left"
rt "$T/b3" "$T/a"
say "ok: a file disappearing and reappearing"

# a file disappears with its tensors
cp -r "$T/a" "$T/b4"
for t in $(python3 -c "import json;m=json.load(open('$T/a/model.safetensors.index.json'))['weight_map'];print(' '.join(k for k,v in m.items() if v=='model-00003-of-00003.safetensors'))"); do
	$MKST rm "$T/b4" "$t"
done
rt "$T/a" "$T/b4"
rt "$T/b4" "$T/a"
say "ok: a file removed with its tensors"

# a new file with new tensors
cp -r "$T/a" "$T/b5"
$MKST add "$T/b5" extra.0:BF16:16 --file model-extra.safetensors
$MKST add "$T/b5" extra.1:F32:4 --file model-extra.safetensors
rt "$T/a" "$T/b5"
say "ok: a new file"

# 1 file -> 3 files -> 1 file, and 2 -> 3 shards (every file name changes)
$MKST shard "$T/a" "$T/one" 1
$MKST shard "$T/a" "$T/two" 2
$MKST xor "$T/two" t.04 3=1
$MKST xor "$T/one" t.05 6=1 # (a pure re-layout is a no-op, see above)
rt "$T/one" "$T/a"
rt "$T/a" "$T/one"
rt "$T/two" "$T/a"
rt "$T/a" "$T/two"
say "ok: resharding"
