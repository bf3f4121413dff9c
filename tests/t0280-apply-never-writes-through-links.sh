#!/bin/sh
# dcr-apply writes only files the receiver owns. A weight file that is a
# symbolic link (a Hugging Face cache snapshot linking into blobs/) or a
# hard link shared with another name is rebuilt under .dcr/stage/ and
# renamed over the link: the receiver ends at the target, the shared file
# stays byte for byte as it was. A .dcr that is a symbolic link, or a
# planted link at .dcr/lock, is refused (exit 128) before anything is
# written; a link planted at .dcr/log is not followed. And an apply killed
# at any durable step leaves .dcr/stage/ empty once it has been rerun.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new --files 2 "$T/a" w:BF16:64x64 n:F32:64
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" w 0=1 7=3 100=1 4095=2
$MKST xor "$T/b" n 3=1
run 0 dcr-diff -o "$T/d" "$T/a" "$T/b"

# a cache snapshot: every file a symbolic link into blobs/
mkdir -p "$T/hf/blobs" "$T/hf/snap"
for f in "$T"/a/*; do
	h=$(sha256sum "$f" | cut -c1-16)
	cp "$f" "$T/hf/blobs/$h"
	ln -s "../blobs/$h" "$T/hf/snap/$(basename "$f")"
done
blobs=$(cd "$T/hf/blobs" && sha256sum *)
run 0 dcr-apply "$T/hf/snap" "$T/d"
same "$T/hf/snap" "$T/b"
[ "$(cd "$T/hf/blobs" && sha256sum *)" = "$blobs" ] || fail "a shared blob was rewritten through its link"
for f in "$T"/hf/snap/*.safetensors; do
	[ -L "$f" ] && fail "'$f' is still a link after the apply"
done
say "ok: symbolic links broken, blobs untouched"

# hard links to a file outside the receiver
mkdir "$T/outside"
cp -r "$T/a" "$T/hl"
for f in "$T"/hl/*.safetensors; do
	ln -f "$f" "$T/outside/$(basename "$f")"
done
outside=$(cd "$T/outside" && sha256sum *)
run 0 dcr-apply "$T/hl" "$T/d"
same "$T/hl" "$T/b"
[ "$(cd "$T/outside" && sha256sum *)" = "$outside" ] || fail "a hard-linked file outside the receiver was rewritten"
say "ok: hard links broken, the other names untouched"

# .dcr itself a link, and a planted link at .dcr/lock
cp -r "$T/a" "$T/r1"
mkdir "$T/elsewhere"
ln -s "$T/elsewhere" "$T/r1/.dcr"
before=$(snapshot "$T/r1")
run 128 dcr-apply "$T/r1" "$T/d"
one_line_error dcr-apply
grep -q 'symbolic link' "$T/err" || { cat "$T/err"; fail "no word of the link"; }
[ -z "$(ls -A "$T/elsewhere")" ] || fail "receiver state went through the .dcr link"
[ "$(snapshot "$T/r1")" = "$before" ] || fail "the receiver changed"
cp -r "$T/a" "$T/r2"
mkdir "$T/r2/.dcr"
: >"$T/victim"
ln -s "$T/victim" "$T/r2/.dcr/lock"
run 128 dcr-apply "$T/r2" "$T/d"
one_line_error dcr-apply
grep -q 'symbolic link' "$T/err" || { cat "$T/err"; fail "no word of the lock's link"; }
cp -r "$T/a" "$T/r3"
mkdir "$T/r3/.dcr"
ln -s "$T/victim" "$T/r3/.dcr/log"
run 0 dcr-apply "$T/r3" "$T/d"
same "$T/r3" "$T/b"
[ ! -s "$T/victim" ] || fail "the log was written through a planted link"
say "ok: receiver state never goes through a link"

# killed at every durable step of a structural change, then rerun: the
# stage is empty
$MKST add "$T/b" extra:U8:300 --file model-9.safetensors
run 0 dcr-diff -o "$T/d2" "$T/a" "$T/b"
n=1
while :; do
	rm -rf "$T/k"
	cp -r "$T/a" "$T/k"
	set +e
	DCR_FAULT_AT=$n dcr-apply "$T/k" "$T/d2" >/dev/null 2>&1
	rc=$?
	set -e
	run 0 dcr-apply "$T/k" "$T/d2"
	same_fast "$T/k" "$T/b"
	[ -z "$(ls -A "$T/k/.dcr/stage" 2>/dev/null)" ] || { ls -la "$T/k/.dcr/stage"; fail "DCR_FAULT_AT=$n left files in .dcr/stage"; }
	[ $rc -eq 137 ] || break
	n=$((n + 1))
	[ $n -le 300 ] || fail "the apply never finished under DCR_FAULT_AT"
done
say "ok: $((n - 1)) kills, the stage empty after each rerun"
