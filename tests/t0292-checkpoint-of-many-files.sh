#!/bin/sh
# A checkpoint's files are each held open while it is read, and the soft
# limit on open files is often 1024 (here made 128): a checkpoint of more
# files than that (here 300 shards) failed every command with "Too many open
# files". Every command now raises its soft limit to the hard one, so
# diff, verify, pack and apply (of the delta and of the pack) all work;
# where the hard limit itself is too low the error says what to raise.
. "$DCR_SRC/tests/lib-dcr.sh"
n=300
tensors=$(i=1; while [ $i -le $n ]; do printf 't%d:BF16:4x4 ' $i; i=$((i + 1)); done)
$MKST new --files $n "$T/a" $tensors
[ "$(ls "$T/a" | grep -c '\.safetensors$')" = $n ] || fail "not $n files"
cp -r "$T/a" "$T/b"
$MKST xor "$T/b" t7 0=1 5=2
$MKST xor "$T/b" t290 3=1
cp -r "$T/a" "$T/r"
cp -r "$T/a" "$T/rp"
rc=0
(
	ulimit -Sn 128 || exit 77
	[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -gt $((n + 100)) ] || exit 77
	dcr-diff -q "$T/a" "$T/b" -o "$T/d" &&
		dcr-verify -q "$T/a" &&
		dcr-apply -q "$T/r" "$T/d" &&
		dcr-verify -q "$T/r" --against "$T/b" &&
		dcr-pack -q -o "$T/p" "$T/d" &&
		dcr-apply -q "$T/rp" "$T/p"
) 2>"$T/err" || rc=$?
[ $rc = 77 ] && skip "cannot set a soft limit of 128 under a hard one above $n"
[ $rc = 0 ] || fail "with a soft limit of 128: $(cat "$T/err")"
same "$T/r" "$T/b"
same "$T/rp" "$T/b"
say "ok: $n files under a soft limit of 128"
# a hard limit too low: one line saying what to raise
rc=0
(ulimit -n 128 && exec dcr-verify -q "$T/a") >"$T/out" 2>"$T/err" || rc=$?
[ $rc = 128 ] || fail "dcr-verify under a hard limit of 128 exited $rc: $(cat "$T/err")"
one_line_error dcr-verify
grep -q "raise the limit, ulimit -n" "$T/err" || fail "no word of the limit: $(cat "$T/err")"
