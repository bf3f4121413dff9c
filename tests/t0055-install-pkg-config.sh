#!/bin/sh
# An installed libdcr is usable on its own: `make install DESTDIR=...`
# puts dcr.h, the wing headers, libdcr.so and dcr.pc where dcr.pc says;
# libdcr(3)'s example builds with nothing but
# `cc prog.c $(pkg-config --cflags --libs dcr)` against that copy (not the
# build tree), runs against the installed libdcr.so and refits a
# checkpoint; and the installed library exports only dcr_ symbols.
. "$DCR_SRC/tests/lib-dcr.sh"
: "${DCR_BUILD:?run through make check}"
MAKE=${DCR_MAKE:-make}
CC=${DCR_CC:-cc}
PKG_CONFIG=${DCR_PKG_CONFIG:-pkg-config}
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
command -v nm >/dev/null 2>&1 || fail "nm (binutils) is missing: cannot check the exports"
src="$DCR_BUILD/tests/libdcr-example.c"
[ -s "$src" ] || fail "$src is not built (make check builds it from man/libdcr.3)"

D="$T/inst"
# make's own variables (a TESTS=... of the caller) must not reach install
(unset MAKEFLAGS MFLAGS; $MAKE -s -C "$DCR_BUILD" install DESTDIR="$D") \
	>"$T/install.log" 2>&1 || { tail -20 "$T/install.log" >&2; fail "make install DESTDIR=$D failed"; }

pc=$(find "$D" -name dcr.pc)
[ -n "$pc" ] && [ "$(printf '%s\n' "$pc" | wc -l)" -eq 1 ] || fail "installed dcr.pc: '$pc'"
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
[ -f "$libdir/libdcr.so" ] || fail "no libdcr.so beside $pcdir"
# dcr.pc names the final prefix; the sysroot maps it into DESTDIR
pkg() { PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$D" $PKG_CONFIG "$@"; }
pkg --exists dcr || fail "pkg-config finds no dcr in $pcdir"
cflags=$(pkg --cflags dcr) || fail "pkg-config --cflags dcr failed"
libs=$(pkg --libs dcr) || fail "pkg-config --libs dcr failed"
inc=$(printf '%s\n' $cflags | sed -n 's/^-I//p' | grep "^$D" | head -1)
[ -n "$inc" ] && [ -f "$inc/dcr.h" ] || fail "pkg-config --cflags ($cflags) names no directory with dcr.h"
for h in core/error.h refit/apply.h transport/store.h placement/layout.h; do
	[ -f "$inc/$h" ] || fail "$h is not installed under $inc"
done
printf '%s\n' $libs | grep -qx -- "-L$libdir" || fail "pkg-config --libs ($libs) does not name $libdir"

# build the example in a directory of its own: only the installed copy is
# in reach (a sanitized build's libdcr needs its runtime linked first, so
# the sanitizer flags of the build come along)
mkdir "$T/b"
cp "$src" "$T/b/refit.c"
(cd "$T/b" && $CC -std=c11 ${DCR_SAN_CFLAGS:-} -o refit refit.c $cflags $libs) >"$T/cc.log" 2>&1 ||
	{ cat "$T/cc.log" >&2; fail "the example does not build with pkg-config --cflags --libs dcr"; }
[ ! -s "$T/cc.log" ] || { cat "$T/cc.log" >&2; fail "the example built with warnings"; }
if command -v ldd >/dev/null 2>&1; then
	LD_LIBRARY_PATH="$libdir" ldd "$T/b/refit" >"$T/ldd" 2>&1 || true
	grep -q "libdcr\.so\.0 => $libdir/" "$T/ldd" ||
		{ cat "$T/ldd" >&2; fail "the example does not load the installed libdcr.so"; }
fi

run 0 gen-checkpoint -q --size 1M --steps 1 --shards 2 --change 0.03 "$T/g"
cp -r "$T/g/v0" "$T/r"
run 0 env LD_LIBRARY_PATH="$libdir" "$T/b/refit" "$T/g/v0" "$T/g/v1" "$T/v1.delta" "$T/r"
grep -q '^v1 ' "$T/out" || fail "unexpected report: $(cat "$T/out")"
same_fast "$T/r" "$T/g/v1"

# only dcr_ symbols leave the installed library
nm -D --defined-only "$libdir/libdcr.so" >"$T/nm" || fail "nm -D failed on $libdir/libdcr.so"
awk 'NF >= 3 && $2 != "A" { print $3 }' "$T/nm" >"$T/syms"
[ -s "$T/syms" ] || fail "nm -D lists no symbols in $libdir/libdcr.so"
if grep -v '^dcr_' "$T/syms" >"$T/bad"; then
	head -20 "$T/bad" >&2
	fail "the installed libdcr.so exports $(wc -l <"$T/bad") symbols without the dcr_ prefix"
fi
for s in dcr_diff dcr_apply dcr_commit_local dcr_verify_against dcr_push dcr_pull; do
	grep -qx "$s" "$T/syms" || fail "the installed libdcr.so does not export $s"
done
say "ok: installed into $D; the example builds with pkg-config alone and refits; $(wc -l <"$T/syms") dcr_ symbols exported"
