#!/bin/sh
# dcr-pack --list counts each payload's records (tensors, items, changes)
# and the counts add up to the manifest's, for a pack directory and a tar
# stream alike; a directory or stream that holds no pack (no manifest, no
# payloads) is an error (exit 128), not an empty listing. A delta (a file
# or a stream) is listed too: its counts and every tensor record are the
# pack's, with its items, changes and codecs per tensor, new and removed
# tensors named; a delta cut short or corrupted is an error with nothing
# on standard output.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack gen-checkpoint
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

# a tar pack on standard input lists as the file does
dcr-pack --list --porcelain - <"$T/p.tar" >"$T/stdin.out" 2>"$T/err" || fail "tar on stdin: $(cat "$T/err")"
run 0 dcr-pack --list --porcelain "$T/p.tar"
cmp -s "$T/stdin.out" "$T/out" || fail "a tar pack on standard input lists otherwise"

# a delta: the same counts and tensor records as its pack's manifest
for src in file stream; do
	if [ $src = file ]; then
		run 0 dcr-pack --list --porcelain "$T/d"
	else
		dcr-pack --list --porcelain - <"$T/d" >"$T/out" 2>"$T/err" || fail "stream: $(cat "$T/err")"
	fi
	mv "$T/out" "$T/dl"
	run 0 dcr-pack --list --porcelain "$T/p"
	# delta: size base target attempt tensors removed items changes kind
	awk -F'\t' '$1 == "delta" {print $3, $4, $5, $7, $8, $9}' "$T/dl" >"$T/dh"
	awk -F'\t' '$1 == "manifest" {print $3, $4, $5, $8, $9, $10}' "$T/out" >"$T/mh"
	cmp -s "$T/dh" "$T/mh" || fail "$src: delta header $(cat "$T/dh") against the manifest's $(cat "$T/mh")"
	[ "$(awk -F'\t' '$1 == "delta" {print $2, $10}' "$T/dl")" = "$(wc -c <"$T/d") step" ] ||
		fail "$src: size or kind: $(grep '^delta' "$T/dl")"
	grep '^tensor	' "$T/dl" | sort >"$T/dt"
	grep '^tensor	' "$T/out" | sort >"$T/mt"
	cmp -s "$T/dt" "$T/mt" || { diff "$T/dt" "$T/mt" | head -5; fail "$src: tensor records differ from the manifest's"; }
	# items: name items changes codecs; they add up to the header
	sums=$(awk -F'\t' '$1 == "items" {i += $3; c += $4} END {print i + 0, c + 0}' "$T/dl")
	[ "$sums" = "$(awk -F'\t' '$1 == "delta" {print $8, $9}' "$T/dl")" ] ||
		fail "$src: per-tensor items and changes add up to $sums"
	awk -F'\t' '$1 == "items" && $3 > 0 && $5 == "-" {bad = 1} END {exit bad}' "$T/dl" ||
		fail "$src: a tensor with items names no codec"
done
run 0 dcr-pack --list "$T/d"
grep -q "step delta: .* tensors (0 new), 0 removed, $m_items items, $m_changes changes" "$T/out" ||
	fail "the delta's summary line: $(head -1 "$T/out")"
# new and removed tensors, and a dense copy
$MKST new "$T/a" m.0:BF16:64 m.1:F32:8
cp -r "$T/a" "$T/b"
$MKST rm "$T/b" m.1
$MKST add "$T/b" m.2:BF16:5
$MKST xor "$T/b" m.0 3=1 9=2
run 0 dcr-diff "$T/a" "$T/b" -o "$T/d2"
run 0 dcr-pack --list --porcelain "$T/d2"
grep -q '^tensor	m.2	BF16	5	model.safetensors	[0-9a-f]*	new$' "$T/out" || fail "no new m.2: $(cat "$T/out")"
grep -q '^items	m.0	1	2	' "$T/out" || fail "m.0's items: $(cat "$T/out")"
grep -q '^removed	m.1$' "$T/out" || fail "m.1 is not listed removed: $(cat "$T/out")"
run 0 dcr-diff --dense "$T/b" -o "$T/d3"
run 0 dcr-pack --list --porcelain "$T/d3"
[ "$(awk -F'\t' '$1 == "delta" {print $10}' "$T/out")" = dense ] || fail "the dense copy: $(head -1 "$T/out")"
# cut short, or one byte changed: an error, nothing listed
head -c $(( $(wc -c <"$T/d") - 7 )) "$T/d" >"$T/dcut"
cp "$T/d" "$T/dbad"
printf '\377' | dd of="$T/dbad" bs=1 seek=200 conv=notrunc 2>/dev/null
for bad in dcut dbad; do
	run 128 dcr-pack --list "$T/$bad"
	one_line_error dcr-pack
	[ ! -s "$T/out" ] || fail "$bad: something was listed: $(head -2 "$T/out")"
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
