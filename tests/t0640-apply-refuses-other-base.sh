#!/bin/sh
# A pack whose manifest names a different base than the receiver holds:
# dcr-apply exits 1 with one line giving both state ids, and the receiver's
# files are untouched, whether the pack comes from a file or through a
# store (dcr-pull | dcr-apply). A manifest that belongs to another delta
# than the payloads before it (same base and target, another attempt) is
# refused with exit 128. The right receiver then takes both packs in turn.
. "$DCR_SRC/tests/lib-xfer.sh"
gen 8M 2
S="$T/store"
st diff dcr-diff "$T/g/v1" "$T/g/v2" | st pack dcr-pack -s 32K >"$T/p12.tar"
rc_is diff 0
rc_is pack 0
run_ok dcr-push -q "$T/p12.tar" "$S/v2"
receiver r 0
snapshot "$T/r" >"$T/snap"
base0=$(dcr-verify "$T/g/v0" | cut -c1-12)
base1=$(dcr-verify "$T/g/v1" | cut -c1-12)

st apply dcr-apply -q "$T/r" <"$T/p12.tar"
rc_is apply 1
one_line apply dcr-apply
contains "$ERR" "is not at the delta's base"
contains "$ERR" "$base0"
contains "$ERR" "$base1"
untouched "$T/r" "$T/snap"

st pull dcr-pull -q "$S/v2" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 1
one_line apply dcr-apply
contains "$ERR" "is not at the delta's base"
untouched "$T/r" "$T/snap"

# payloads of one delta, the manifest of another between the same states
for i in 1 2; do
	st diff dcr-diff "$T/g/v0" "$T/g/v1" | st pack dcr-pack -s 32K >"$T/p01-$i.tar"
	rc_is diff 0
	rc_is pack 0
done
man=$(tar tf "$T/p01-1.tar" | grep -c '^payload-') || true
packtar "$T/p01-1.tar" "$T/mix.tar" take "$man" "$T/p01-2.tar" "$man"
st apply dcr-apply -q "$T/r" <"$T/mix.tar"
rc_is apply 128
one_line apply dcr-apply
contains "$ERR" "the manifest belongs to another delta than its payloads"
untouched "$T/r" "$T/snap"

# the receiver takes v0 -> v1, then the v1 -> v2 pack from the store
st apply dcr-apply -q "$T/r" <"$T/p01-2.tar"
rc_is apply 0
same "$T/r" "$T/g/v1"
st pull dcr-pull -q "$S/v2" | st apply dcr-apply -q "$T/r"
rc_is pull 0
rc_is apply 0
same "$T/r" "$T/g/v2"
