#!/bin/sh
# With a verify key, dcr-apply refuses -- exit 128, one line, before a byte
# reaches the checkpoint or HEAD moves -- an unsigned pack, a pack signed
# by another key, a manifest changed after signing (its own checksum made
# anew), a payload changed and re-checksummed, a payload swapped in from
# another signed pack of the same base, a delta stream (no signature), a
# replayed older signed version and a signed dense copy that would roll the
# receiver back (which without a key it does), and a pack of another
# policy signed by the same key. The keys come from
# --verify-key (repeatable) or DCR_VERIFY_KEY (':'-separated).
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-commit dcr-keygen gen-checkpoint
H="$DCR_BUILD/tests/hostile"
run 0 gen-checkpoint -q --size 1M --steps 2 --shards 2 "$T/g"
run 0 dcr-keygen -p "$T/k.pub" -s "$T/k.sec"
run 0 dcr-keygen -p "$T/o.pub" -s "$T/o.sec"
K="--verify-key $T/k.pub"
for v in 1 2; do
	run 0 dcr-diff -o "$T/d$v" "$T/g/v$((v - 1))" "$T/g/v$v"
	run 0 dcr-pack --sign "$T/k.sec" --version $v --policy rl -s 4K -o "$T/p$v" "$T/d$v"
done
run 0 dcr-diff -o "$T/d02" "$T/g/v0" "$T/g/v2"
run 0 dcr-pack --sign "$T/k.sec" --version 2 -s 4K -o "$T/p02" "$T/d02"
run 0 dcr-diff --dense -o "$T/dense1" "$T/g/v1"
run 0 dcr-pack --sign "$T/k.sec" --version 1 -o "$T/pdense1" "$T/dense1"
run 0 dcr-pack -o "$T/unsigned" "$T/d1"
run 0 dcr-pack --sign "$T/o.sec" --version 1 -o "$T/other" "$T/d1"

fresh() { # a receiver at v0, and what it holds
	rm -rf "$T/r"
	cp -r "$T/g/v0" "$T/r"
	rm -rf "$T/r/.dcr"
}
refused() { # PATTERN ARGS...: dcr-apply ARGS is refused, saying PATTERN; $T/r unchanged
	_pat=$1
	shift
	_b=$(snapshot "$T/r")
	_h=$(cat "$T/r/.dcr/HEAD" 2>/dev/null || :)
	run 128 dcr-apply "$@"
	one_line_error dcr-apply
	grep -q -- "$_pat" "$T/err" || { cat "$T/err"; fail "no word of '$_pat'"; }
	[ "$(snapshot "$T/r")" = "$_b" ] || fail "a refused pack changed the receiver"
	[ "$(cat "$T/r/.dcr/HEAD" 2>/dev/null || :)" = "$_h" ] || fail "HEAD moved"
	[ -z "$(ls -A "$T/r/.dcr/stage" 2>/dev/null)" ] || fail "files left in .dcr/stage"
}

fresh
refused "is not signed" $K "$T/r" "$T/unsigned"
refused "which is not one of the 1 trusted" $K "$T/r" "$T/other"
refused "delta stream, which carries no signature" $K "$T/r" "$T/d1"
DCR_VERIFY_KEY="$T/o.pub" refused "not one of the 1 trusted" "$T/r" "$T/p1"

# the manifest's version bumped and its checksum made anew: it parses, the
# signature does not hold
cp -r "$T/p1" "$T/tm"
python3 - "$T/tm/manifest.dcrm" <<'PY'
import hashlib, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
at = len(b) - 32 - 1 - 2 - 8   # le64 version, varint 2, "rl", trailer
assert struct.unpack_from("<Q", b, at)[0] == 1 and b[at + 9:at + 11] == b"rl"
struct.pack_into("<Q", b, at, 99)
b[-32:] = hashlib.sha256(b[:-32]).digest()
open(sys.argv[1], "wb").write(b)
PY
run 0 dcr-pack --list "$T/tm"
grep -q "version 99, policy rl" "$T/out" || fail "the tampered manifest does not list version 99"
refused "signature verification failed" $K "$T/r" "$T/tm"

# a payload changed and re-checksummed: it checks out alone, not against
# the signed manifest
cp -r "$T/p1" "$T/tp"
"$H" tamper "$T/p1/payload-000001.dcrp" "$T/tp/payload-000001.dcrp" || fail "hostile tamper exited $?"
refused "payload-000001.dcrp does not match the manifest's digest" $K "$T/r" "$T/tp"
# a payload of another signed pack of the same base (v0 -> v2)
cp -r "$T/p1" "$T/sw"
cp "$T/p02/payload-000000.dcrp" "$T/sw/payload-000000.dcrp"
refused "belongs to another delta" $K "$T/r" "$T/sw"
# the manifest of the other pack with this one's payloads
cp -r "$T/p1" "$T/sw2"
cp "$T/p02/manifest.dcrm" "$T/p02/manifest.dcrm.sig" "$T/sw2/"
refused "another delta than its payloads" $K "$T/r" "$T/sw2"

# signed and trusted: applied, the signed version recorded; either key
# source, a list of keys
run 0 dcr-apply --verify-key "$T/o.pub" $K "$T/r" "$T/p1"
run 0 dcr-commit "$T/r"
grep -q "committed version 1" "$T/err" || { cat "$T/err"; fail "the signed version was not committed"; }
DCR_VERIFY_KEY="$T/o.pub:$T/k.pub" run 0 dcr-apply "$T/r" "$T/p2"
run 0 dcr-commit "$T/r"
grep -q "committed version 2" "$T/err" || { cat "$T/err"; fail "version 2 was not committed"; }
same_fast "$T/r" "$T/g/v2"

# replays: v2 again, v1 (an older signed version), the signed dense copy of v1
refused "signed version 2 is not above version 2, which the receiver has committed" $K "$T/r" "$T/p2"
refused "signed version 1 is not above version 2" $K "$T/r" "$T/p1"
refused "signed version 1 is not above version 2.*rollback" $K "$T/r" "$T/pdense1"
# without a key the dense copy does roll the receiver back: what the check stops
cp -r "$T/r" "$T/nokey"
run 0 dcr-apply "$T/nokey" "$T/pdense1"
same_fast "$T/nokey" "$T/g/v1"
# a signed pack of another policy (another model's, signed by the same
# key): refused against the policy the receiver's first signed pack named
# (kept in .dcr/policy), or the one --policy or DCR_POLICY names; the
# operator moves a receiver with --policy, which is kept from then on
grep -q "^policy rl$" "$T/r/.dcr/policy" || fail ".dcr/policy does not name rl"
run 0 dcr-diff --dense -o "$T/densev2" "$T/g/v2"
run 0 dcr-pack --sign "$T/k.sec" --version 3 --policy other -o "$T/pother" "$T/densev2"
refused "signed for policy 'other', not 'rl', which this receiver follows (recorded in .dcr/policy" $K "$T/r" "$T/pother"
DCR_POLICY=rl refused "signed for policy 'other', not 'rl', which this receiver follows (--policy or DCR_POLICY)" $K "$T/r" "$T/pother"
run 129 dcr-apply $K --policy a/b "$T/r" "$T/pother"
run 128 dcr-apply --policy other "$T/r" "$T/pother"
grep -q -- "--policy needs a key" "$T/err" || { cat "$T/err"; fail "--policy without a key was not refused"; }
run 128 dcr-pull $K --policy rl -o "$T/pulled" "$T/pother"
grep -q "signed for policy 'other', not 'rl'" "$T/err" || { cat "$T/err"; fail "dcr-pull took another policy's pack"; }
[ ! -e "$T/pulled" ] || fail "a refused pull left '$T/pulled'"
# a damaged .dcr/policy is refused, naming the way out, which works
printf 'junk\n' >"$T/r/.dcr/policy"
refused "policy' is damaged (not a dcr-policy 1 record): move it aside; the receiver then follows" $K "$T/r" "$T/pother"
mv "$T/r/.dcr/policy" "$T/policy.damaged"
run 0 dcr-apply $K --policy other "$T/r" "$T/pother"
grep -q "^policy other$" "$T/r/.dcr/policy" || fail ".dcr/policy does not name the policy --policy moved it to"
run 0 dcr-commit "$T/r"
same_fast "$T/r" "$T/g/v2"
# a named version other than the signed one
fresh
refused "reaches version 1, not the 7 asked for" $K --version 7 "$T/r" "$T/p1"
# a key that cannot be read: refused before anything, and a key that
# DCR_VERIFY_KEY named says so (the operator set no option)
refused "cannot open '$T/gone.pub'" --verify-key "$T/gone.pub" "$T/r" "$T/p1"
grep -q "DCR_VERIFY_KEY" "$T/err" && fail "an option's key is blamed on DCR_VERIFY_KEY"
DCR_VERIFY_KEY="$T/k.pub:$T/gone.pub" refused "cannot open '$T/gone.pub'.*(a key DCR_VERIFY_KEY names)" "$T/r" "$T/p1"
