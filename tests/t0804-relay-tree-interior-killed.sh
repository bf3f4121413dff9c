#!/bin/sh
# An interior relay killed (SIGKILL) mid-transfer: its subtree finishes
# through the failover URLs. In a 7-relay tree (depth 3, fan-out 2) behind
# a slow store (512 KiB/s), relay r.0 dies once the first piece has come
# down (and before the last);
# its children r.0.0 and r.0.1 fall over to the root r (their logs say so)
# and every leaf's receiver still ends bit-identical to the target.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js --rate 512K
S="http://127.0.0.1:$PORT/store"
gen_full 4M
publish "$S/v1" -s 2M
tree_start --depth 3 --fanout 2 "$S"
R0=$(tree_url r.0)
n=0
for leaf in $(cat "$T/leaves"); do
	n=$((n + 1))
	refit_bg "r$n" "$leaf/v1"
done
R=$(tree_url r)
i=0
until [ "$(status "$R" "d['bytes_fetched']")" -gt $((1 << 20)) ]; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "the root fetched no piece in 30 s"
	sleep 0.05
done
kill -KILL "$(tree_pid r.0)"
[ "$(status "$R" "d['bytes_fetched']")" -lt "$(status "$R" "sum(o['size'] for o in d['objects'])")" ] ||
	fail "the transfer was over before r.0 was killed"
refit_done r1 r2 r3 r4
for c in r.0.0 r.0.1; do
	grep -q "^dcr-relay: warning: 'v1/[^']*' from '$R0': .*; trying '$(tree_url r)' from byte" \
		"$T/tree/$c.log" || fail "$c did not fall over to the root: $(cat "$T/tree/$c.log")"
done
exit 0
