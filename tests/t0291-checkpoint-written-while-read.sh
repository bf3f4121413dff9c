#!/bin/sh
# A checkpoint written while a command reads it (a save still in progress,
# an asynchronous checkpoint that dcr-diff was started beside) gave a
# delta, a state id or a verdict of bytes that were neither its old ones
# nor its new ones, and left that mixture's digests in NEW/.dcr/state for
# the next step's diff to trust. Each command now compares every file's
# size and modification time with those it opened and refuses in one line
# (exit 128): dcr-diff before the delta's end (so no receiver takes the
# stream), writing no output file and no state cache; dcr-verify before
# it prints. The write is made by tests/mmap-shim.c, loaded with
# LD_PRELOAD: it flips the last byte of the named file right after the
# command maps it.
. "$DCR_SRC/tests/lib-dcr.sh"
mmap_shim

$MKST new --files 2 "$T/a" w:BF16:256x256 n:F32:4096
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" w 0=1 700=3
$MKST xor "$T/b" n 5=1

# written CMD-NAME FILE CMD...: CMD with FILE written after its mapping
# exits 128 with one line that says the file changed.
written() {
	_n=$1 _f=$(realpath "$2")
	shift 2
	run 128 env LD_PRELOAD="$SHIM" DCR_TEST_SCRIBBLE="$_f" "$@"
	one_line_error "$_n"
	grep -q "'$_f' changed while it was read (it was written" "$T/err" ||
		fail "$_n: no word of the file written: $(cat "$T/err")"
}

for side in a b; do
	rm -rf "$T/x" "$T/y" "$T/o"
	cp -r "$T/a" "$T/x"
	cp -r "$T/b" "$T/y"
	mkdir "$T/o"
	[ $side = a ] && f=$(ls "$T"/x/*.safetensors | head -1) || f=$(ls "$T"/y/*.safetensors | tail -1)
	written dcr-diff "$f" dcr-diff -o "$T/o/d" "$T/x" "$T/y"
	[ -z "$(ls -A "$T/o")" ] || fail "dcr-diff left '$(ls -A "$T/o")' behind"
	[ ! -e "$T/y/.dcr/state" ] || fail "dcr-diff left NEW's state cache after NEW changed"
	# to a pipe: the stream has no end, so no reader takes it
	rm -rf "$T/x" "$T/y"
	cp -r "$T/a" "$T/x"
	cp -r "$T/b" "$T/y"
	[ $side = a ] && f=$(ls "$T"/x/*.safetensors | head -1) || f=$(ls "$T"/y/*.safetensors | tail -1)
	written dcr-diff "$f" dcr-diff "$T/x" "$T/y"
	cp "$T/out" "$T/stream"
	cp -r "$T/a" "$T/r$side"
	run 128 dcr-apply "$T/r$side" "$T/stream"
	dcr-verify -q "$T/r$side" --against "$T/a" || fail "a receiver took the stream of a diff that refused"
	[ $side = a ] && what=BASE || what=NEW
	echo "ok: dcr-diff refuses when $what is written while read"
done

rm -rf "$T/y"
cp -r "$T/b" "$T/y"
written dcr-verify "$(ls "$T"/y/*.safetensors | head -1)" dcr-verify "$T/y"
[ ! -s "$T/out" ] || fail "dcr-verify printed a state id: $(cat "$T/out")"
rm -rf "$T/y"
cp -r "$T/b" "$T/y"
written dcr-verify "$(ls "$T"/y/*.safetensors | head -1)" dcr-verify "$T/y" --against "$T/b"
echo "ok: dcr-verify refuses too"

# unchanged files: the same commands pass
run 0 dcr-diff -o "$T/d" "$T/a" "$T/b"
cp -r "$T/a" "$T/r"
run 0 dcr-apply "$T/r" "$T/d"
run 0 dcr-verify "$T/r" --against "$T/b"
echo "ok: unchanged checkpoints pass"
