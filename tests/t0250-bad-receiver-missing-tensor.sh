#!/bin/sh
# A receiver missing a tensor of the delta's base (one the target changes,
# one it keeps unchanged, one it removes) or holding it with another dtype
# or shape is refused with exit 1 or 128 and one line naming the tensor,
# and its files stay exactly as they were.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new --files 2 "$T/a" keep.x:BF16:16 change.x:BF16:32 gone.x:F32:4 other.x:BF16:8
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" change.x 3=1
$MKST rm "$T/b" gone.x
run 0 dcr-diff "$T/a" "$T/b"
mv "$T/out" "$T/d"

check() { # RECEIVER TENSOR
	snapshot "$1" >"$T/snap0"
	set +e
	dcr-apply "$1" "$T/d" >"$T/out" 2>"$T/err"
	rc=$?
	set -e
	[ $rc -eq 1 ] || [ $rc -eq 128 ] || { cat "$T/err"; fail "$2: exit $rc"; }
	one_line_error dcr-apply
	grep -q "'$2'" "$T/err" || { cat "$T/err"; fail "message does not name '$2'"; }
	snapshot "$1" >"$T/snap1"
	cmp -s "$T/snap0" "$T/snap1" || fail "$2: receiver files changed"
	[ ! -e "$1/.dcr/journal" ] || fail "$2: a journal was committed"
}

for t in keep.x change.x gone.x; do
	rm -rf "$T/r" && cp -r "$T/a" "$T/r" && $MKST rm "$T/r" "$t"
	check "$T/r" "$t"
done
rm -rf "$T/r" && cp -r "$T/a" "$T/r" && $MKST retype "$T/r" change.x:F16:32
check "$T/r" change.x
rm -rf "$T/r" && cp -r "$T/a" "$T/r" && $MKST retype "$T/r" keep.x:BF16:4x4
check "$T/r" keep.x
say "ok: receivers missing or reshaping a tensor refused, naming it"
