#!/bin/sh
# dcr-relay --verify-key: a relay takes only manifests signed by a trusted
# key. A signed pack passes through it with its signature (children with a
# key refit through it); an unsigned pack, or one whose manifest was changed
# in the store, is not served (nothing of it reaches a child, with or
# without a key of its own) while the relay keeps serving the good one;
# --apply takes the signed pack and refuses the unsigned one, its receiver
# untouched.
. "$DCR_SRC/tests/lib-relay.sh"
command -v dcr-keygen >/dev/null 2>&1 || skip "dcr-keygen is not on PATH"
S="$T/store"
gen 4M 2
signed_packs 512K
run_ok dcr-diff -o "$T/d2" "$T/g/v1" "$T/g/v2"
run_ok dcr-pack --sign "$T/k.sec" --version 2 -o "$T/p2" "$T/d2"
cp -r "$S/v1" "$S/x1"
cp "$T/p2/manifest.dcrm" "$S/x1/manifest.dcrm"

start_relay a --verify-key "$T/k.pub" "$S"
A=$RURL
APID=$RPID
refit r1 --verify-key "$T/k.pub" "$A/v1"
run_ok dcr-pull -o "$T/via" "$A/v1"
cmp -s "$T/via/manifest.dcrm.sig" "$T/p/manifest.dcrm.sig" || fail "the relay did not pass the signature on"
for n in u1 x1; do
	rc=0
	dcr-pull -q --retries 0 -o "$T/got-$n" "$A/$n" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc = 128 ] || fail "dcr-pull of $n through the relay exited $rc"
	[ -z "$(ls "$T/got-$n" 2>/dev/null | grep -v '^manifest.dcrm.sig$')" ] ||
		fail "the relay served parts of $n: $(ls "$T/got-$n")"
done
grep -q "is not signed" "$T/a.log" || fail "the relay's log does not say u1 is unsigned: $(cat "$T/a.log")"
grep -q "signature verification failed" "$T/a.log" || fail "the relay's log does not say x1 was changed"
refit r2 "$A/v1"
stop_relay "$APID"

# --apply with a key: the signed pack applies, the unsigned one is refused
receiver ra
start_relay b --verify-key "$T/k.pub" --apply "$T/ra" --pack v1 "$S"
BPID=$RPID
i=0
until grep -q "^dcr-relay: applied 'v1' to '$T/ra'" "$T/b.log"; do
	kill -0 "$BPID" 2>/dev/null || fail "the relay exited: $(cat "$T/b.log")"
	i=$((i + 1))
	[ $i -lt 600 ] || fail "--apply did not finish in 30 s: $(cat "$T/b.log")"
	sleep 0.05
done
same "$T/ra" "$T/g/v1"
stop_relay "$BPID"
receiver rb
snapshot "$T/rb" >"$T/snap"
start_relay c --verify-key "$T/k.pub" --apply "$T/rb" --pack u1 "$S"
CPID=$RPID
i=0
until grep -q "^dcr-relay: error: cannot apply 'u1' to '$T/rb'" "$T/c.log"; do
	kill -0 "$CPID" 2>/dev/null || break
	i=$((i + 1))
	[ $i -lt 600 ] || fail "the refusal did not come in 30 s: $(cat "$T/c.log")"
	sleep 0.05
done
grep -q "not signed" "$T/c.log" || fail "no word of the missing signature: $(cat "$T/c.log")"
untouched "$T/rb" "$T/snap"
stop_relay "$CPID"

# the signature crosses to the relay once, with its manifest: children's
# requests for it are answered from the relay
if command -v node >/dev/null 2>&1; then
	start_server http http-store.js --log "$T/hlog"
	H="http://127.0.0.1:$PORT/store"
	run_ok dcr-push -q "$T/p" "$H/v1"
	: >"$T/hlog"
	start_relay d --verify-key "$T/k.pub" "$H"
	refit r3 --verify-key "$T/k.pub" "$RURL/v1"
	refit r4 "$RURL/v1"
	n=$(grep -c "GET /store/v1/manifest.dcrm.sig" "$T/hlog") || true
	[ "$n" = 1 ] || fail "the store served the signature $n times for two children: $(cat "$T/hlog")"
else
	echo "note: node is missing: the one-copy check is skipped"
fi
