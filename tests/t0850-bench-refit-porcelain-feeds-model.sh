#!/bin/sh
# scripts/bench-refit runs end to end on a tiny checkpoint (8M, one change
# rate, no real rate limit): every store it can start (dir; s3 with node;
# relay with dcr-relay) gives one --porcelain line with exactly the issue's
# eight fields, the cost scaling gives its scale= lines, and
# scripts/refit-model reads the --results file, checks the run against
# itself and predicts the paper's sizes. A smoke test of the scripts, not a
# measurement: the figures are not judged.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-push dcr-pull dcr-commit gen-checkpoint bench-compare curl
stores=dir
if command -v node >/dev/null 2>&1 && [ -d "${DCR_NODE_MODULES:-$DCR_SRC/tests/node/node_modules}/s3rver" ]; then
	stores="$stores s3"
fi
command -v dcr-relay >/dev/null 2>&1 && stores="$stores relay"
figs=
command -v gnuplot >/dev/null 2>&1 && figs="--figures $T/fig"

# PATH as a user's who names the build directory: where libtool left
# wrapper scripts there (a shared libdcr), the bench must time the
# commands they wrap, not the wrappers' bash (scripts/build-path.sh)
want_bin=$(dirname "$(command -v dcr-diff)")
bench_path=$PATH
. "$DCR_SRC/scripts/build-path.sh"
if [ -n "${DCR_BUILD:-}" ] && dcr_is_wrapper "$DCR_BUILD/dcr-diff"; then
	want_bin=$DCR_BUILD/.libs
	bench_path=$DCR_BUILD:$(echo "$PATH" | tr ':' '\n' | grep -vx "$DCR_BUILD/.libs" | paste -sd:)
fi
run 0 env -u DCR_BUILD PATH="$bench_path" bash "$DCR_SRC/scripts/bench-refit" --porcelain --size 8M \
	--changes 3 --rates 10G --transports "$stores" --receivers 2 --runs 1 --payload-size 1M \
	--scale-changes "3 10" --sizes "4M 8M" --workdir "$T/w" --results "$T/res" $figs
cp "$T/out" "$T/porcelain"
grep -q "^run=info .* programs=$want_bin\$" "$T/res" ||
	fail "the bench did not time the commands in $want_bin: $(grep '^run=info' "$T/res")"
if [ "$want_bin" = "$DCR_BUILD/.libs" ]; then
	grep -q "wrapper script; timing the commands it wraps, in $want_bin" "$T/err" ||
		fail "no note that the wrapper scripts were passed over: $(cat "$T/err")"
fi
# the refit lines: exactly the eight fields, in order
for s in $stores; do
	n=$(grep -c "^transport=$s " "$T/porcelain" || true)
	[ "$n" = 1 ] || fail "$n porcelain lines for $s, want 1: $(cat "$T/porcelain")"
done
num='[0-9][0-9.]*'
bad=$(grep '^transport=' "$T/porcelain" | grep -Ev "^transport=(dir|s3|relay) rate=10G change=3\\.0 dense_s=$num dcr_s=$num speedup=$num wire_bytes=[0-9]+ peak_rss_mib=$num\$" || true)
[ -z "$bad" ] || fail "porcelain lines not in the issue's form: $bad"
[ "$(grep -c '^scale=change ' "$T/porcelain")" = 2 ] || fail "want 2 scale=change lines: $(cat "$T/porcelain")"
[ "$(grep -c '^scale=size ' "$T/porcelain")" = 2 ] || fail "want 2 scale=size lines: $(cat "$T/porcelain")"
[ "$(grep -Evc '^(transport|scale)=' "$T/porcelain")" = 0 ] || fail "other lines on stdout: $(cat "$T/porcelain")"
# the records carry the porcelain fields and the rest; nothing is left behind
grep -q '^run=info ' "$T/res" || fail "no run=info record"
grep -q '^run=done ' "$T/res" || fail "no run=done record"
grep '^transport=dir ' "$T/res" | grep -q ' changed=[0-9]* .* apply_end=' || fail "the dir record lacks its phases"
[ -z "$(ls -A "$T/w")" ] || fail "the work directory was left: $(ls "$T/w")"
# the model reads the records, checks every row against this run, predicts 1T
run 0 python3 "$DCR_SRC/scripts/refit-model" --results "$T/res"
cp "$T/out" "$T/model"
nrows=$(echo "$stores" | wc -w)
grep -q "^  [0-9]* of $nrows rows within +-25%" "$T/model" || fail "the model did not check $nrows rows: $(cat "$T/model")"
grep -q '^  1T ' "$T/model" || fail "no 1T prediction: $(cat "$T/model")"
grep -q '^1T at 3%: predicted [0-9.]* s' "$T/model" || fail "no 1T verdict: $(cat "$T/model")"
# the capacity bound counts the receivers' CPU as measured with all of
# them applying at once: ten times that CPU (and wall, so that the cores
# the run got stay the same) in the scale= lines must raise the bound
# (the last term of the first checked row)
awk '/^scale=/ { for (i = 1; i <= NF; i++) if ($i ~ /^applyR_(cpu|s)=/) {
	split($i, kv, "="); $i = kv[1] "=" kv[2] * 10 } } { print }' "$T/res" >"$T/res10"
run 0 python3 "$DCR_SRC/scripts/refit-model" --results "$T/res10"
cp "$T/out" "$T/model10"
bound_of() { awk '/^check:/ { c = 1; next } c == 1 && /^  store/ { c = 2; next } c == 2 { print $NF; exit }' "$1"; }
b1=$(bound_of "$T/model") b10=$(bound_of "$T/model10")
[ -n "$b1" ] && [ -n "$b10" ] || fail "no capacity bound in the check: $(cat "$T/model")"
awk -v a="$b1" -v b="$b10" 'BEGIN { exit !(b + 0 > a + 0) }' ||
	fail "the bound did not grow with the receivers' CPU: $b1 -> $b10"
run 129 python3 "$DCR_SRC/scripts/refit-model"
run 128 python3 "$DCR_SRC/scripts/refit-model" --results "$T/porcelain.none"
run 129 bash "$DCR_SRC/scripts/bench-refit" --rates 2X
if [ -n "$figs" ]; then
	for f in speedup-vs-change.png time-vs-size.png bench-refit.out model.txt; do
		[ -s "$T/fig/$f" ] || fail "--figures wrote no $f"
	done
fi
exit 0
