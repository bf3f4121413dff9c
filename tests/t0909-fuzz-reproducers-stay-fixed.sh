#!/bin/sh
# Every input fuzzing found (tests/fuzz/regress/: a DELTA-coded item whose
# exponent field was shifted by 64, an HTTP answer resumed past its range,
# ...) runs through the fuzz harness's parsers in this build without a
# crash or, in a sanitized build, a sanitizer report.
. "$DCR_SRC/tests/lib-dcr.sh"
R="$DCR_BUILD/tests/fuzz-replay"
[ -x "$R" ] || skip "tests/fuzz-replay is not built"
n=0
for f in "$DCR_SRC"/tests/fuzz/regress/*; do
	[ -f "$f" ] || continue
	run 0 "$R" "$f"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no reproducer in tests/fuzz/regress"
say "$n reproducers ran clean"
