#!/bin/sh
# The whole refit through a directory store: dcr-diff | dcr-pack | dcr-push
# on the trainer side, dcr-pull | dcr-apply on the receiver side, with several
# payloads; the receiver ends bit-identical to the new checkpoint. Also the
# by-hand paths: dcr-pull -o DIR then dcr-apply DIR, tar tvf of a pulled
# stream, and a second apply of the same pack changes nothing; STORE/NAME/
# with a trailing slash is STORE/NAME.
. "$DCR_SRC/tests/lib-xfer.sh"
gen 32M 1
S="$T/store"
publish "$S/v1" -s 64K
n=$(ls "$S/v1" | grep -c '^payload-[0-9]*\.dcrp$') || true
[ "$n" -ge 4 ] || fail "expected several payloads in the store, found $n"
[ -f "$S/v1/manifest.dcrm" ] || fail "no manifest in the store"
run_ok dcr-pack --list --porcelain "$S/v1"
[ "$(grep -c '^payload	' "$T/out")" = "$n" ] || fail "--list shows other payloads: $(cat "$T/out")"
grep -q '^manifest	' "$T/out" || fail "--list shows no manifest"

# stream: dcr-pull | dcr-apply
refit r1 "$S/v1"

# the pulled stream is a tar file a person can list; manifest last
run_ok dcr-pull -q "$S/v1"
mv "$T/out" "$T/v1.tar"
tar tf "$T/v1.tar" >"$T/list" || fail "tar cannot list the pulled stream"
[ "$(tail -n 1 "$T/list")" = manifest.dcrm ] || fail "manifest is not last: $(cat "$T/list")"
[ "$(grep -c '^payload-' "$T/list")" = "$n" ] || fail "tar lists other payloads"

# STORE/NAME/ as a shell completes a directory: the trailing slash ignored
run_ok dcr-pull -q "$S/v1/"
cmp -s "$T/out" "$T/v1.tar" || fail "dcr-pull STORE/NAME/ pulled another stream"
run_ok dcr-push -q "$T/v1.tar" "$S/v1copy//"
[ -f "$S/v1copy/manifest.dcrm" ] || fail "dcr-push STORE/NAME/ did not make NAME"

# by hand: pull into a directory, apply the directory
receiver r2
run_ok dcr-pull -q -o "$T/p2" "$S/v1"
run_ok dcr-apply -q "$T/r2" "$T/p2"
same "$T/r2" "$T/g/v1"

# applying the same pack again leaves the receiver as it is
snapshot "$T/r2" >"$T/snap"
run_ok dcr-apply -q "$T/r2" "$T/v1.tar"
untouched "$T/r2" "$T/snap"
same "$T/r2" "$T/g/v1"

# payload checksums: BLAKE3 by default; --digest sha256 writes what older
# receivers read, and this one applies either
run_ok dcr-pack --list "$S/v1"
grep -q ' blake3 [0-9a-f]\{16\}$' "$T/out" || fail "--list does not show blake3 payloads: $(cat "$T/out")"
publish "$S/v1s" -s 64K --digest sha256
run_ok dcr-pack --list "$S/v1s"
grep -q ' sha256 [0-9a-f]\{16\}$' "$T/out" || fail "--list does not show sha256 payloads: $(cat "$T/out")"
grep ' blake3 ' "$T/out" && fail "--digest sha256 wrote blake3 payloads"
run_ok dcr-pack --list --porcelain "$S/v1s"
[ "$(grep '^payload	' "$T/out" | cut -f9 | sort -u)" = sha256 ] ||
	fail "--porcelain does not end payload records with sha256: $(cat "$T/out")"
refit r3 "$S/v1s"
rc=0
dcr-pack --digest md5 "$T/none" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 129 ] || fail "--digest md5 exited $rc, want 129"
grep -q "unknown --digest 'md5'" "$T/err" || fail "no usage error for --digest md5: $(cat "$T/err")"

# a pack directory written again with fewer payloads, by dcr-pack -o (the
# step packed again with a larger --payload-size) and by dcr-pull -o (the
# next pack pulled into the same directory): the old pack's extra
# payloads go before the new manifest lands, and the directory applies
dcr-diff "$T/g/v0" "$T/g/v1" -o "$T/d1" 2>"$T/err" || fail "diff: $(cat "$T/err")"
publish "$S/v1big" -s 64M
for how in pack pull; do
	rm -rf "$T/pd"
	if [ $how = pack ]; then
		dcr-pack -q -s 64K -o "$T/pd" "$T/d1" && dcr-pack -q -s 64M -o "$T/pd" "$T/d1"
	else
		dcr-pull -q -o "$T/pd" "$S/v1" && dcr-pull -q -o "$T/pd" "$S/v1big"
	fi 2>"$T/err" || fail "$how -o twice: $(cat "$T/err")"
	[ "$(ls "$T/pd" | grep -c '^payload-')" = 1 ] ||
		fail "$how -o: payloads of the old pack left: $(ls "$T/pd")"
	receiver r4
	dcr-apply -q "$T/r4" "$T/pd" 2>"$T/err" || fail "$how -o twice: the directory is refused: $(cat "$T/err")"
	same "$T/r4" "$T/g/v1"
done

# a pack that fails (its delta cut short) into a directory holding an
# older pack leaves that pack as it was: its payloads were overwritten one
# by one as the new pack went, and the directory applied neither pack
rm -rf "$T/pd"
dcr-pack -q -s 64K -o "$T/pd" "$T/d1" 2>"$T/err" || fail "pack: $(cat "$T/err")"
[ "$(ls "$T/pd" | grep -c '^payload-')" -gt 2 ] || fail "too few payloads: $(ls "$T/pd")"
dcr-diff --codec plain "$T/g/v1" "$T/g/v0" -o "$T/dback" 2>"$T/err" || fail "diff: $(cat "$T/err")"
head -c $(($(wc -c <"$T/dback") * 3 / 4)) "$T/dback" >"$T/dcut"
(cd "$T/pd" && ls -A | sort && sha256sum *) >"$T/pd.before"
dcr-pack -q -s 16K -o "$T/pd" "$T/dcut" 2>"$T/err" && fail "a pack of a delta cut short passed"
grep -q "truncated" "$T/err" || fail "not refused as cut short: $(cat "$T/err")"
(cd "$T/pd" && ls -A | sort && sha256sum *) >"$T/pd.after"
cmp -s "$T/pd.before" "$T/pd.after" || fail "the failed pack changed the directory: $(diff "$T/pd.before" "$T/pd.after")"
receiver r4f
dcr-apply -q "$T/r4f" "$T/pd" 2>"$T/err" || fail "the older pack no longer applies: $(cat "$T/err")"
same "$T/r4f" "$T/g/v1"

# a signed pack's directory packed again without a version (so unsigned):
# the old signature goes too; it would be taken for this pack's, changed
dcr-keygen -p "$T/k.pub" -s "$T/k.sec" >/dev/null 2>&1 || fail "dcr-keygen exited $?"
rm -rf "$T/pd"
{ dcr-pack -q --sign "$T/k.sec" --version 1 -o "$T/pd" "$T/d1" && dcr-pack -q -o "$T/pd" "$T/d1"; } 2>"$T/err" ||
	fail "signed, then unsigned into one directory: $(cat "$T/err")"
[ ! -e "$T/pd/manifest.dcrm.sig" ] || fail "the signed pack's signature was left with the unsigned one"
# ... and packed again with a version but unsigned, by dcr-pack and by
# dcr-pull -o: the old signature goes as well (a reader with the key took
# it for this manifest's, "the signed bytes were changed"); signed again,
# the new signature stays
for how in pack pull; do
	rm -rf "$T/pd"
	dcr-pack -q --sign "$T/k.sec" --version 1 -o "$T/pd" "$T/d1" 2>"$T/err" || fail "signed: $(cat "$T/err")"
	if [ $how = pack ]; then
		dcr-pack -q --version 1 -o "$T/pd" "$T/d1"
	else
		dcr-pack -q --version 1 -o "$T/pu1" "$T/d1" && dcr-push -q "$T/pu1" "$S/unsigned1" &&
			dcr-pull -q -o "$T/pd" "$S/unsigned1"
	fi 2>"$T/err" || fail "$how: versioned, unsigned, into the signed pack's directory: $(cat "$T/err")"
	[ ! -e "$T/pd/manifest.dcrm.sig" ] || fail "$how: another pack's signature was left with a versioned unsigned one"
	receiver r4s
	dcr-apply -q --verify-key "$T/k.pub" "$T/r4s" "$T/pd" 2>"$T/err" && fail "$how: an unsigned pack passed the key"
	grep -q "is not signed" "$T/err" || fail "$how: not refused as unsigned: $(cat "$T/err")"
done
dcr-pack -q --sign "$T/k.sec" --version 1 -o "$T/pd" "$T/d1" 2>"$T/err" || fail "signed again: $(cat "$T/err")"
[ -e "$T/pd/manifest.dcrm.sig" ] || fail "a signed pack written over an unsigned one has no signature"
receiver r4s
dcr-apply -q --verify-key "$T/k.pub" "$T/r4s" "$T/pd" 2>"$T/err" || fail "signed again: refused: $(cat "$T/err")"
same "$T/r4s" "$T/g/v1"

# a name pushed again with fewer payloads and no signature (the store's
# pack directory is a pack directory too): the earlier push's extra
# payloads and its signature go before the new manifest; the store's
# directory applies as it lies, and pulls as before
{ dcr-pack -q -s 64K --sign "$T/k.sec" --version 1 "$T/d1" | dcr-push -q - "$S/again" &&
	dcr-pack -q -s 64M "$T/d1" | dcr-push -q - "$S/again"; } 2>"$T/err" ||
	fail "a name pushed twice: $(cat "$T/err")"
[ "$(ls "$S/again")" = "manifest.dcrm
payload-000000.dcrp" ] || fail "the earlier push left: $(ls "$S/again")"
receiver r5
dcr-apply -q "$T/r5" "$S/again" 2>"$T/err" || fail "the store's pack directory is refused: $(cat "$T/err")"
same "$T/r5" "$T/g/v1"
refit r6 "$S/again"

# a pack missing from a store that exists, and a store that does not exist
# (a typo in the path): each named in one line, and told apart
for src in "$S/v9" "$T/no-such-store/v1"; do
	rc=0
	dcr-pull -q "$src" >"$T/out" 2>"$T/pull.err" || rc=$?
	[ "$rc" = 128 ] || fail "dcr-pull $src exited $rc, want 128"
	one_line pull dcr-pull
done
contains "$ERR" "no pack 'v1': the store '$T/no-such-store' is not a directory that exists"
dcr-pull -q "$S/v9" 2>&1 >/dev/null | grep -q "no pack 'v9' in '$S' (no manifest" ||
	fail "a pack missing from a store that exists is not named"
