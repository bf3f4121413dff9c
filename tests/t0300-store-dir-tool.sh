#!/bin/sh
# The directory store through store-tool: put/get/stat/list/delete, a missing
# object is exit 2 naming it, put-if-absent refuses an existing name (exit 3)
# and keeps the first content, parallel puts and gets round-trip, a listing
# ends through loops and fans of symbolic links, and refuses names no
# store could hold.
. "$DCR_SRC/tests/lib-store.sh"
S="$T/store"
mkdata "$T/a" 100000
run_ok "$TOOL" "$S" put v1/payload-000000 "$T/a"
run_ok "$TOOL" "$S" get v1/payload-000000
cmp "$T/out" "$T/a" || fail "get returned other bytes"
run_ok "$TOOL" "file://$S" get-fd v1/payload-000000
cmp "$T/out" "$T/a" || fail "get-fd returned other bytes"
run_ok "$TOOL" "$S" stat v1/payload-000000
[ "$(cat "$T/out")" = 100000 ] || fail "stat: $(cat "$T/out")"
expect_fail 2 "$TOOL" "$S" get v1/missing
contains "$ERR" "$S/v1/missing"
printf first >"$T/f1"
printf second >"$T/f2"
run_ok "$TOOL" "$S" put-if-absent refs/main "$T/f1"
expect_fail 3 "$TOOL" "$S" put-if-absent refs/main "$T/f2"
contains "$ERR" "already exists"
run_ok "$TOOL" "$S" get refs/main
[ "$(cat "$T/out")" = first ] || fail "put-if-absent overwrote"
run_ok "$TOOL" --parallel 4 "$S" put-many v2/p- 40 5000
run_ok "$TOOL" --parallel 4 "$S" get-many v2/p- 40 5000
run_ok "$TOOL" "$S" list v2/
[ "$(wc -l <"$T/out")" = 40 ] || fail "list v2/: $(cat "$T/out")"
# symbolic links in a store somebody else writes: a loop (c1/up is v3)
# and links that fan out (each c$i holds two links to c$((i+1)): 2^40
# paths) cannot make a listing endless (timeout only catches the hang);
# every object is listed under its own name
mkdir "$S/v3"
i=1
while [ $i -le 40 ]; do
	mkdir "$S/v3/c$i"
	printf x >"$S/v3/c$i/o"
	ln -s "../c$((i + 1))" "$S/v3/c$i/x"
	ln -s "../c$((i + 1))" "$S/v3/c$i/y"
	i=$((i + 1))
done
ln -s .. "$S/v3/c1/up"
for p in v3/ "" v3/c1; do
	run_ok timeout 60 "$TOOL" "$S" list $p
	i=1
	while [ $i -le 40 ]; do
		case v3/c$i/o in
		"$p"*) grep -qx "v3/c$i/o" "$T/out" || fail "list '$p' lacks v3/c$i/o" ;;
		esac
		i=$((i + 1))
	done
	[ "$(wc -l <"$T/out")" -lt 500 ] || fail "list '$p': $(wc -l <"$T/out") names"
done
rm -rf "$S/v3"
# names somebody else put in the store that no store could hold: as from
# a server, an error naming them, not names to act on (a listing that
# walked a directory nested past the longest name would only go deeper)
mkdir "$S/v4"
printf x >"$S/v4/ok"
printf x >"$S/v4/bad$(printf '\001')name"
expect_fail 128 "$TOOL" "$S" list v4/
contains "$ERR" "bad name"
contains "$ERR" "control character 0x01"
rm "$S/v4/bad"*
run_ok "$TOOL" "$S" list v4/
[ "$(cat "$T/out")" = v4/ok ] || fail "list v4/: $(cat "$T/out")"
c=dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd
d="$S/v4/$c/$c/$c/$c/$c/$c/$c/$c/$c/$c/$c"
mkdir -p "$d"
printf x >"$d/o"
expect_fail 128 "$TOOL" "$S" list v4/
contains "$ERR" "longer than any object's name"
rm -rf "$S/v4"
run_ok "$TOOL" "$S" delete v1/payload-000000
expect_fail 2 "$TOOL" "$S" delete v1/payload-000000
expect_fail 128 "$TOOL" "$S" put ../escape "$T/a"
contains "$ERR" "invalid object name"
echo "ok: directory store"
