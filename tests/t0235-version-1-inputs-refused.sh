#!/bin/sh
# Inputs and records of an older dcr, whose tensor digests and state ids
# were SHA-256 (format version 1), are refused with one line that says what
# to do, and nothing is written: a version 1 delta (dcr-apply, dcr-pack), a
# version 1 payload and manifest, a HEAD and an applied record written by
# an older dcr, an older interrupted apply's journal. An older state cache
# is only a cache: it is recomputed, and the apply goes on.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"
command -v dcr-pack >/dev/null 2>&1 || skip "dcr-pack is not on PATH"

run 0 gen-checkpoint -q --size 1M --steps 1 --change 0.03 "$T/g"
run 0 dcr-diff "$T/g/v0" "$T/g/v1" -o "$T/d"

# set_le32 FILE OFFSET VALUE
set_le32() {
	python3 -c 'import struct, sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); f.write(struct.pack("<I", int(sys.argv[3])))' "$@"
}

untouched() { # RECEIVER WHAT
	snapshot "$1" >"$T/snap1"
	cmp -s "$T/snap0" "$T/snap1" || fail "$2: the receiver's files changed"
	[ ! -e "$1/.dcr/journal" ] || fail "$2: a journal was committed"
}

cp -r "$T/g/v0" "$T/r"
snapshot "$T/r" >"$T/snap0"

# a version 1 delta
cp "$T/d" "$T/d1"
set_le32 "$T/d1" 8 1
run 128 dcr-apply "$T/r" "$T/d1"
one_line_error dcr-apply
grep -q "version 1 delta, made by an older dcr .*make it again with this dcr-diff" "$T/err" ||
	fail "dcr-apply: $(cat "$T/err")"
untouched "$T/r" "a version 1 delta"
run 128 dcr-pack -o "$T/p1" "$T/d1"
grep -q "version 1 delta" "$T/err" || fail "dcr-pack: $(cat "$T/err")"

# a version 1 payload, then a version 1 manifest (its trailer made right)
run 0 dcr-pack -o "$T/p" "$T/d"
cp -r "$T/p" "$T/pp"
pl=$(ls "$T/pp"/payload-*.dcrp | head -n 1)
set_le32 "$pl" 8 1
run 128 dcr-apply "$T/r" "$T/pp"
one_line_error dcr-apply
grep -q "version 1 payload, packed by an older dcr" "$T/err" || fail "payload: $(cat "$T/err")"
untouched "$T/r" "a version 1 payload"
cp -r "$T/p" "$T/pm"
python3 -c 'import hashlib, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
b[8:12] = struct.pack("<I", 1); b[-32:] = hashlib.sha256(b[:-32]).digest()
open(p, "wb").write(b)' "$T/pm/manifest.dcrm"
run 128 dcr-apply "$T/r" "$T/pm"
one_line_error dcr-apply
grep -q "version 1 manifest, packed by an older dcr" "$T/err" || fail "manifest: $(cat "$T/err")"
untouched "$T/r" "a version 1 manifest"

# a HEAD and an applied record of an older dcr
mkdir -p "$T/r/.dcr"
id=$(printf '%064d' 0)
printf 'dcr-head 1\nversion 3\nstate %s\n' "$id" >"$T/r/.dcr/HEAD"
run 128 dcr-apply "$T/r" "$T/d"
one_line_error dcr-apply
grep -q "HEAD' was written by an older dcr (version 1 state ids): remove .*HEAD' and .*applied'" "$T/err" ||
	fail "HEAD: $(cat "$T/err")"
untouched "$T/r" "an older HEAD"
run 128 dcr-commit --status "$T/r"
grep -q "written by an older dcr" "$T/err" || fail "dcr-commit --status: $(cat "$T/err")"
rm "$T/r/.dcr/HEAD"
printf 'dcr-applied 1\nbase %s\ntarget %s\nattempt %032d\nversion 3\n' "$id" "$id" 0 >"$T/r/.dcr/applied"
run 128 dcr-commit "$T/r"
grep -q "applied' was written by an older dcr" "$T/err" || fail "applied: $(cat "$T/err")"
rm "$T/r/.dcr/applied"

# an older interrupted apply: its journal is left for the older dcr
cp "$T/d1" "$T/r/.dcr/journal"
run 128 dcr-apply --recover "$T/r"
one_line_error dcr-apply
grep -q "journal was written by an older dcr .*dcr-apply --recover first" "$T/err" ||
	fail "journal: $(cat "$T/err")"
snapshot "$T/r" >"$T/snap1"
cmp -s "$T/snap0" "$T/snap1" || fail "an older journal: the receiver's files changed"
cmp -s "$T/d1" "$T/r/.dcr/journal" || fail "the older journal was not left as it was"
rm "$T/r/.dcr/journal"
say "ok: version 1 inputs and records refused, nothing written"

# a newer dcr's delta, payload, manifest (its checksum of a kind this dcr
# may not know) and records: one line saying so and what to upgrade
cp "$T/d" "$T/d9"
set_le32 "$T/d9" 8 9
cp -r "$T/p" "$T/p9"
set_le32 "$(ls "$T/p9"/payload-*.dcrp | head -n 1)" 8 9
cp -r "$T/p" "$T/m9"
set_le32 "$T/m9/manifest.dcrm" 8 9
for x in "d9 delta" "p9 payload" "m9 manifest"; do
	set -- $x
	run 128 dcr-apply "$T/r" "$T/$1"
	one_line_error dcr-apply
	grep -q "version 9 $2, made by a newer dcr (this one reads version 2): upgrade dcr here" "$T/err" ||
		fail "$1: $(cat "$T/err")"
	untouched "$T/r" "a newer $2"
done
run 128 dcr-pack -o "$T/p9x" "$T/d9"
grep -q "made by a newer dcr" "$T/err" || fail "dcr-pack: $(cat "$T/err")"
printf 'dcr-head 9\nversion 3\nstate %s\n' "$id" >"$T/r/.dcr/HEAD"
run 128 dcr-apply "$T/r" "$T/d"
one_line_error dcr-apply
grep -q "newer dcr" "$T/err" || fail "newer HEAD: $(cat "$T/err")"
untouched "$T/r" "a newer HEAD"
rm "$T/r/.dcr/HEAD"
cp "$T/d9" "$T/r/.dcr/journal"
run 128 dcr-apply --recover "$T/r"
one_line_error dcr-apply
grep -q "newer dcr" "$T/err" || fail "newer journal: $(cat "$T/err")"
cmp -s "$T/d9" "$T/r/.dcr/journal" || fail "the newer journal was not left as it was"
rm "$T/r/.dcr/journal"
say "ok: a newer dcr's inputs and records refused, nothing written"

# an older state cache that still names the files: recomputed, not trusted
run 0 dcr-apply "$T/r" "$T/d"
same "$T/r" "$T/g/v1"
sed -i '1s/^dcr-state 2$/dcr-state 1/' "$T/r/.dcr/state"
head -n 1 "$T/r/.dcr/state" | grep -q '^dcr-state 1$' || fail "could not plant an older cache"
cp -r "$T/g/v1" "$T/r1"
run 0 dcr-diff "$T/g/v1" "$T/g/v0" -o "$T/back"
run 0 dcr-apply "$T/r" "$T/back"
same "$T/r" "$T/g/v0"
head -n 1 "$T/r/.dcr/state" | grep -q '^dcr-state 2$' || fail "the cache was not rewritten"
say "ok: an older state cache is recomputed"
