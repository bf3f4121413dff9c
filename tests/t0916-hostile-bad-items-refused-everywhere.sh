#!/bin/sh
# Deltas with one bad item or tensor each (tests/hostile overlap KIND, the
# digests and target right for what the bad part would write) are refused
# with one line before anything is written, by every path that takes
# them: dcr-apply of the delta and of its pack, the in-memory apply, the
# squash, and dcr-apply --layout of one serving rank and of a replica.
#   pastend     an item from the first tensor's last 4 elements and 4 more
#               (the bytes after the tensor, which no digest checks). Taken,
#               the delta's apply grew the weight file past its tensors and
#               the pack's and the layouts' reported success.
#   undeclared  an item for a tensor no record declares
#   escape      a new tensor in "../escape.safetensors", outside the receiver
#   xor-new     a new tensor's values in an XOR item (it has no base bits);
#               also against a map that lists the tensor, where a rank took it
#               with the check gone (it XORs the bits the rank holds)
#   repeat      a tensor declared twice, an item for each, each record's
#               digest that of its own item: together they make bits
#               neither digest holds. --layout took it and wrote both.
#   misdigest   a well-formed delta whose item does not give its digest.
#               --layout --replica took it (it now checks every touched
#               canonical tensor before any rank changes); one rank alone
#               holds only part of the canonical data and cannot check.
# And a step that changes a tensor's dtype or shape: dcr-apply takes it, the
# layouts (whose map slices the old ones) refuse it.
# And a delta whose END counts one item more than its records.
. "$DCR_SRC/tests/lib-dcr.sh"
H="$DCR_BUILD/tests/hostile"
M="$DCR_BUILD/tests/mem-apply"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 0 "$T/g"
before=$(snapshot "$T/g/v0")
run 0 dcr-layout generate --config "$T/g/v0/config.json" --framework vllm --tp 1 -o "$T/map"
run 0 dcr-layout materialize --map "$T/map" --canonical "$T/g/v0" -o "$T/s0"
shards=$(snapshot "$T/s0/rank-0")

# refused WHY ARGS...: the command exits 128 with one line, which matches
# the extended regular expression WHY
refused() {
	_why=$1
	shift
	run "$st" "$@"
	one_line_error "$(basename "$1")"
	grep -Eq "$_why" "$T/err" || { cat "$T/err" >&2; fail "$*: not refused for '$_why'"; }
}

# untouched WHAT: the receivers are as they were, nothing is committed and
# nothing was written next to them
untouched() {
	[ "$(snapshot "$T/r")" = "$before" ] || fail "$1: the receiver changed"
	[ ! -e "$T/r/.dcr/journal" ] || fail "$1: a journal was committed"
	[ ! -e "$T/escape.safetensors" ] || fail "$1: a file was written outside the receiver"
	[ ! -e "$T/s/escape.safetensors" ] || fail "$1: a file was written outside a rank"
}

fresh() {
	rm -rf "$T/r" "$T/s" "$T/sq" "$T/m"
	cp -r "$T/g/v0" "$T/r"
	cp -r "$T/s0" "$T/s"
}

for kind in pastend undeclared escape xor-new repeat misdigest; do
	"$H" overlap "$T/g/v0" "$T/$kind" $kind || fail "hostile $kind exited $?"
	case $kind in
	pastend) why="item for '[^']*' runs past its end" ;;
	undeclared) why="item for undeclared tensor" ;;
	escape) why="names an unsafe file" ;;
	xor-new) why="XOR item for '[^']*', which (is not in|the receiver does not hold as in) the base" ;;
	repeat) why="tensor '[^']*' (is out of order|is declared twice)|tensors out of order" ;;
	misdigest) why="would not match its target digest" ;;
	esac
	st=128 # (mem-apply exits 1 for a digest that does not hold)

	fresh
	refused "$why" dcr-apply "$T/r" "$T/$kind"
	untouched "$kind, dcr-apply"

	rm -rf "$T/p-$kind"
	if [ $kind = undeclared ] || [ $kind = repeat ]; then
		# dcr-pack reads the records and refuses it too
		refused "$why" dcr-pack -q -o "$T/p-$kind" "$T/$kind"
	else
		run 0 dcr-pack -q -o "$T/p-$kind" "$T/$kind"
		fresh
		refused "$why" dcr-apply "$T/r" "$T/p-$kind"
		untouched "$kind, dcr-apply of the pack"
		if [ -x "$M" ]; then
			cp -r "$T/g/v0" "$T/m"
			# the in-memory apply meets a new tensor as one it does not hold
			[ $kind = misdigest ] && st=1
			refused "$why|no tensor 'zzzz.extra' in memory" "$M" --device cpu "$T/m" "$T/p-$kind"
			st=128
			[ "$(snapshot "$T/m")" = "$before" ] || fail "$kind, mem-apply: the tensors changed"
		fi
	fi

	case $kind in
	pastend | undeclared | repeat)
		refused "$why" dcr-pack --squash -o "$T/sq" "$T/$kind"
		[ ! -e "$T/sq" ] || fail "$kind: a refused squash left its output" ;;
	esac

	# a serving layout meets a new tensor as one its map lacks
	[ $kind = misdigest ] ||
		refused "$why|canonical tensor 'zzzz.extra' is not in the layout map" \
			dcr-apply --layout "$T/map" --rank 0 "$T/s/rank-0" "$T/$kind"
	refused "$why|canonical tensor 'zzzz.extra' is not in the layout map" \
		dcr-apply --layout "$T/map" --replica "$T/s" "$T/$kind"
	[ "$(snapshot "$T/s/rank-0")" = "$shards" ] || fail "$kind, --layout: the shards changed"
	untouched "$kind, --layout"
	say "ok: $kind refused everywhere, nothing written"
done

# xor-new once more, against a map that lists zzzz.extra (every rank holds
# bits for it, so no "not in the layout map" refuses it first): the check
# of the delta's own records refuses it
cp -r "$T/g/v0" "$T/cx"
$MKST add "$T/cx" zzzz.extra:F32:4 || fail "mkst add"
python3 -S - "$T/map" "$T/mapx" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["canonical"].append({"name": "zzzz.extra", "dtype": "F32", "shape": [4]})
m["stored"].append({"rank": 0, "name": "zzzz.extra", "dtype": "F32", "shape": [4],
                    "pieces": [{"kind": "affine", "canon": "zzzz.extra", "coff": 0,
                                "soff": 0, "dims": [[4, 1, 1]]}]})
json.dump(m, open(sys.argv[2], "w"))
EOF
run 0 dcr-layout materialize --map "$T/mapx" --canonical "$T/cx" -o "$T/sx"
xshards=$(snapshot "$T/sx/rank-0")
why="XOR item for 'zzzz.extra', which is not in the base"
st=128
refused "$why" dcr-apply --layout "$T/mapx" --rank 0 "$T/sx/rank-0" "$T/xor-new"
refused "$why" dcr-apply --layout "$T/mapx" --replica "$T/sx" "$T/xor-new"
[ "$(snapshot "$T/sx/rank-0")" = "$xshards" ] || fail "xor-new, a map with the tensor: the shards changed"
say "ok: xor-new refused by the layouts when the map lists the tensor"

# a step that changes a tensor's dtype (a norm kept in F32) or shape (a
# vocabulary grown by a row) is a step dcr-apply takes; a serving layout,
# whose map slices the old dtype and shape, refuses it with one line,
# nothing written
for spec in model.norm.weight:F32:128 model.embed_tokens.weight:BF16:609x128; do
	rm -rf "$T/rs"
	cp -r "$T/g/v0" "$T/rs"
	$MKST retype "$T/rs" "$spec" || fail "mkst retype $spec"
	run 0 dcr-diff -o "$T/rs.delta" "$T/g/v0" "$T/rs"
	fresh
	run 0 dcr-apply "$T/r" "$T/rs.delta"
	run 0 dcr-verify -q "$T/r" --against "$T/rs"
	st=128
	why="tensor '${spec%%:*}' has another dtype or shape than in the layout map"
	refused "$why" dcr-apply --layout "$T/map" --rank 0 "$T/s/rank-0" "$T/rs.delta"
	refused "$why" dcr-apply --layout "$T/map" --replica "$T/s" "$T/rs.delta"
	[ "$(snapshot "$T/s/rank-0")" = "$shards" ] || fail "$spec, --layout: the shards changed"
	say "ok: $spec taken by dcr-apply, refused by the layouts"
done

# END's counts one item more than the records (every record well-formed,
# the trailer made anew): refused by every reader; the replica took it
# (it wrote its own END), dcr-pack and the squash packed it and dcr-diff
# --merge merged it
rm -rf "$T/st"
cp -r "$T/g/v0" "$T/st"
$MKST xor "$T/st" model.norm.weight 3=1 || fail "mkst xor"
run 0 dcr-diff --codec plain -o "$T/st.delta" "$T/g/v0" "$T/st"
"$H" endcount "$T/st.delta" "$T/endcount" || fail "hostile endcount exited $?"
why="END counts do not match its records \(END: [0-9]+ tensors, 2 items, 1 changes; the records: [0-9]+, 1, 1\)"
st=128
fresh
refused "$why" dcr-apply "$T/r" "$T/endcount"
untouched "endcount, dcr-apply"
refused "$why" dcr-pack -q -o "$T/p-endcount" "$T/endcount"
[ ! -e "$T/p-endcount" ] || fail "endcount: a refused pack left its output"
refused "$why" dcr-pack --squash -o "$T/sq" "$T/endcount"
refused "$why" dcr-apply --layout "$T/map" --rank 0 "$T/s/rank-0" "$T/endcount"
# the trainer's merge of rank deltas (a full delta is one input it takes):
# the honest one merges, the lying one is refused
dcr-verify --tensors "$T/st" >"$T/st.digests" || fail "dcr-verify --tensors"
id0=$(dcr-verify "$T/g/v0") || fail "dcr-verify v0"
run 0 dcr-diff --merge --target-digests "$T/st.digests" --base-id "$id0" -o "$T/merged" "$T/st.delta"
refused "$why" dcr-diff --merge --target-digests "$T/st.digests" --base-id "$id0" -o "$T/merged2" "$T/endcount"
[ ! -e "$T/merged2" ] || fail "endcount: a refused merge left its output"
refused "$why" dcr-apply --layout "$T/map" --replica "$T/s" "$T/endcount"
[ "$(snapshot "$T/s/rank-0")" = "$shards" ] || fail "endcount, --layout: the shards changed"
untouched "endcount, --layout"
say "ok: END counts that lie refused everywhere"
