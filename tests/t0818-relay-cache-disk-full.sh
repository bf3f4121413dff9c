#!/bin/sh
# A relay whose cache lies on a filesystem smaller than its --cache-size
# (the default 16G on a small disk) filled it with the packs it had served
# and then answered every payload of the next pack 502 ("No space left on
# device"): the whole tree below it stopped refitting. It now keeps 2% of
# the filesystem free and drops the oldest packs' finished objects to make
# room, before a fetch and again when a write finds the disk full. Here
# the cache is a tmpfs that holds about one and a half packs, the relay
# serves three steps in turn to a receiver, each refit must be exact, and
# the relay must say it dropped objects for the disk.
. "$DCR_SRC/tests/lib-relay.sh"
. "$DCR_SRC/tests/lib-ns.sh"
mount_namespace

gen 64M 3 --change 0.05
S="$T/store"
for v in 1 2 3; do
	st diff dcr-diff "$T/g/v$((v - 1))" "$T/g/v$v" | st pack dcr-pack --linger 0 -s 256K |
		st push dcr-push -q - "$S/v$v"
	rc_is diff 0
	rc_is pack 0
	rc_is push 0
done
p1=$(du -sk "$S/v1" | cut -f1) p2=$(du -sk "$S/v2" | cut -f1) p3=$(du -sk "$S/v3" | cut -f1)
big=$p1
for p in $p2 $p3; do [ "$p" -le "$big" ] || big=$p; done
fs=$((big * 3 / 2 + 64))
[ "$fs" -lt $((p1 + p2)) ] && [ "$fs" -lt $((p2 + p3)) ] ||
	fail "packs of $p1, $p2, $p3 KiB do not fill a filesystem of $fs KiB two at a time"
echo "packs of $p1, $p2 and $p3 KiB through a cache on $fs KiB"

# the relay in a mount namespace of its own, its cache on the small tmpfs
mkdir "$T/small"
rm -f "$T/a.port"
unshare $NS sh -c "mount -t tmpfs -o size=${fs}k tmpfs '$T/small' &&
	exec dcr-relay --listen 127.0.0.1:0 --port-file '$T/a.port' --cache '$T/small/c' '$S'" \
	2>"$T/a.log" &
A_PID=$!
wait_port a "$A_PID" "$T/a.log"
A="http://127.0.0.1:$(cat "$T/a.port")"

receiver r
for v in 1 2 3; do
	st pull dcr-pull -q "$A/v$v" | st apply dcr-apply -q "$T/r"
	rc_is pull 0
	rc_is apply 0
	same "$T/r" "$T/g/v$v"
	echo "ok: v$v through the relay"
done
status "$A" 'd["cache"]["dropped_disk_full"]' >"$T/dropped"
[ "$(cat "$T/dropped")" -gt 0 ] || fail "the relay dropped nothing for the disk: $(cat "$T/status.json")"
! grep -q 'No space left' "$T/a.log" || { cat "$T/a.log"; fail "the relay ran out of space"; }
echo "ok: $(cat "$T/dropped") objects dropped for the disk, every refit exact"
stop_relay "$A_PID"
[ "$STOPPED" = 0 ] || fail "the relay exited $STOPPED"
