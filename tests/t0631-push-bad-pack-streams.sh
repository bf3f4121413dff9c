#!/bin/sh
# dcr-push on pack streams put back wrong (tests/packtar.py): a reordered
# stream and a duplicated payload are pushed and pull | apply ends
# bit-identical; a corrupted, truncated, missing or mislabelled payload, a
# manifest from another delta, a manifest that is not last, a stream
# without one, a delta and bytes that are no tar each end in exit 128, one line naming the entry and the cause,
# and no manifest in the store, so no receiver takes the pack as whole.
. "$DCR_SRC/tests/lib-xfer.sh"
gen 8M 1
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 32K "$T/d"
mv "$T/out" "$T/p.tar"
run_ok dcr-pack -s 32K "$T/d"
mv "$T/out" "$T/p2.tar" # the same delta packed again: same payloads
st diff dcr-diff "$T/g/v0" "$T/g/v1" | st pack dcr-pack -s 32K >"$T/other.tar"
rc_is diff 0
rc_is pack 0 # another delta between the same checkpoints: another attempt id
np=$(tar tf "$T/p.tar" | grep -c '^payload-') || true
[ "$np" -ge 4 ] || fail "want 4+ payloads, got $np"
man=$np
S="$T/store"
n=0

good() { # push $T/q.tar, then pull | apply must give the target
	n=$((n + 1))
	st push dcr-push -q "$T/q.tar" "$S/g$n"
	rc_is push 0
	refit r "$S/g$n"
}
bad() { # CAUSE: push $T/q.tar must be refused naming CAUSE, no manifest stored
	n=$((n + 1))
	st push dcr-push -q "$T/q.tar" "$S/b$n"
	rc_is push 128
	one_line push dcr-push
	contains "$ERR" "$1"
	[ ! -e "$S/b$n/manifest.dcrm" ] || fail "a manifest was stored for a refused pack"
	expect_fail 128 dcr-pull -q "$S/b$n"
	contains "$ERR" "no pack 'b$n'"
}

packtar "$T/p.tar" "$T/q.tar" swap 0 2
good
packtar "$T/p.tar" "$T/q.tar" dup 1
good
packtar "$T/p.tar" "$T/q.tar" take 1 "$T/p2.tar" 1
good

packtar "$T/p.tar" "$T/q.tar" flip 1 300
bad "payload-000001.dcrp is corrupt: checksum mismatch"
packtar "$T/p.tar" "$T/q.tar" flip "$man" 100
bad "manifest.dcrm is corrupt: checksum mismatch"
packtar "$T/p.tar" "$T/q.tar" cut 2 1000
bad "payload-000002.dcrp: body is"
packtar "$T/p.tar" "$T/q.tar" drop 2
bad "pack lacks payload 2 named by its manifest"
packtar "$T/p.tar" "$T/q.tar" rename 1 payload-000003.dcrp
bad "payload-000003.dcrp holds payload 1"
packtar "$T/p.tar" "$T/q.tar" swap "$((np - 1))" "$man"
bad "after the manifest"
packtar "$T/p.tar" "$T/q.tar" drop "$man"
bad "pack has no manifest"
packtar "$T/p.tar" "$T/q.tar" take 1 "$T/other.tar" 1
packtar "$T/q.tar" "$T/q1.tar" dup 1
packtar "$T/q1.tar" "$T/q.tar" take 2 "$T/p.tar" 1
bad "payload-000001.dcrp arrived twice with different contents"
packtar "$T/p.tar" "$T/q.tar" take "$man" "$T/other.tar" "$man"
bad "payload 0 does not match the manifest"
head -c 40000 "$T/p.tar" >"$T/q.tar"
bad "runcated"

# not a pack at all: a delta is named as one (the way out: dcr-pack),
# other bytes as neither, from a file or standard input
cp "$T/d" "$T/q.tar"
bad "is a delta, not a pack: make it a pack first (dcr-pack"
head -c 3000 "$T/p.tar" | tr '\0-\377' '\1-\377\0' >"$T/q.tar"
bad "q.tar is not a pack stream"
st push dcr-push -q - "$S/b-stdin" <"$T/d"
rc_is push 128
one_line push dcr-push
contains "$ERR" "standard input is a delta, not a pack"
expect_fail 128 dcr-apply "$T/g/v0" "$T/q.tar"
contains "$ERR" "q.tar is not a delta, and not a pack stream"
