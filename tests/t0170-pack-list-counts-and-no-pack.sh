#!/bin/sh
# dcr-pack --list counts each payload's records (tensors, items, changes)
# and the counts add up to the manifest's, for a pack directory and a tar
# stream alike; a directory or stream that holds no pack (no manifest, no
# payloads) is an error (exit 128), not an empty listing.
. "$DCR_SRC/tests/lib-dcr.sh"
for c in dcr-pack gen-checkpoint; do
	command -v "$c" >/dev/null 2>&1 || skip "$c is not on PATH"
done
run 0 gen-checkpoint -q --size 1M --steps 1 "$T/g"
run 0 dcr-diff --chunk 4096 "$T/g/v0" "$T/g/v1" -o "$T/d"
run 0 dcr-pack --payload-size 4K -o "$T/p" "$T/d"
run 0 dcr-pack --payload-size 4K "$T/d"
mv "$T/out" "$T/p.tar"

for p in "$T/p" "$T/p.tar"; do
	run 0 dcr-pack --list --porcelain "$p"
	# manifest: size base target attempt payloads tensors removed items changes
	m_items=$(awk -F'\t' '$1 == "manifest" {print $9}' "$T/out")
	m_changes=$(awk -F'\t' '$1 == "manifest" {print $10}' "$T/out")
	m_payloads=$(awk -F'\t' '$1 == "manifest" {print $6}' "$T/out")
	# payload: index size digest raw tensors items changes alg
	p_items=$(awk -F'\t' '$1 == "payload" {n += $7} END {print n + 0}' "$T/out")
	p_changes=$(awk -F'\t' '$1 == "payload" {n += $8} END {print n + 0}' "$T/out")
	p_tensors=$(awk -F'\t' '$1 == "payload" && $6 > 0 {n++} END {print n + 0}' "$T/out")
	n=$(grep -c '^payload	' "$T/out")
	[ "$n" = "$m_payloads" ] || fail "$p: $n payloads listed, the manifest names $m_payloads"
	[ "$n" -gt 1 ] || fail "$p: one payload only; the test wants several"
	[ "$m_items" -gt 0 ] || fail "$p: no items in the manifest"
	[ "$p_items" = "$m_items" ] || fail "$p: payload items add up to $p_items, manifest $m_items"
	[ "$p_changes" = "$m_changes" ] || fail "$p: payload changes add up to $p_changes, manifest $m_changes"
	[ "$p_tensors" = "$n" ] || fail "$p: a payload lists no tensor records"
done

# no pack: an empty directory, a directory of other files, an empty tar
mkdir "$T/empty" "$T/other"
echo hello >"$T/other/readme"
for p in "$T/empty" "$T/other"; do
	run 128 dcr-pack --list "$p"
	one_line_error dcr-pack
	grep -q "is not a pack" "$T/err" || fail "$p: $(cat "$T/err")"
done
: >"$T/no-names"
tar cf "$T/empty.tar" -T "$T/no-names"
run 128 dcr-pack --list "$T/empty.tar"
grep -q "is not a pack" "$T/err" || fail "empty tar: $(cat "$T/err")"
say "ok: --list counts add up; no pack is an error"
