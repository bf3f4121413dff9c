#!/bin/sh
# dcr-relay --verify-key guards payloads as it guards manifests: a payload
# asked for directly, of a pack whose manifest is not signed (u1) or that
# has none (n1), is answered with an error that says why, and is neither
# fetched into the cache nor served; the signed pack's payloads, asked for
# before its manifest, are served.
. "$DCR_SRC/tests/lib-relay.sh"
command -v dcr-keygen >/dev/null 2>&1 || skip "dcr-keygen is not on PATH"
S="$T/store"
gen 1M 1
signed_packs 256K
mkdir -p "$S/n1"
cp "$T/pu/payload-000000.dcrp" "$S/n1/"

start_relay a --no-prefetch --cache "$T/c" --verify-key "$T/k.pub" "$S"
A=$RURL
for n in u1 n1; do
	for try in 1 2; do
		code=$(http_code "$A/$n/payload-000000.dcrp")
		case $code in
		4?? | 5??) ;;
		*) fail "payload 0 of $n (try $try) answered $code" ;;
		esac
		[ "$(wc -l <"$T/body")" = 1 ] || fail "not one line of reason: $(cat "$T/body")"
	done
done
http_code "$A/u1/payload-000000.dcrp" >/dev/null
contains "$(cat "$T/body")" "not signed"
http_code "$A/n1/payload-000000.dcrp" >/dev/null
contains "$(cat "$T/body")" "signed manifest"
[ "$(http_code -I "$A/u1/payload-000000.dcrp")" != 200 ] || fail "a HEAD of u1's payload answered 200"
find "$T/c" -name 'payload-*' >"$T/cached"
grep -q . "$T/cached" && fail "the relay cached payloads of untrusted packs: $(cat "$T/cached")"
[ "$(status "$A" "sum(1 for o in d['objects'] if o['state'] == 'done' and not o['name'].startswith('v1/'))")" = 0 ] ||
	fail "the relay holds objects of untrusted packs: $(cat "$T/status.json")"

# the signed pack: its payload first, then the whole pack
[ "$(http_code "$A/v1/payload-000000.dcrp")" = 200 ] || fail "payload 0 of v1 is not 200: $(cat "$T/body")"
cmp -s "$T/body" "$T/p/payload-000000.dcrp" || fail "payload 0 of v1 differs"
refit r1 --verify-key "$T/k.pub" "$A/v1"
exit 0
