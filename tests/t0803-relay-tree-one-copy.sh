#!/bin/sh
# The bytes that leave the root's parent: four receivers at the leaves of
# a 7-relay tree (depth 3, fan-out 2) refit from one copy of the pack, not
# one per leaf: the store sends 1.0 to 1.05 times the pack's bytes, and
# its log shows every byte of every payload read exactly once.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --log "$T/log" --bytes-file "$T/sent"
S="http://127.0.0.1:$PORT/store"
gen_full 4M
st diff dcr-diff "$T/g/v0" "$T/g/v1" | st pack dcr-pack -q -s 1M -o "$T/p"
rc_is diff 0
rc_is pack 0
run_ok dcr-push -q "$T/p" "$S/v1"
before=$(cat "$T/sent")
: >"$T/log"
tree_start --depth 3 --fanout 2 "$S"
n=0
for leaf in $(cat "$T/leaves"); do
	n=$((n + 1))
	refit_bg "r$n" "$leaf/v1"
done
refit_done r1 r2 r3 r4
sleep 0.2 # the byte count is written at most every 50 ms
sent=$(($(cat "$T/sent") - before))
size=$(pack_bytes "$T/p")
python3 -c 'import sys; s, p = int(sys.argv[1]), int(sys.argv[2]); sys.exit(not (p <= s <= 1.05 * p))' \
	"$sent" "$size" || fail "the store sent $sent bytes for a pack of $size: $(cat "$T/log")"
echo "store sent $sent bytes for a pack of $size bytes to 4 leaves"
tiled "$T/log" /store/v1 "$T/p"
[ "$(grep -c '^GET /store/v1/manifest.dcrm 200' "$T/log")" = 1 ] ||
	fail "the manifest left the store more than once: $(grep manifest "$T/log")"
exit 0
