#!/bin/sh
# Every numeric option of every command is parsed strictly: a bad number
# (letters, a suffix, empty, a sign, an exponent, out of range) is a usage
# error, exit 129, with a message naming the option, never silently 0 or
# the prefix atoi would take. Good numbers still pass the option parser.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-pack dcr-push dcr-pull dcr-commit dcr-layout

# bad OPTION CMD ARGS...: CMD exits 129 and stderr names OPTION in an error
bad() {
	_opt=$1
	shift
	run 129 "$@"
	grep -q "^$1: error: .*$_opt" "$T/err" ||
		fail "'$*': the message does not name $_opt: $(head -1 "$T/err")"
}

S=$T/store
mkdir -p "$T/ck"

# dcr-diff: --chunk, --threads; with --layout, --rank and --chunk
for v in abc 3x '' -1 1e3 0 67108865 ' 5' 0x10; do
	bad --chunk dcr-diff --chunk "$v" "$T/ck" "$T/ck"
done
for v in abc 3x '' -1 0 65 1e1; do
	bad --threads dcr-diff --threads "$v" "$T/ck" "$T/ck"
done
for v in abc 3x '' -1 1e3 4294967295; do
	bad --rank dcr-diff --layout "$T/map" --rank "$v" "$T/ck" "$T/ck"
done
bad --chunk dcr-diff --merge --chunk 1e3 "$T/d"

# dcr-pack: --payload-size
for v in abc 3x '' -1 1e3 ' 5' 5T 0; do
	bad --payload-size dcr-pack --payload-size "$v" "$T/d"
done

# dcr-push: --parallel, --retries, --keep
for v in abc 3x '' -1 0 257 1e2; do
	bad --parallel dcr-push --parallel "$v" "$T/p" "$S/pol/v1"
	bad --parallel dcr-push -j "$v" "$T/p" "$S/pol/v1"
done
for v in abc 3x '' -1 1e1 101; do
	bad --retries dcr-push --retries "$v" "$T/p" "$S/pol/v1"
done
for v in abc 3x '' -1 1e3 18446744073709551616; do
	bad --keep dcr-push --gc "$S" --policy pol --keep "$v"
done

# dcr-pull: --parallel, --retries, --wait, --part-size
bad --parallel dcr-pull --parallel 3x "$S/pol/v1"
bad --retries dcr-pull --retries abc "$S/pol/v1"
for v in abc 3x '' -1 1e3 inf nan . 0x10 ' 1'; do
	bad --wait dcr-pull --wait "$v" "$S/pol/v1"
done
bad --part-size dcr-pull --part-size 1e3 "$S/pol/v1"

# dcr-apply: --version; with --layout, --rank
for v in abc v '' -1 v-1 4x 1e3 vv4 18446744073709551616; do
	bad --version dcr-apply --version "$v" "$T/ck" "$T/d"
done
bad --rank dcr-apply --layout "$T/map" --rank 1x "$T/ck" "$T/d"

# dcr-commit: --version, --expect, --timeout
for v in abc '' -1 4x 1e3; do
	bad --version dcr-commit --version "$v" "$T/ck"
done
for v in abc 3x '' -1 1e3 1000001; do
	bad --expect dcr-commit --store "$S" --policy pol --version 1 --expect "$v"
done
for v in abc 3x '' -1 1e3 inf 0x1 99999999999; do
	bad --timeout dcr-commit --store "$S" --policy pol --version 1 --expect 0 --timeout "$v"
done

# dcr-layout generate: --tp, --ep, --rank, --vocab-multiple
for o in --tp --ep --rank --vocab-multiple; do
	for v in abc 2x '' -1 1e3 4294967296; do
		bad $o dcr-layout generate --config "$T/c.json" --framework vllm $o "$v" -o "$T/m"
	done
done

# good numbers get past the option parser (to fail later, on the files)
run 128 dcr-apply --version v42 "$T/none" "$T/d"
run 128 dcr-apply --version 42 "$T/none" "$T/d"
run 128 dcr-commit --version 0 "$T/none"
run 128 dcr-layout generate --config "$T/none.json" --framework vllm --tp 2 --ep 1 --rank 0 \
	--vocab-multiple 64 -o "$T/m"
run 128 dcr-diff --chunk 1024 --threads 2 "$T/none" "$T/none"
run 0 dcr-commit --store "$S" --policy pol --version 0 --expect 0 --timeout 0.5 \
	--state 0000000000000000000000000000000000000000000000000000000000000000
# dcr-relay: its numbers, and --listen's port
if command -v dcr-relay >/dev/null 2>&1; then
	for l in 127.0.0.1:99999 127.0.0.1:-1 127.0.0.1:+80 127.0.0.1:8x 127.0.0.1: 127.0.0.1 ''; do
		bad --listen dcr-relay --listen "$l" "$S"
	done
	bad --threads dcr-relay --listen 127.0.0.1:0 --threads 0 "$S"
	bad --max-connections dcr-relay --listen 127.0.0.1:0 --max-connections 1e3 "$S"
	bad --idle-timeout dcr-relay --listen 127.0.0.1:0 --idle-timeout 5s "$S"
fi
say "ok: numeric options are strict"
