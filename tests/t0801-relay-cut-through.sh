#!/bin/sh
# Cut-through: behind a slow parent (512 KiB/s), a child's GET of a payload
# gets its first bytes while the relay still fetches the rest of it (the
# relay's status shows fewer bytes ready than the payload's size); a second
# child that starts later reads the same arriving object; both get the
# payload's exact bytes, and the parent served every byte of it once.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log" --rate 512K
S="http://127.0.0.1:$PORT/store"
gen_full 4M
publish "$S/v1" -s 4M
run_ok dcr-pull -q -o "$T/p" "$S/v1"
f="$T/p/payload-000000.dcrp"
size=$(wc -c <"$f")
[ "$size" -gt $((5 << 19)) ] || fail "payload 0 is only $size bytes"
: >"$T/log"

start_relay a --no-prefetch "$S"
A=$RURL
O=v1/payload-000000.dcrp
curl -sS -f -o "$T/c1" "$A/$O" 2>"$T/c1.err" &
C1=$!
i=0
while [ "$(wc -c 2>/dev/null <"$T/c1" || echo 0)" -lt $((1 << 20)) ]; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "the first child got no MiB in 30 s"
	sleep 0.05
done
got=$(wc -c <"$T/c1")
curl -sS -f -o "$T/c2" "$A/$O" 2>"$T/c2.err" &
C2=$!
# one snapshot of the status: two could straddle the fetch's end
snap=$(status "$A" "'%d %s' % (obj('$O')['ready'], obj('$O')['state'])")
ready=${snap% *}
state=${snap#* }
[ "$ready" -lt "$size" ] && [ "$state" = fetching ] ||
	fail "the child had $got bytes only once the relay held $ready of $size ($state)"
wait "$C1" || fail "the first child's GET failed: $(cat "$T/c1.err")"
wait "$C2" || fail "the second child's GET failed: $(cat "$T/c2.err")"
cmp -s "$f" "$T/c1" || fail "the first child got other bytes"
cmp -s "$f" "$T/c2" || fail "the second child got other bytes"
grep -q "^dcr-relay: served '$O': $size bytes to 2 children" "$T/a.log" ||
	fail "the log does not say two children read $O: $(cat "$T/a.log")"
grep "^GET /store/$O " "$T/log" >"$T/log.p0"
mkdir "$T/one"
cp "$f" "$T/one/"
tiled "$T/log.p0" /store/v1 "$T/one"
exit 0
