#!/bin/sh
# kill -9 of dcr-apply at random moments while it applies a larger delta
# (every value of a 16 MiB sharded checkpoint changes, 8 MiB in a
# sanitized build; the delta comes from a file or from standard input),
# then a rerun with the same delta: always bit-identical to B. Prints how
# many runs were killed mid-way.
. "$DCR_SRC/tests/lib-dcr.sh"
command -v gen-checkpoint >/dev/null 2>&1 || skip "gen-checkpoint is not built"

# (a sanitized build, three times slower, kills the same points of a
# checkpoint half the size: the kills are spread over the apply's time)
size=16M
! sanitized || size=8M
run 0 gen-checkpoint -q --size $size --steps 1 --shards 2 --change 1 "$T/g"
run 0 dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
ida=$(state_id "$T/g/v0")
idb=$(state_id "$T/g/v1")

# how long one apply takes here, in ms
cp -r "$T/g/v0" "$T/r"
t0=$(date +%s%N)
run 0 dcr-apply "$T/r" "$T/d"
ms=$((($(date +%s%N) - t0) / 1000000 + 1))
same_fast "$T/r" "$T/g/v1"

killed=0
replayed=0
i=0
while [ $i -lt 16 ]; do
	rm -rf "$T/r"
	cp -r "$T/g/v0" "$T/r"
	# spread the kills over the whole run, with jitter
	delay=$(((i * ms * 13 / 150) + $(od -An -N2 -tu2 /dev/urandom) % (ms / 8 + 1)))
	if [ $((i % 2)) -eq 0 ]; then
		dcr-apply -q "$T/r" "$T/d" >"$T/o.$i" 2>&1 &
	else
		dcr-apply -q "$T/r" - <"$T/d" >"$T/o.$i" 2>&1 &
	fi
	pid=$!
	sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
	kill -9 $pid 2>/dev/null || :
	set +e
	wait $pid 2>/dev/null
	rc=$?
	set -e
	case $rc in
	137) killed=$((killed + 1))
		# killed: the receiver is A or B once any journal is replayed
		run 0 dcr-apply --recover "$T/r"
		if grep -q 'finished an interrupted apply' "$T/err"; then
			replayed=$((replayed + 1))
		fi
		id=$(state_id "$T/r")
		[ "$id" = "$ida" ] || [ "$id" = "$idb" ] || fail "kill after ${delay}ms: neither A nor B"
		;;
	0) ;;
	*) cat "$T/o.$i" >&2; fail "dcr-apply exited $rc" ;;
	esac
	run 0 dcr-apply "$T/r" "$T/d"
	same_fast "$T/r" "$T/g/v1"
	i=$((i + 1))
done
same "$T/r" "$T/g/v1"
say "ok: $killed of 16 runs killed at random moments ($replayed after the journal commit; one apply takes ${ms}ms), every rerun ended at B"
[ $killed -gt 0 ] || fail "no run was killed mid-way"
