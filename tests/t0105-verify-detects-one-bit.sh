#!/bin/sh
# dcr-verify --against is a real oracle (the round-trip tests lean on it):
# it reports one flipped low bit, +0 vs -0 and a NaN payload change with the
# tensor and its first differing element, and a dtype change, a shape change,
# a missing and an extra tensor; every time exit 1. --progress shows the
# bytes hashed or compared; --tensor hashes that tensor alone.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new "$T/a" w:BF16:16x16 z:BF16:8:zero n:BF16:4:rep/c07f f:F32:5 e:U8:0x4:zero
cp -r "$T/a" "$T/ref"
same "$T/a" "$T/ref"

check() { # TENSOR ELEMENT: porcelain names the tensor and element
	run 1 dcr-verify --porcelain "$T/b" --against "$T/ref"
	[ "$(grep -vc '^ok	' "$T/out")" -eq 1 ] || { cat "$T/out"; fail "expected one differing tensor"; }
	grep -q "^differ	$1	1	$2	" "$T/out" || { cat "$T/out"; fail "wrong report for $1[$2]"; }
}

cp -r "$T/a" "$T/b" && $MKST xor "$T/b" w 200=1 && check w 200
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST set "$T/b" z 3=8000 && check z 3
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST set "$T/b" n 2=7fc1 && check n 2
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST xor "$T/b" f 4=80000000 && check f 4
# the human report names the tensor too
run 1 dcr-verify "$T/b" --against "$T/ref"
grep -q "'f'.*element 4" "$T/out" || fail "report does not name 'f' element 4"

rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST retype "$T/b" w:F16:16x16
run 1 dcr-verify --porcelain "$T/b" --against "$T/ref"
grep -q "^layout	w$" "$T/out" || fail "dtype change not reported"
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST retype "$T/b" w:BF16:256
run 1 dcr-verify --porcelain "$T/b" --against "$T/ref"
grep -q "^layout	w$" "$T/out" || fail "shape change not reported"
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST rm "$T/b" e
run 1 dcr-verify --porcelain "$T/b" --against "$T/ref"
grep -q "^missing	e$" "$T/out" || fail "missing tensor not reported"
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST add "$T/b" x:I8:3
run 1 dcr-verify --porcelain "$T/b" --against "$T/ref"
grep -q "^extra	x$" "$T/out" || fail "extra tensor not reported"
# and the state id moves with one bit
rm -rf "$T/b" && cp -r "$T/a" "$T/b" && $MKST xor "$T/b" w 0=1
[ "$(state_id "$T/b")" != "$(state_id "$T/a")" ] || fail "state id ignores a bit"

# --progress: stdout as without it, the bytes on stderr (the whole
# checkpoint hashed, one tensor's with --tensor, DENSE's compared); one
# differing tensor's line stands apart from the progress
$MKST new "$T/p" big:F32:1024x1024 small:F32:16
run 0 dcr-verify "$T/p"
id=$(cat "$T/out")
run 0 dcr-verify --progress "$T/p"
[ "$(cat "$T/out")" = "$id" ] || fail "--progress changed the state id"
grep -q "dcr-verify: hashed 4/4 MiB (100%)" "$T/err" || fail "no progress: $(cat -v "$T/err")"
run 0 dcr-verify --progress "$T/p" --tensor small
grep -q "	small$" "$T/out" || fail "no digest of 'small'"
grep -q "hashed 0/0 MiB (100%)" "$T/err" || fail "--tensor hashed more than its tensor: $(cat -v "$T/err")"
run 0 dcr-verify --tensors "$T/p"
grep "	small$" "$T/out" >"$T/one"
run 0 dcr-verify --tensor small "$T/p"
cmp -s "$T/out" "$T/one" || fail "--tensor and --tensors disagree on 'small'"
cp -r "$T/p" "$T/q" && $MKST xor "$T/q" big 7=1
run 1 dcr-verify --progress "$T/q" --against "$T/p"
grep -q "compared 4/4 MiB (100%)" "$T/err" || fail "no compare progress: $(cat -v "$T/err")"
grep -q "^differ: 'big'" "$T/out" || fail "no report of 'big'"
run 0 dcr-verify -q --progress "$T/p"
[ ! -s "$T/err" ] && [ ! -s "$T/out" ] || fail "-q printed: $(cat "$T/out" "$T/err")"
say "ok: progress, and --tensor hashes its tensor alone"

# at a terminal, work that ends within its first second shows no progress
# line unless --progress asks for one from the start
if command -v script >/dev/null 2>&1 && script -q -c true /dev/null </dev/null >/dev/null 2>&1; then
	script -q -c "dcr-verify '$T/p'" /dev/null >"$T/tty" </dev/null
	[ "$(tr -d '\r' <"$T/tty")" = "$id" ] || fail "quick work at a terminal drew progress: $(cat -v "$T/tty")"
	script -q -c "dcr-verify --progress '$T/p'" /dev/null >"$T/tty" </dev/null
	grep -q "hashed 4/4 MiB" "$T/tty" || fail "--progress at a terminal drew nothing: $(cat -v "$T/tty")"
	say "ok: no progress line for quick work at a terminal"
fi
