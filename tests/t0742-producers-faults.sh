#!/bin/sh
# Faults of a pack that several producers make, through a directory store:
# a producer that died mid-push (its first payloads up, no summary) leaves
# finalize waiting, then refusing with one line that names it, and no
# manifest; its retry completes the pack. Refused with one line, and no
# manifest written: too few producers for the layout (elements no one
# holds), two producers that claim one rank's pieces, a duplicated
# summary, a summary of another delta (another base), a summary past
# --producers, a corrupt summary, and a payload that is not the one its
# summary names (waited for: its producer may be retrying).
. "$DCR_SRC/tests/lib-producers.sh"
cfg=qwen2-kv8
pair $cfg
w="$T/w"
ranks $cfg 4 1 "$w"
S="$T/store"
mkdir -p "$S"
nomanifest() { [ ! -e "$S/$1/manifest.dcrm" ] || fail "$1: a manifest was written"; }

# rank R's pack as producer P of N into DIR (a pack directory)
packdir() {
	"$B/dcr-diff" --layout "$w/map.json" --rank $1 --base-id "${BASE:-$(cat "$T/$cfg/base-id")}" \
		"$w/t0/rank-$1" "$w/t1/rank-$1" -o "$T/d-$1" || fail "diff rank $1"
	rm -rf "$4"
	"$B/dcr-pack" --producer $2/$3 -s 1K -o "$4" "$T/d-$1" || fail "pack rank $1 as $2/$3"
}

# -- a producer killed mid-push, then retried
for r in 0 1 3; do produce "$w" $cfg $r 4 "$S/v1" -s 1K; done
for r in 0 1 3; do [ "$(cat "$w/rc-$r")" = "0 0 0" ] || fail "rank $r: $(cat "$w/err-$r")"; done
packdir 2 2 4 "$T/p2"
n2=$(ls "$T/p2" | grep -c '^payload-')
[ "$n2" -ge 2 ] || fail "rank 2 made $n2 payloads"
first=$(ls "$T/p2" | grep '^payload-' | head -n 1)
expect_fail 128 sh -c "tar -C '$T/p2' -cf - '$first' | '$B/dcr-push' - '$S/v1'"
contains "$ERR" "no manifest"
[ -f "$S/v1/$first" ] || fail "the dead producer's first payload is not in the store"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 --timeout 1 "$S/v1"
contains "$ERR" "1 of 4 producers not in after 1 s: 2 (no summary); no manifest written"
nomanifest v1
produce "$w" $cfg 2 4 "$S/v1" -s 1K
[ "$(cat "$w/rc-2")" = "0 0 0" ] || fail "retry of rank 2: $(cat "$w/err-2")"
run_ok "$B/dcr-push" --finalize --producers 4 "$S/v1"
receive $cfg "$S/v1" r1

# -- refusals: each a fresh pack name
fresh() {
	rm -rf "$S/$1"
	for r in $2; do produce "$w" $cfg $r 4 "$S/$1" -s 1K; done
}
# three producers for a layout of four ranks: rank 3's elements are held
# by no one
rm -rf "$S/v2"
for r in 0 1 2; do
	packdir $r $r 3 "$T/q$r"
	run_ok "$B/dcr-push" "$T/q$r" "$S/v2"
done
expect_fail 128 "$B/dcr-push" --finalize --producers 3 "$S/v2"
contains "$ERR" "no producer holds"
contains "$ERR" "uncovered"
nomanifest v2
# producer 3 made from rank 1's shards: two producers claim its pieces
fresh v3 "0 1 2"
packdir 1 3 4 "$T/p13"
run_ok "$B/dcr-push" "$T/p13" "$S/v3"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 "$S/v3"
contains "$ERR" "summary-000001.dcrs and "
contains "$ERR" "summary-000003.dcrs both claim"
nomanifest v3
# a duplicated summary: producer 1's under producer 3's name
fresh v4 "0 1 2"
cp "$S/v4/summary-000001.dcrs" "$S/v4/summary-000003.dcrs"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 "$S/v4"
contains "$ERR" "holds producer 1's summary (a duplicated summary)"
nomanifest v4
# a summary of another delta: rank 3 from another base
fresh v5 "0 1 2"
BASE=$(cat "$T/$cfg/new-id") packdir 3 3 4 "$T/p3x"
run_ok "$B/dcr-push" "$T/p3x" "$S/v5"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 "$S/v5"
contains "$ERR" "belongs to another delta than"
nomanifest v5
# four summaries, three producers
fresh v6 "0 1 2 3"
expect_fail 128 "$B/dcr-push" --finalize --producers 3 "$S/v6"
contains "$ERR" "is from producer 3, but the pack has 3 producers"
nomanifest v6
# a corrupt summary
cp -r "$S/v6" "$S/v7"
python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[100]^=1; open(p,'wb').write(b)" \
	"$S/v7/summary-000002.dcrs"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 "$S/v7"
contains "$ERR" "summary-000002.dcrs is corrupt: checksum mismatch"
nomanifest v7
# a payload that is not the one its summary names: waited for, then refused
cp -r "$S/v6" "$S/v8"
cp "$S/v8/payload-000000.dcrp" "$S/v8/payload-010000.dcrp"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 --timeout 1 "$S/v8"
contains "$ERR" "1 (payload 10000 is not the one its summary names)"
nomanifest v8
# a finalized pack keeps its manifest: another one is refused
cp -r "$S/v6" "$S/v9"
run_ok "$B/dcr-push" --finalize --producers 4 --version 9 "$S/v9"
expect_fail 128 "$B/dcr-push" --finalize --producers 4 "$S/v9"
contains "$ERR" "already has another manifest"
exit 0
