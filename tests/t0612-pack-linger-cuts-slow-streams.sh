#!/bin/sh
# dcr-pack reading a stream closes a payload of 1 MiB or more once it has
# lingered --linger ms (default 100) since its first item, so that a slow
# diff's items reach the store long before a whole payload (--payload-size)
# fills; from a file, and with --linger 0, payloads are cut by size alone
# and the same delta always gives the same pack. A delta of about 5 MB is
# fed to dcr-pack -s 64M at about 4 MB/s (128 KiB every 30 ms): by size it
# is one payload; lingering, several, each of at least 1 MiB but the last.
# Every pack applies bit-exact.
. "$DCR_SRC/tests/lib-xfer.sh"
gen 32M 1 --change 0.6
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
total=$(wc -c <"$T/d")
[ "$total" -gt $((4 << 20)) ] || fail "delta is $total bytes: too small for several payloads"

# slow FILE: FILE on stdout, 128 KiB every 30 ms
slow() {
	python3 -S -c '
import sys, time
with open(sys.argv[1], "rb") as f:
    while True:
        b = f.read(128 << 10)
        if not b:
            break
        sys.stdout.buffer.write(b)
        sys.stdout.buffer.flush()
        time.sleep(0.03)' "$1"
}

# payloads DIR: "RAW" per payload of pack DIR, in order
payloads() {
	dcr-pack --list --porcelain "$1" >"$T/list" 2>"$T/list.err" ||
		fail "dcr-pack --list $1 exited $?: $(cat "$T/list.err")"
	awk -F '\t' '$1 == "payload" { print $5 }' "$T/list"
}

# a stream, lingering by default
slow "$T/d" | st pack dcr-pack -q -s 64M -o "$T/p1"
rc_is pack 0
payloads "$T/p1" >"$T/raw1"
n=$(wc -l <"$T/raw1")
[ "$n" -ge 3 ] || fail "a slow stream made $n payloads (raw bytes: $(tr '\n' ' ' <"$T/raw1")), not 3 or more"
head -n $((n - 1)) "$T/raw1" | while read -r raw; do
	[ "$raw" -ge $((1 << 20)) ] || fail "a payload closed by the linger holds $raw raw bytes, under 1 MiB"
done
echo "a slow stream: $n payloads of $(tr '\n' ' ' <"$T/raw1")raw bytes"

# --linger 0: by size alone
slow "$T/d" | st pack dcr-pack -q -s 64M --linger 0 -o "$T/p2"
rc_is pack 0
[ "$(payloads "$T/p2" | wc -l)" = 1 ] || fail "--linger 0 cut a stream into $(payloads "$T/p2" | wc -l) payloads"

# from a file (even with a linger asked for: it applies to streams only),
# by size alone, and twice the same pack
run_ok dcr-pack -q -s 64M -o "$T/p3" "$T/d"
run_ok dcr-pack -q -s 64M --linger 1 -o "$T/p4" "$T/d"
[ "$(payloads "$T/p3" | wc -l)" = 1 ] || fail "a delta file was cut into $(payloads "$T/p3" | wc -l) payloads"
for f in $(cd "$T/p3" && ls); do
	cmp -s "$T/p3/$f" "$T/p4/$f" || fail "two packs of one delta file differ in $f"
done

for p in p1 p2 p3; do
	receiver "r$p"
	run_ok dcr-apply -q "$T/r$p" "$T/$p"
	same "$T/r$p" "$T/g/v1"
done

for bad in -5 soon 1e3 600001; do
	rc=0
	dcr-pack --linger "$bad" "$T/d" >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" = 129 ] || fail "dcr-pack --linger $bad exited $rc, not 129 (a usage error)"
	contains "$(head -n 1 "$T/err")" "--linger"
done
echo "ok: a slow stream's payloads closed after lingering, by size from a file; all applied bit-exact"
