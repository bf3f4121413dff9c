#!/bin/sh
# An item whose range runs past its tensor's end (the last 4 elements of
# the first tensor and 4 more, with the digest of its first 4: the bytes
# after the tensor, which nothing would check, take the other 4) is refused
# with one line before anything is written, by every path that takes
# items: dcr-apply of the delta and of its pack, the in-memory apply, the
# squash, and dcr-apply --layout, of one rank and of a replica. Taken, the
# delta file's apply grew the weight file past its tensors and the others
# reported success.
. "$DCR_SRC/tests/lib-dcr.sh"
H="$DCR_BUILD/tests/hostile"
M="$DCR_BUILD/tests/mem-apply"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

run 0 gen-checkpoint -q --size 1M --steps 0 "$T/g"
"$H" overlap "$T/g/v0" "$T/d" pastend || fail "hostile exited $?"
run 0 dcr-pack -q -o "$T/pk" "$T/d"
before=$(snapshot "$T/g/v0")

# refused ARGS...: the command refuses with one line naming the overrun
refused() {
	run 128 "$@"
	one_line_error "$(basename "$1")"
	grep -q "item for '[^']*' runs past its end" "$T/err" ||
		{ cat "$T/err" >&2; fail "$*: not refused for the overrun"; }
}

for input in d pk; do
	rm -rf "$T/r"
	cp -r "$T/g/v0" "$T/r"
	refused dcr-apply "$T/r" "$T/$input"
	[ "$(snapshot "$T/r")" = "$before" ] || fail "$input: the receiver changed"
	[ ! -e "$T/r/.dcr/journal" ] || fail "$input: a journal was committed"
done
say "ok: dcr-apply refuses the overrun in a delta and in a pack"

if [ -x "$M" ]; then
	rm -rf "$T/m"
	cp -r "$T/g/v0" "$T/m"
	refused "$M" --device cpu "$T/m" "$T/pk"
	[ "$(snapshot "$T/m")" = "$before" ] || fail "mem-apply: the tensors changed"
	say "ok: the in-memory apply refuses it"
fi

refused dcr-pack --squash -o "$T/sq" "$T/d"
[ ! -e "$T/sq" ] || fail "a refused squash left its output"
say "ok: the squash refuses it"

run 0 dcr-layout generate --config "$T/g/v0/config.json" --framework vllm --tp 1 -o "$T/map"
run 0 dcr-layout materialize --map "$T/map" --canonical "$T/g/v0" -o "$T/s0"
shards=$(snapshot "$T/s0/rank-0")
rm -rf "$T/s"
cp -r "$T/s0" "$T/s"
refused dcr-apply --layout "$T/map" --rank 0 "$T/s/rank-0" "$T/d"
[ "$(snapshot "$T/s/rank-0")" = "$shards" ] || fail "--rank: the shards changed"
refused dcr-apply --layout "$T/map" --replica "$T/s" "$T/d"
[ "$(snapshot "$T/s/rank-0")" = "$shards" ] || fail "--replica: the shards changed"
say "ok: dcr-apply --layout refuses it, for a rank and for a replica"
