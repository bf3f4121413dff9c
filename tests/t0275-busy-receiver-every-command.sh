#!/bin/sh
# A busy receiver (another process holds CKPT/.dcr/lock) gives the same
# answer in every command that changes it: dcr-apply, dcr-apply --recover,
# dcr-apply --layout, dcr-commit and dcr-commit --store each exit 128 with
# one "busy" error line, and nothing changes (HEAD, files, the store).
. "$DCR_SRC/tests/lib-dcr.sh"
command -v flock >/dev/null 2>&1 || skip "flock(1) (util-linux) is missing"
need dcr-commit dcr-layout gen-checkpoint

run 0 gen-checkpoint -q --size 256K --steps 2 "$T/g"
run 0 dcr-diff "$T/g/v0" "$T/g/v1" -o "$T/d1"
cp -r "$T/g/v0" "$T/r"
rm -rf "$T/r/.dcr"
run 0 dcr-apply -q --version 1 "$T/r" "$T/d1"
run 0 dcr-diff "$T/g/v1" "$T/g/v2" -o "$T/d2"
run 0 dcr-layout generate --config "$DCR_SRC/tests/layout/llama-gqa.json" --framework vllm \
	--tp 1 -o "$T/map"
snapshot "$T/r" >"$T/s0"
cp "$T/r/.dcr/applied" "$T/applied0"

flock -o "$T/r/.dcr/lock" sh -c 'echo $$ >"$1"; exec sleep 60' sh "$T/holder" &
fpid=$!
i=0
while [ ! -s "$T/holder" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "flock(1) never took the lock"
	sleep 0.05
done
# busy CMDNAME ARGS...: exit 128, one busy line, the receiver as it was
busy() {
	_name=$1
	shift
	run 128 "$_name" "$@"
	one_line_error "$_name"
	grep -q 'busy' "$T/err" || fail "$_name $*: no 'busy' message: $(cat "$T/err")"
	snapshot "$T/r" >"$T/s1"
	cmp -s "$T/s0" "$T/s1" || fail "$_name $*: the receiver's files changed while locked"
	[ ! -e "$T/r/.dcr/HEAD" ] || fail "$_name $*: HEAD moved while locked"
	cmp -s "$T/applied0" "$T/r/.dcr/applied" || fail "$_name $*: the applied record changed"
}
busy dcr-apply "$T/r" "$T/d2"
busy dcr-apply --recover "$T/r"
busy dcr-apply --layout "$T/map" --rank 0 "$T/r" "$T/d2"
busy dcr-commit "$T/r"
busy dcr-commit --version 1 "$T/r"
busy dcr-commit "$T/r" --store "$T/store" --policy pol --receiver r1
[ ! -e "$T/store/pol/acks" ] || fail "a busy receiver acknowledged"
kill "$(cat "$T/holder")"
wait $fpid 2>/dev/null || :

# free again: the commit goes through
run 0 dcr-commit "$T/r" --store "$T/store" --policy pol --receiver r1
[ -f "$T/store/pol/acks/v1/r1" ] || fail "no acknowledgement once the lock was free"
say "ok: a busy receiver is exit 128 in every command"
