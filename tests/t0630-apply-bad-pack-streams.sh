#!/bin/sh
# dcr-apply on pack streams taken apart and put back wrong (tests/packtar.py):
# a reordered stream and a duplicated payload end bit-identical; a corrupted,
# truncated, missing or mislabelled payload, a manifest that is not last, a
# stream cut mid-entry or without a manifest, an entry that is a link, a
# directory or a fifo, a signed stream with two
# signatures or one too large each end in exit 128 and one
# line naming the entry and the cause, and the receiver's files hash as
# before.
. "$DCR_SRC/tests/lib-xfer.sh"
gen 8M 1
run_ok dcr-diff "$T/g/v0" "$T/g/v1"
mv "$T/out" "$T/d"
run_ok dcr-pack -s 32K "$T/d"
mv "$T/out" "$T/p.tar"
tar tf "$T/p.tar" >"$T/list"
np=$(grep -c '^payload-' "$T/list") || true
[ "$np" -ge 4 ] || fail "want 4+ payloads, got $np"
man=$np # index of the manifest entry

receiver r
snapshot "$T/r" >"$T/snap"
bad() { # CAUSE: apply $T/q.tar, expect a refusal naming CAUSE
	st apply dcr-apply -q "$T/r" <"$T/q.tar"
	refused apply dcr-apply "$1" "$T/r"
}
good() { # apply $T/q.tar to a fresh receiver, expect the target
	receiver ok
	st apply dcr-apply -q "$T/ok" <"$T/q.tar"
	rc_is apply 0
	same "$T/ok" "$T/g/v1"
}

packtar "$T/p.tar" "$T/q.tar" swap 0 2
good
packtar "$T/p.tar" "$T/q.tar" swap 1 "$((np - 1))"
good
packtar "$T/p.tar" "$T/q.tar" dup 1
good
packtar "$T/p.tar" "$T/q.tar" dup "$man"
bad "entry 'manifest.dcrm' after the manifest"

packtar "$T/p.tar" "$T/q.tar" flip 1 300
bad "payload-000001.dcrp is corrupt: checksum mismatch"
packtar "$T/p.tar" "$T/q.tar" flip 1 20
bad "payload-000001.dcrp is corrupt: checksum mismatch"
packtar "$T/p.tar" "$T/q.tar" flip "$man" 200
bad "manifest.dcrm is corrupt: checksum mismatch"
packtar "$T/p.tar" "$T/q.tar" cut 2 1000
bad "payload-000002.dcrp: body is"
contains "$ERR" "(truncated)"
packtar "$T/p.tar" "$T/q.tar" drop 2
bad "pack is missing payload-000002.dcrp; nothing was written"
packtar "$T/p.tar" "$T/q.tar" rename 1 payload-000003.dcrp
bad "payload-000003.dcrp holds payload 1"
packtar "$T/p.tar" "$T/q.tar" rename 1 manifest.json
bad "unexpected entry 'manifest.json'"
packtar "$T/p.tar" "$T/q.tar" swap "$((np - 1))" "$man"
bad "entry 'payload-00000$((np - 1)).dcrp' after the manifest"
packtar "$T/p.tar" "$T/q.tar" drop "$man"
bad "pack stream ended without a manifest"
# entries that are not files, under a payload's name: refused, each with why
packtar "$T/p.tar" "$T/q.tar" kind 1 symlink /etc/passwd
bad "bad entry 'payload-000001.dcrp': a symbolic link, not a file"
packtar "$T/p.tar" "$T/q.tar" kind 1 hardlink payload-000000.dcrp
bad "bad entry 'payload-000001.dcrp': a hard link, not a file"
packtar "$T/p.tar" "$T/q.tar" kind 1 dir
bad "bad entry 'payload-000001.dcrp/': a directory, not a file"
packtar "$T/p.tar" "$T/q.tar" kind 1 fifo
bad "bad entry 'payload-000001.dcrp': not a regular file"
# the last payload carried twice, the second time with other bytes
packtar "$T/p.tar" "$T/q1.tar" dup 1
packtar "$T/q1.tar" "$T/q.tar" take 2 "$T/p.tar" 3
packtar "$T/q.tar" "$T/q1.tar" rename 2 payload-000001.dcrp
mv "$T/q1.tar" "$T/q.tar"
bad "payload-000001.dcrp holds payload 3"

# a stream cut anywhere: inside a payload, inside the manifest, at an entry end
size=$(wc -c <"$T/p.tar")
for n in 700 40000 $((size - 3000)) $((size - 1024 - 512)); do
	head -c "$n" "$T/p.tar" >"$T/q.tar"
	st apply dcr-apply -q "$T/r" <"$T/q.tar"
	rc_is apply 128
	one_line apply dcr-apply
	case $ERR in
	*"runcated"* | *"without a manifest"*) ;;
	*) fail "cut at $n: $ERR" ;;
	esac
	untouched "$T/r" "$T/snap"
done

# a signed stream: the signature entry twice, or one too large to be a
# signature, is refused even by a receiver that holds no key
run_ok dcr-keygen -p "$T/k.pub" -s "$T/k.sec"
run_ok dcr-pack --sign "$T/k.sec" --version 1 -s 32K "$T/d"
mv "$T/out" "$T/s.tar"
sig=$(tar tf "$T/s.tar" | grep -n '^manifest.dcrm.sig$' | cut -d: -f1) || true
[ -n "$sig" ] || fail "the signed stream holds no manifest.dcrm.sig"
sig=$((sig - 1))
packtar "$T/s.tar" "$T/q.tar" dup "$sig"
bad "two 'manifest.dcrm.sig' entries"
packtar "$T/s.tar" "$T/q.tar" take "$sig" "$T/s.tar" 0
packtar "$T/q.tar" "$T/q1.tar" rename "$sig" manifest.dcrm.sig
mv "$T/q1.tar" "$T/q.tar"
bad "'manifest.dcrm.sig' is"
contains "$ERR" "bytes, not a signature"

# and after all that the receiver still takes the good pack
st apply dcr-apply -q "$T/r" <"$T/p.tar"
rc_is apply 0
same "$T/r" "$T/g/v1"
