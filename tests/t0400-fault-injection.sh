#!/bin/sh
# Fault injection: kill -9 at every durable step of dcr-apply (delta and pack
# input, plain and structural changes, retries from an alternative base,
# squashed deltas, and again during the recovery), of dcr-commit and of
# dcr-pull -o DIR; truncated, corrupted, duplicated and reordered payloads; a
# delta for the wrong base; a second dcr-apply while one holds the lock; the
# disk filling up mid-apply. Every case must end bit-identical to the target,
# or refused with the receiver still bit-identical to its old version.
. "$DCR_SRC/tests/lib-dcr.sh"

need dcr-pack dcr-commit dcr-pull dcr-push gen-checkpoint

INJ=0
SURV=0
injected() { INJ=$((INJ + 1)); }
survived() { SURV=$((SURV + 1)); }

# at_one_of R A B: R holds exactly A's or B's tensors.
at_one_of() {
	dcr-verify -q "$1" --against "$2" || dcr-verify -q "$1" --against "$3" ||
		fail "receiver '$1' is neither at '$2' nor at '$3'"
}

# kill_loop LABEL BASE TARGET INPUT: for N = 1, 2, ... kill dcr-apply at its
# Nth durable step, check the receiver is at BASE, TARGET or has a journal,
# optionally kill the recovery too, then rerun and prove it reaches TARGET.
# A sanitized build, whose every start and step is about three times
# slower, kills at every other step, the odd ones in one loop and the
# even ones in the next; the normal build kills at every step of each.
STRIDE=1 FIRST=1
! sanitized || STRIDE=2
kill_loop() {
	label=$1 base=$2 target=$3 input=$4
	n=$FIRST
	[ "$STRIDE" = 1 ] || FIRST=$((3 - FIRST))
	npoints=0
	while :; do
		rm -rf "$T/r"
		cp -r "$base" "$T/r"
		rm -rf "$T/r/.dcr"
		set +e
		DCR_FAULT_AT=$n dcr-apply -q "$T/r" "$input" >/dev/null 2>"$T/err"
		rc=$?
		set -e
		if [ $rc -eq 0 ]; then
			dcr-verify -q "$T/r" --against "$target" || fail "$label: clean run is wrong"
			break
		fi
		[ $rc -eq 137 ] || { cat "$T/err" >&2; fail "$label: fault $n exited $rc, not 137"; }
		injected
		if [ ! -e "$T/r/.dcr/journal" ]; then
			at_one_of "$T/r" "$base" "$target"
		else
			# kill the recovery too, at each of its first steps
			m=1
			while [ $m -le 3 ]; do
				set +e
				DCR_FAULT_AT=$m dcr-apply -q --recover "$T/r" >/dev/null 2>&1
				rc2=$?
				set -e
				[ $rc2 -eq 0 ] && break
				[ $rc2 -eq 137 ] || fail "$label: recovery fault $m exited $rc2"
				injected
				survived
				m=$((m + 1))
			done
		fi
		run 0 dcr-apply -q "$T/r" "$input"
		dcr-verify -q "$T/r" --against "$target" || fail "$label: fault $n: not at the target after rerun"
		[ ! -e "$T/r/.dcr/journal" ] || fail "$label: journal left behind"
		survived
		npoints=$((npoints + 1))
		n=$((n + STRIDE))
	done
	say "ok: $label: $npoints kill points"
}

# refused LABEL BASE INPUT [EXIT]: dcr-apply refuses INPUT, receiver untouched.
refused() {
	rm -rf "$T/r"
	cp -r "$2" "$T/r"
	rm -rf "$T/r/.dcr"
	before=$(snapshot "$T/r")
	set +e
	dcr-apply -q "$T/r" "$3" >/dev/null 2>"$T/err"
	rc=$?
	set -e
	injected
	[ $rc -ne 0 ] || fail "$1: accepted"
	[ $rc -ne 137 ] || fail "$1: crashed"
	[ -s "$T/err" ] || fail "$1: refused without a message"
	grep -q "^dcr-apply: error: " "$T/err" || { cat "$T/err" >&2; fail "$1: unclear refusal"; }
	[ "$(snapshot "$T/r")" = "$before" ] || fail "$1: receiver changed"
	dcr-verify -q "$T/r" --against "$2" || fail "$1: receiver not at its old version"
	survived
}

# ---- data ----
run 0 gen-checkpoint -q --size 2M --steps 3 --shards 2 --change 0.03 "$T/g"
G=$T/g
for v in 0 1 2 3; do rm -rf "$G/v$v/.dcr"; done
run 0 dcr-diff "$G/v0" "$G/v1" -o "$T/d1"
run 0 dcr-diff "$G/v1" "$G/v2" -o "$T/d2"
run 0 dcr-diff "$G/v2" "$G/v3" -o "$T/d3"
for v in 0 1 2 3; do rm -rf "$G/v$v/.dcr"; done
run 0 dcr-pack -s 8K -o "$T/p1" "$T/d1"
run 0 dcr-pack -s 8K "$T/d1"
mv "$T/out" "$T/p1.tar"

# structural changes, three files
$MKST new --files 3 "$T/sa" m.0:BF16:4096 m.1:BF16:64x64 m.2:F32:900 m.3:I64:30 m.4:BF16:8192
cp -r "$T/sa" "$T/sb"
$MKST rm "$T/sb" m.0 m.2
$MKST add "$T/sb" a.new:BF16:700
$MKST add "$T/sb" m.25:F32:30x3
$MKST xor "$T/sb" m.4 0=1 127=3 5000=7
$MKST xor "$T/sb" m.1 9=1
run 0 dcr-diff "$T/sa" "$T/sb" -o "$T/ds"
rm -rf "$T/sa/.dcr" "$T/sb/.dcr"
run 0 dcr-pack -s 4K -o "$T/ps" "$T/ds"

# ---- kill -9 at every durable step of dcr-apply ----
kill_loop "delta, plain changes" "$G/v0" "$G/v1" "$T/d1"
kill_loop "pack dir, 8K payloads" "$G/v0" "$G/v1" "$T/p1"
kill_loop "pack tar, 8K payloads" "$G/v0" "$G/v1" "$T/p1.tar"
kill_loop "delta, structural changes" "$T/sa" "$T/sb" "$T/ds"
kill_loop "pack, structural changes" "$T/sa" "$T/sb" "$T/ps"
kill_loop "structural changes undone" "$T/sb" "$T/sa" "$(run 0 dcr-diff "$T/sb" "$T/sa" -o "$T/dsr"; echo "$T/dsr")"
rm -rf "$T/sa/.dcr" "$T/sb/.dcr"
# a retry from the earlier attempt's target (alternative base), and a squash
run 0 dcr-diff --overwrite --also-base "$G/v1" "$G/v0" "$G/v2" -o "$T/dr"
for v in 0 1 2 3; do rm -rf "$G/v$v/.dcr"; done
run 0 dcr-pack -s 16K -o "$T/pr" "$T/dr"
kill_loop "retry pack from the failed attempt's target" "$G/v1" "$G/v2" "$T/pr"
kill_loop "retry delta from the base" "$G/v0" "$G/v2" "$T/dr"
for v in 1 2 3; do
	run 0 dcr-diff --codec plain "$G/v$((v - 1))" "$G/v$v" -o "$T/q$v"
done
for v in 0 1 2 3; do rm -rf "$G/v$v/.dcr"; done
run 0 dcr-pack --squash --delta -o "$T/dsq" "$T/q1" "$T/q2" "$T/q3"
kill_loop "squashed delta v0->v3" "$G/v0" "$G/v3" "$T/dsq"

# ---- broken input: refused, receiver untouched ----
size=$(wc -c <"$T/d1")
for off in 0 1 7 8 40 72 88 100 1000 5000 20000 $((size / 2)) $((size - 40)) $((size - 33)) $((size - 1)); do
	head -c "$off" "$T/d1" >"$T/trunc"
	refused "delta truncated at $off" "$G/v0" "$T/trunc"
done
for off in 3 20 60 90 300 3000 15000 30000 $((size / 2)) $((size - 50)) $((size - 5)); do
	python3 - "$T/d1" "$T/corrupt" "$off" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[int(sys.argv[3])] ^= 0x10
open(sys.argv[2], 'wb').write(b)
EOF
	refused "delta corrupted at $off" "$G/v0" "$T/corrupt"
done
refused "delta for the wrong base" "$G/v0" "$T/d2"
refused "delta skipping a version" "$G/v1" "$T/d3"
refused "pack for the wrong base" "$G/v2" "$T/p1"
refused "pack for another checkpoint" "$G/v0" "$T/ps"
refused "retry from a state it does not name" "$G/v3" "$T/pr"

# tar packs rebuilt with python3's tarfile: truncated, corrupted, duplicated,
# reordered payloads, a missing payload, a missing manifest
python3 - "$T/p1" "$T/tars" <<'EOF'
import io, os, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
names = sorted(n for n in os.listdir(src) if n.startswith('payload-'))
data = {n: open(os.path.join(src, n), 'rb').read() for n in names + ['manifest.dcrm']}
def tar(path, entries):
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
        for n, b in entries:
            ti = tarfile.TarInfo(n); ti.size = len(b)
            t.addfile(ti, io.BytesIO(b))
man = ('manifest.dcrm', data['manifest.dcrm'])
pl = [(n, data[n]) for n in names]
assert len(pl) >= 4, len(pl)
ok = {}
bad = {}
ok['dup-first'] = [pl[0]] + pl + [man]
ok['dup-all'] = pl + pl + [man]
ok['reversed'] = pl[::-1] + [man]
ok['swapped'] = [pl[1], pl[0]] + pl[2:] + [man]
bad['missing-one'] = pl[:1] + pl[2:] + [man]
bad['missing-last'] = pl[:-1] + [man]
bad['no-manifest'] = pl
bad['manifest-first'] = [man] + pl
for k in (0, len(pl) // 2, len(pl) - 1):
    n, b = pl[k]
    bad['trunc-%d' % k] = pl[:k] + [(n, b[:len(b) // 2])] + pl[k + 1:] + [man]
    c = bytearray(b); c[len(c) // 3] ^= 1
    bad['corrupt-%d' % k] = pl[:k] + [(n, bytes(c))] + pl[k + 1:] + [man]
    bad['dup-differs-%d' % k] = pl + [(n, bytes(c))] + [man]
    bad['renamed-%d' % k] = pl[:k] + [(names[(k + 1) % len(pl)], b)] + pl[k + 1:] + [man]
m = bytearray(man[1]); m[40] ^= 1
bad['manifest-corrupt'] = pl + [('manifest.dcrm', bytes(m))]
bad['manifest-truncated'] = pl + [('manifest.dcrm', man[1][:-10])]
for k, v in ok.items(): tar(os.path.join(out, 'ok-' + k + '.tar'), v)
for k, v in bad.items(): tar(os.path.join(out, 'bad-' + k + '.tar'), v)
raw = open(os.path.join(out, 'ok-reversed.tar'), 'rb').read()
with tarfile.open(os.path.join(out, 'ok-reversed.tar')) as t:
    mi = t.getmember('manifest.dcrm')
# cuts inside headers and data; the last one inside the manifest (a tar cut
# only in its end-of-archive padding loses nothing and may be accepted)
for cut in (100, 511, 512, 5000, len(raw) // 2, mi.offset_data + mi.size // 2):
    open(os.path.join(out, 'bad-tarcut-%d.tar' % cut), 'wb').write(raw[:cut])
EOF
for f in "$T"/tars/ok-*.tar; do
	rm -rf "$T/r"
	cp -r "$G/v0" "$T/r"
	injected
	run 0 dcr-apply -q "$T/r" "$f"
	dcr-verify -q "$T/r" --against "$G/v1" || fail "$(basename "$f"): not at the target"
	survived
done
for f in "$T"/tars/bad-*.tar; do
	refused "$(basename "$f")" "$G/v0" "$f"
done
say "ok: broken input refused"

# ---- two dcr-apply on one receiver: the lock ----
rm -rf "$T/r"
cp -r "$G/v0" "$T/r"
mkdir -p "$T/r/.dcr"
before=$(snapshot "$T/r")
injected
set +e
flock "$T/r/.dcr/lock" dcr-apply -q "$T/r" "$T/d1" >/dev/null 2>"$T/err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a second dcr-apply ran while the lock was held"
grep -q "busy" "$T/err" || { cat "$T/err" >&2; fail "no 'busy' message"; }
[ "$(snapshot "$T/r")" = "$before" ] || fail "the locked-out apply changed the receiver"
survived
# two at once: one applies, the other is refused as busy or finds the target
for i in 1 2 3; do
	rm -rf "$T/r"
	cp -r "$G/v0" "$T/r"
	injected
	set +e
	dcr-apply -q "$T/r" "$T/p1" >/dev/null 2>"$T/err1" &
	p1=$!
	dcr-apply -q "$T/r" "$T/d1" >/dev/null 2>"$T/err2"
	rc2=$?
	wait $p1
	rc1=$?
	set -e
	[ $rc1 -eq 0 ] || [ $rc2 -eq 0 ] || fail "neither concurrent dcr-apply succeeded"
	for k in 1 2; do
		eval "rc=\$rc$k"
		[ $rc -eq 0 ] || grep -q busy "$T/err$k" || { cat "$T/err$k" >&2; fail "unexpected failure"; }
	done
	dcr-verify -q "$T/r" --against "$G/v1" || fail "concurrent applies: not at the target"
	survived
done
say "ok: the lock"

# ---- dcr-commit: kill at every step, with a store acknowledgement ----
mkdir -p "$T/store"
S1=$(state_id "$G/v1")
n=1
while :; do
	rm -rf "$T/r" "$T/store/pol"
	cp -r "$G/v0" "$T/r"
	rm -rf "$T/r/.dcr"
	run 0 dcr-apply -q --version 1 "$T/r" "$T/d1"
	set +e
	DCR_FAULT_AT=$n dcr-commit -q "$T/r" --store "$T/store" --policy pol --receiver r1 \
		>/dev/null 2>"$T/err"
	rc=$?
	set -e
	[ $rc -eq 0 ] && break
	[ $rc -eq 137 ] || { cat "$T/err" >&2; fail "commit fault $n exited $rc"; }
	injected
	run 0 dcr-commit --status --porcelain "$T/r"
	grep -q "^head	-	-$" "$T/out" || grep -q "^head	1	" "$T/out" ||
		fail "commit fault $n: HEAD is neither old nor new"
	run 0 dcr-commit -q "$T/r" --store "$T/store" --policy pol --receiver r1
	run 0 dcr-commit --status --porcelain "$T/r"
	grep -q "^head	1	$S1$" "$T/out" || fail "commit fault $n: HEAD wrong"
	run 0 dcr-commit --log --porcelain "$T/r"
	[ "$(grep -c . "$T/out")" -eq 1 ] || { cat "$T/out" >&2; fail "commit fault $n: log has $(grep -c . "$T/out") lines"; }
	[ -f "$T/store/pol/acks/v1/r1" ] || fail "commit fault $n: no acknowledgement"
	survived
	n=$((n + 1))
done
say "ok: dcr-commit: $((n - 1)) kill points"

# ---- dcr-pull -o DIR: kill mid-transfer, resume ----
run 0 dcr-push -q "$T/p1" "$T/store/pol/v1"
n=1
while :; do
	rm -rf "$T/pulled"
	set +e
	DCR_FAULT_AT=$n dcr-pull -q -o "$T/pulled" "$T/store/pol/v1" >/dev/null 2>"$T/err"
	rc=$?
	set -e
	[ $rc -eq 0 ] && break
	[ $rc -eq 137 ] || { cat "$T/err" >&2; fail "pull fault $n exited $rc"; }
	injected
	# what was pulled so far must not apply (no manifest): refused, untouched
	if [ -d "$T/pulled" ] && [ ! -e "$T/pulled/manifest.dcrm" ]; then
		rm -rf "$T/r"
		cp -r "$G/v0" "$T/r"
		set +e
		dcr-apply -q "$T/r" "$T/pulled" >/dev/null 2>&1
		rc3=$?
		set -e
		[ $rc3 -ne 0 ] || fail "a half-pulled pack applied"
		dcr-verify -q "$T/r" --against "$G/v0" || fail "a half-pulled pack changed the receiver"
	fi
	run 0 dcr-pull -q -o "$T/pulled" "$T/store/pol/v1"
	rm -rf "$T/r"
	cp -r "$G/v0" "$T/r"
	run 0 dcr-apply -q "$T/r" "$T/pulled"
	dcr-verify -q "$T/r" --against "$G/v1" || fail "pull fault $n: not at the target"
	survived
	n=$((n + 1))
done
say "ok: dcr-pull: $((n - 1)) kill points"

# ---- the disk fills up mid-apply ----
if [ "$(id -u)" = 0 ] && mkdir -p "$T/mnt" && mount -t tmpfs -o size=64m tmpfs "$T/mnt" 2>/dev/null; then
	trap 'umount "$T/mnt" 2>/dev/null || true; rm -rf "$T"' EXIT
	base_kb=$(du -sk "$T/sa" | cut -f1)
	nfull=0
	for extra in 4 8 16 24 32 48 64 96 128; do
		umount "$T/mnt"
		mount -t tmpfs -o size=$((base_kb + extra))k tmpfs "$T/mnt"
		cp -r "$T/sa" "$T/mnt/r" 2>/dev/null || continue
		rm -rf "$T/mnt/r/.dcr"
		injected
		set +e
		dcr-apply -q "$T/mnt/r" "$T/ds" >/dev/null 2>"$T/err"
		rc=$?
		set -e
		if [ $rc -ne 0 ]; then
			grep -q "No space left\|Disk quota\|cannot" "$T/err" || { cat "$T/err" >&2; fail "disk full: unclear error"; }
			if [ -e "$T/mnt/r/.dcr/journal" ]; then
				# committed journal: finish once space is back
				umount "$T/mnt" 2>/dev/null || true
				fail "disk full after the journal commit at +${extra}k (not expected on tmpfs)"
			fi
			dcr-verify -q "$T/mnt/r" --against "$T/sa" || fail "disk full at +${extra}k: receiver changed"
			nfull=$((nfull + 1))
		else
			dcr-verify -q "$T/mnt/r" --against "$T/sb" || fail "disk full at +${extra}k: wrong result"
		fi
		survived
		rm -rf "$T/mnt/r"
	done
	umount "$T/mnt"
	trap 'rm -rf "$T"' EXIT
	[ $nfull -gt 0 ] || fail "the disk never filled up"
	say "ok: disk full: $nfull applies refused for want of space, receiver untouched"
else
	say "skipped the disk-full cases: cannot mount a tmpfs here (needs root)"
fi

echo "faults: $INJ injected, $SURV survived"
[ "$INJ" -eq "$SURV" ] || fail "some faults were not survived"
[ "$INJ" -ge 200 ] || fail "only $INJ faults injected, want at least 200"
