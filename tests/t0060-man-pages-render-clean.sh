#!/bin/sh
# Every man page renders without a warning from groff at its strictest
# (-ww: undefined macros and strings, lines it cannot fill or adjust,
# bad escapes), at the terminal width man uses by default, and each
# command's page exists, names the command and has the sections a reader
# looks for.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v groff >/dev/null 2>&1 || skip "groff is missing (scripts/install-deps installs groff-base)"

n=0
for page in "$DCR_SRC"/man/*.[1-8]; do
	out=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z -rLL=78n "$page" 2>&1) ||
		fail "groff fails on $page: $out"
	[ -z "$out" ] || fail "groff warns about $page: $out"
	n=$((n + 1))
done
[ "$n" -ge 17 ] || fail "only $n man pages in $DCR_SRC/man"

for c in dcr dcr-diff dcr-pack dcr-push dcr-pull dcr-apply dcr-commit dcr-verify \
	dcr-layout dcr-keygen dcr-relay; do
	page="$DCR_SRC/man/$c.1"
	[ -f "$page" ] || fail "no man page for $c"
	for sec in NAME SYNOPSIS DESCRIPTION "EXIT STATUS"; do
		grep -q "^\.SH \"\{0,1\}$sec" "$page" || fail "$c.1 has no $sec section"
	done
	grep -q "^$c \\\\-" "$page" || fail "$c.1's NAME does not name $c"
done
echo "ok: $n pages render clean"
