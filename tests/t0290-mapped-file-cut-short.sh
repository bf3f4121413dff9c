#!/bin/sh
# A checkpoint file cut short while a command reads it through its mapping
# (a trainer saving its next step over the file dcr-diff reads, with
# O_TRUNC) raises SIGBUS. Each command says so in one line, removes its
# temporaries and exits 128, not "Bus error" (status 135); dcr-apply's line
# says what to do next. The cut is made by tests/mmap-shim.c, loaded
# with LD_PRELOAD: it truncates the named file right after its first mmap.
. "$DCR_SRC/tests/lib-dcr.sh"

mmap_shim

$MKST new --files 2 "$T/a" w:BF16:256x256 n:F32:4096
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" w 0=1 700=3
$MKST xor "$T/b" n 5=1
run 0 dcr-diff -o "$T/d" "$T/a" "$T/b"

# cut_short WHICH-FILE WANT-STATUS CMD...: run CMD with WHICH-FILE cut
# short after its mapping; it must exit 128 with one line of error.
cut_short() {
	_f=$(realpath "$1")
	shift
	run 128 env LD_PRELOAD="$SHIM" DCR_TEST_SHRINK="$_f" "$@"
	one_line_error "$(basename "$1")"
	grep -q 'mapped for reading or writing failed' "$T/err" || fail "no word of the mapped file: $(cat "$T/err")"
	[ ! -s "$_f" ] || fail "the shim did not cut '$_f' (the command never mapped it?)"
}

cp -r "$T/b" "$T/v"
f=$(ls "$T"/v/*.safetensors | head -1)
cut_short "$f" dcr-verify "$T/v"
say "ok: dcr-verify"

rm -rf "$T/v" "$T/o"
cp -r "$T/b" "$T/v"
mkdir "$T/o"
f=$(ls "$T"/v/*.safetensors | tail -1)
cut_short "$f" dcr-diff -o "$T/o/d" "$T/a" "$T/v"
[ -z "$(ls -A "$T/o")" ] || fail "dcr-diff left '$(ls -A "$T/o")' behind"
say "ok: dcr-diff, no temporaries left"

cp -r "$T/a" "$T/r"
f=$(ls "$T"/r/*.safetensors | head -1)
cut_short "$f" dcr-apply "$T/r" "$T/d"
grep -q 'rerun dcr-apply' "$T/err" || fail "dcr-apply does not say what to do next: $(cat "$T/err")"
say "ok: dcr-apply says to rerun"
