#!/bin/sh
# dcr-diff A B | dcr-apply copy-of-A ends bit-identical to B (dcr-verify
# --against, equal state ids, and an independent python compare) for
# generated steps changing 0%, 1%, 5% and 100% of the stored values, for
# single-file and sharded checkpoints.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

for shards in 1 3; do
	for rate in 0 0.01 0.05 1; do
		d="$T/g-$shards-$rate"
		run 0 gen-checkpoint -q --size 2M --steps 1 --shards "$shards" --change "$rate" "$d"
		if [ "$rate" = 0 ]; then
			same "$d/v1" "$d/v0"
		else
			differs "$d/v0" "$d/v1"
		fi
		run 0 dcr-diff --stats "$d/v0" "$d/v1"
		grep -q 'changed values' "$T/err" || fail "no --stats line"
		changed=$(sed -n 's/.* \([0-9][0-9]*\) changed values.*/\1/p' "$T/err")
		case $rate in
		0) [ "$changed" -eq 0 ] || fail "0% step reports $changed changes" ;;
		*) [ "$changed" -gt 0 ] || fail "$rate step reports no changes" ;;
		esac
		roundtrip "$d/v0" "$d/v1"
		# rerunning the same delta on the finished receiver is a no-op
		snapshot "$T/rt" >"$T/before"
		run 0 dcr-apply "$T/rt" "$T/rt.delta"
		snapshot "$T/rt" >"$T/after"
		cmp -s "$T/before" "$T/after" || fail "second apply changed the receiver"
		same "$T/rt" "$d/v1"
		say "ok: shards=$shards change=$rate ($changed changed values)"
	done
done
