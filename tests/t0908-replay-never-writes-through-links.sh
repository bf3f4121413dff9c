#!/bin/sh
# The last line of defence: an interrupted apply's journal is replayed
# (dcr-apply --recover, or the next dcr-apply) with in-place writes that
# never follow a link. A weight file replaced, between the crash and the
# replay, by a symbolic link or a hard link to a file outside the receiver
# is refused with one line naming it, the outside file keeps its bytes and
# the journal stays; with the link replaced by a copy the replay finishes.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
run 0 gen-checkpoint -q --size 2M --steps 1 --shards 2 "$T/g"
run 0 dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
new=$(state_id "$T/g/v1")
f=$(cd "$T/g/v0" && ls *.safetensors | head -1)
for kind in symbolic hard; do
	crash_committed "$T/g/v0" "$T/d" "$T/k" fresh
	mkdir -p "$T/outside"
	cp "$T/k/$f" "$T/outside/$f"
	rm "$T/k/$f"
	if [ $kind = symbolic ]; then ln -s "$T/outside/$f" "$T/k/$f"; else ln "$T/outside/$f" "$T/k/$f"; fi
	sum=$(sha256sum <"$T/outside/$f")
	run 128 dcr-apply --recover "$T/k"
	one_line_error dcr-apply
	grep -q "refusing to write through .*$f" "$T/err" || { cat "$T/err"; fail "$kind link: no refusal"; }
	[ "$(sha256sum <"$T/outside/$f")" = "$sum" ] || fail "$kind link: the outside file changed"
	[ -e "$T/k/.dcr/journal" ] || fail "$kind link: the journal went"
	rm "$T/k/$f"
	cp "$T/outside/$f" "$T/k/$f"
	run 0 dcr-apply --recover "$T/k"
	[ "$(state_id "$T/k")" = "$new" ] || fail "$kind link: the replay did not reach v1"
	[ "$(sha256sum <"$T/outside/$f")" = "$sum" ] || fail "$kind link: the outside file changed"
	rm -rf "$T/outside"
done
