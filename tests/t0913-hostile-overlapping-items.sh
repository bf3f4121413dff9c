#!/bin/sh
# A delta whose items of one tensor change the same elements twice, with
# digests that hold for the stream's order, is refused before the commit
# point with one line: the journal's check puts a tensor's items together
# sorted by start while the replay writes them in the stream's order, and
# since the replay does not hash touched tensors again (unless dcr-apply
# --recheck), the two must never disagree. (Ranges may overlap: each
# producer of a pack sends its own elements.) The receiver is left as it
# was and no journal stays behind. So do the in-memory apply and
# dcr-apply --layout, of one serving rank and of a replica.
. "$DCR_SRC/tests/lib-dcr.sh"
H="$DCR_BUILD/tests/hostile"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 1 "$T/g"
"$H" overlap "$T/g/v0" "$T/d" || fail "hostile exited $?"
cp -r "$T/g/v0" "$T/r"
before=$(snapshot "$T/r")
run 128 dcr-apply "$T/r" "$T/d"
one_line_error dcr-apply
grep -q "delta has items that change element 4 of .* twice" "$T/err" || { cat "$T/err" >&2; fail "not refused for the overlap"; }
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
[ ! -e "$T/r/.dcr/journal" ] || fail "a journal was committed"
run 0 dcr-apply --recover "$T/r"
same "$T/r" "$T/g/v0"
# and with --recheck too
run 128 dcr-apply --recheck "$T/r" "$T/d"
grep -q "twice" "$T/err" || { cat "$T/err" >&2; fail "--recheck: not refused for the overlap"; }
say "ok: an element changed twice is refused before the commit, receiver untouched"

# The same with DENSE overwrites, which go into the journal as the delta
# holds them and are decoded straight to bytes by the check.
"$H" overlap "$T/g/v0" "$T/dd" dense || fail "hostile exited $?"
run 128 dcr-apply "$T/r" "$T/dd"
one_line_error dcr-apply
grep -q "delta has items that change element 4 of .* twice" "$T/err" || { cat "$T/err" >&2; fail "dense: not refused for the overlap"; }
[ "$(snapshot "$T/r")" = "$before" ] || fail "dense: the receiver changed"
[ ! -e "$T/r/.dcr/journal" ] || fail "dense: a journal was committed"

# A dense item whose zstd frame is cut short, after a good one: refused
# before the commit point with one line.
"$H" overlap "$T/g/v0" "$T/dc" corrupt-dense || fail "hostile exited $?"
run 128 dcr-apply "$T/r" "$T/dc"
one_line_error dcr-apply
[ "$(snapshot "$T/r")" = "$before" ] || fail "corrupt dense: the receiver changed"
[ ! -e "$T/r/.dcr/journal" ] || fail "corrupt dense: a journal was committed"
# The same items in a pack, whose payloads are spooled as they arrive: a
# dense overwrite goes into the spool as it came, and the check refuses it.
run 0 dcr-pack -q -o "$T/pc" "$T/dc"
run 128 dcr-apply "$T/r" "$T/pc"
one_line_error dcr-apply
[ "$(snapshot "$T/r")" = "$before" ] || fail "corrupt dense pack: the receiver changed"
[ ! -e "$T/r/.dcr/journal" ] || fail "corrupt dense pack: a journal was committed"
run 0 dcr-apply --recover "$T/r"
same "$T/r" "$T/g/v0"
say "ok: dense overwrites that overlap, or whose frame is cut, are refused before the commit"

# The in-memory apply and the serving layouts (one rank, a replica) refuse
# the overlap too, their tensors and shards untouched.
M="$DCR_BUILD/tests/mem-apply"
run 0 dcr-pack -q -o "$T/po" "$T/d"
if [ -x "$M" ]; then
	rm -rf "$T/m"
	cp -r "$T/g/v0" "$T/m"
	run 128 "$M" --device cpu "$T/m" "$T/po"
	grep -q "overlapping items for" "$T/err" || { cat "$T/err" >&2; fail "mem-apply: not refused for the overlap"; }
	[ "$(snapshot "$T/m")" = "$before" ] || fail "mem-apply: the tensors changed"
fi
run 0 dcr-layout generate --config "$T/g/v0/config.json" --framework vllm --tp 2 -o "$T/map"
run 0 dcr-layout materialize --map "$T/map" --canonical "$T/g/v0" -o "$T/s0"
shards=$(snapshot "$T/s0/rank-0"; snapshot "$T/s0/rank-1")
for how in "--rank 0 $T/s/rank-0" "--replica $T/s"; do
	rm -rf "$T/s"
	cp -r "$T/s0" "$T/s"
	# shellcheck disable=SC2086 # $how is two words and a path without spaces
	run 128 dcr-apply --layout "$T/map" $how "$T/d"
	one_line_error dcr-apply
	grep -q "is changed twice" "$T/err" || { cat "$T/err" >&2; fail "layout $how: not refused for the overlap"; }
	[ "$(snapshot "$T/s/rank-0"; snapshot "$T/s/rank-1")" = "$shards" ] ||
		fail "layout $how: the shards changed"
done
say "ok: the in-memory apply and dcr-apply --layout refuse the overlap, untouched"
