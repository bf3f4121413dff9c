#!/bin/sh
# A file the apply rebuilds in .dcr/stage/ and renames over the receiver's
# (here: every file of a dense copy, and the index) keeps the permission bits of the file
# it replaces, whatever the umask: a serving process of another user or
# group reads the new weights as it read the old, and no wider. The owner
# keeps read and write. As root, the owner and group are kept too (a
# receiver of the serving user's files, applied by root).
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not on PATH"
run 0 gen-checkpoint -q --size 1M --steps 1 --shards 2 "$T/g"
cp -r "$T/g/v0" "$T/r"
rm -rf "$T/r/.dcr"
f1=model-00001-of-00002.safetensors
f2=model-00002-of-00002.safetensors
chmod 0640 "$T/r/$f1"
chmod 0400 "$T/r/$f2"
ix=model.safetensors.index.json
[ -f "$T/r/$ix" ] || fail "the generated checkpoint has no $ix"
chmod 0604 "$T/r/$ix"
root=
if [ "$(id -u)" = 0 ]; then
	root=1
	chown 65534:65534 "$T/r/$f1"
fi
ino=$(stat -c %i "$T/r/$f1")
inx=$(stat -c %i "$T/r/$ix")
run 0 sh -c "umask 022 && dcr-diff --dense '$T/g/v1' | dcr-apply -q '$T/r'"
[ "$(stat -c %i "$T/r/$f1")" != "$ino" ] || fail "$f1 was not rebuilt: nothing was tested"
[ "$(stat -c %a "$T/r/$f1")" = 640 ] || fail "$f1 is $(stat -c %a "$T/r/$f1") after the apply, was 640"
[ "$(stat -c %a "$T/r/$f2")" = 600 ] || fail "$f2 is $(stat -c %a "$T/r/$f2") after the apply, want 600 (400 and the owner's write)"
[ "$(stat -c %i "$T/r/$ix")" != "$inx" ] || fail "$ix was not rebuilt: nothing was tested"
[ "$(stat -c %a "$T/r/$ix")" = 604 ] || fail "$ix is $(stat -c %a "$T/r/$ix") after the apply, was 604"
[ -z "$root" ] || [ "$(stat -c %u:%g "$T/r/$f1")" = 65534:65534 ] ||
	fail "$f1 is owned by $(stat -c %u:%g "$T/r/$f1") after the apply, was 65534:65534"
run 0 dcr-verify -q "$T/r" --against "$T/g/v1"
echo "ok: rebuilt files keep their mode"
