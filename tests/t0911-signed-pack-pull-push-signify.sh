#!/bin/sh
# Signatures end to end: dcr-pack --sign makes a detached signature that
# signify-openbsd -V verifies over manifest.dcrm without dcr, and a key
# made by signify-openbsd -G -n signs for dcr; dcr-push carries the
# signature up before the manifest, dcr-pull fetches it and passes it on
# before the manifest, and with --verify-key (or DCR_VERIFY_KEY) dcr-pull
# refuses an unsigned pack, another key's, a manifest changed in the store,
# or a version below --min-version before it passes on a byte of the pack.
. "$DCR_SRC/tests/lib-xfer.sh"
need dcr-keygen dcr-commit
gen 2M 1
run_ok dcr-keygen -p "$T/k.pub" -s "$T/k.sec"
run_ok dcr-keygen -p "$T/o.pub" -s "$T/o.sec"
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack --sign "$T/k.sec" --version 1 -s 256K -o "$T/p" "$T/d"
grep -q "^untrusted comment: verify with k.pub$" "$T/p/manifest.dcrm.sig" ||
	fail "the signature's comment does not name k.pub: $(head -1 "$T/p/manifest.dcrm.sig")"

if command -v signify-openbsd >/dev/null 2>&1; then
	(cd "$T/p" && signify-openbsd -V -p "$T/k.pub" -m manifest.dcrm) >"$T/sv" 2>&1 ||
		fail "signify-openbsd does not verify dcr's signature: $(cat "$T/sv")"
	(cd "$T/p" && signify-openbsd -V -q -p "$T/o.pub" -m manifest.dcrm) 2>/dev/null &&
		fail "signify-openbsd verified with the wrong key"
	# a signify key signs for dcr, and dcr's check takes it
	signify-openbsd -G -n -p "$T/s.pub" -s "$T/s.sec" 2>/dev/null || fail "signify -G failed"
	run_ok dcr-pack --sign "$T/s.sec" --version 1 -o "$T/ps" "$T/d"
	receiver rs
	run_ok dcr-apply --verify-key "$T/s.pub" "$T/rs" "$T/ps"
	same "$T/rs" "$T/g/v1"
	(cd "$T/ps" && signify-openbsd -V -q -p "$T/s.pub" -m manifest.dcrm) ||
		fail "signify-openbsd does not verify its own key's dcr signature"
else
	echo "note: signify-openbsd is missing: the interoperability half is skipped"
fi

# push carries the signature, up before the manifest
run_ok dcr-push -q "$T/p" "$T/store/v1"
[ -f "$T/store/v1/manifest.dcrm.sig" ] || fail "dcr-push did not store the signature"
cmp -s "$T/store/v1/manifest.dcrm.sig" "$T/p/manifest.dcrm.sig" || fail "the stored signature differs"
[ ! "$T/store/v1/manifest.dcrm.sig" -nt "$T/store/v1/manifest.dcrm" ] ||
	fail "the signature went up after the manifest"

# pull passes it on before the manifest, and checks it
run_ok dcr-pull --verify-key "$T/k.pub" -o "$T/pulled" "$T/store/v1"
cmp -s "$T/pulled/manifest.dcrm.sig" "$T/p/manifest.dcrm.sig" || fail "dcr-pull -o did not carry the signature"
dcr-pull --verify-key "$T/k.pub" "$T/store/v1" >"$T/s.tar" 2>"$T/err" || fail "dcr-pull: $(cat "$T/err")"
tar tf "$T/s.tar" | tail -2 >"$T/last2"
printf 'manifest.dcrm.sig\nmanifest.dcrm\n' | cmp -s - "$T/last2" || fail "stream order: $(cat "$T/last2")"
refit r --verify-key "$T/k.pub" "$T/store/v1"
DCR_VERIFY_KEY="$T/o.pub:$T/k.pub" refit r2 "$T/store/v1"
# an unsigned pull still carries it; an unsigned pack pulls with no signature
run_ok dcr-pull -o "$T/pulled2" "$T/store/v1"
[ -f "$T/pulled2/manifest.dcrm.sig" ] || fail "an unchecked pull dropped the signature"

nothing_out() { # what dcr-pull wrote holds no entry
	[ -z "$(tar tf "$T/out" 2>/dev/null)" ] || fail "dcr-pull passed entries on: $(tar tf "$T/out" | head -3)"
}
expect_fail 128 dcr-pull --verify-key "$T/o.pub" "$T/store/v1"
contains "$ERR" "which is not one of the 1 trusted"
nothing_out
expect_fail 128 dcr-pull --verify-key "$T/k.pub" --min-version 2 "$T/store/v1"
contains "$ERR" "signed version 1 is below the least taken, 2"
nothing_out
run_ok dcr-pull --verify-key "$T/k.pub" --min-version 1 -o "$T/pulled3" "$T/store/v1"
run_ok dcr-pack -o "$T/pu" "$T/d"
run_ok dcr-push -q "$T/pu" "$T/store/u1"
expect_fail 128 dcr-pull --verify-key "$T/k.pub" "$T/store/u1"
contains "$ERR" "is not signed"
nothing_out
# the store swaps in another manifest (and keeps the signature)
run_ok dcr-diff -o "$T/d2" "$T/g/v1" "$T/g/v0"
run_ok dcr-pack --sign "$T/k.sec" --version 2 -o "$T/p2" "$T/d2"
cp -r "$T/store/v1" "$T/store/x1"
cp "$T/p2/manifest.dcrm" "$T/store/x1/manifest.dcrm"
expect_fail 128 dcr-pull --verify-key "$T/k.pub" "$T/store/x1"
contains "$ERR" "signature verification failed"
nothing_out
rc=0
dcr-pull --min-version 1 "$T/store/v1" >"$T/out" 2>"$T/err" || rc=$?
[ $rc = 129 ] || fail "--min-version without a key exited $rc"
contains "$(head -1 "$T/err")" "--min-version needs a key"
