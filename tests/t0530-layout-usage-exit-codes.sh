#!/bin/sh
# dcr-layout: -h to stdout with exit 0, usage errors exit 129 on stderr,
# fatal errors 128 with a "dcr-layout: error:" line.
set -u
: "${DCR_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DCR_BUILD:=$DCR_SRC}"
L=$(command -v dcr-layout || echo "$DCR_BUILD/dcr-layout")
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { # run RC ARGS...
	want=$1
	shift
	"$L" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = "$want" ] || fail "dcr-layout $*: exit $rc, expected $want"
}

run 0 -h
grep -q "^usage: dcr-layout generate" "$tmp/out" || fail "-h not on stdout"
[ -s "$tmp/err" ] && fail "-h wrote to stderr"
run 0 check --help
grep -q "^usage:" "$tmp/out" || fail "check --help"
run 129
grep -q "^usage:" "$tmp/err" || fail "no usage on stderr"
run 129 frobnicate
grep -q "^dcr-layout: error: unknown subcommand 'frobnicate'" "$tmp/err" || fail "unknown subcommand message"
run 129 check
run 129 check a b
run 129 check --bogus x
run 129 generate --framework vllm --tp 2 -o "$tmp/m.json"
run 129 generate --config x --framework vllm --tp two -o "$tmp/m.json"
grep -q "^dcr-layout: error: 'two' is not a number" "$tmp/err" || fail "number message"
run 129 generate --config x --framework vllm --tp 2 --rank 0 --all -o "$tmp/m.json"
run 129 materialize --map x -o y
run 128 generate --config "$tmp/none.json" --framework vllm --tp 2 -o "$tmp/m.json"
grep -q "^dcr-layout: error: cannot open '$tmp/none.json'" "$tmp/err" || fail "missing config message: $(cat "$tmp/err")"
echo '{"model_type": "gpt2", "hidden_size": 8}' >"$tmp/c.json"
run 128 generate --config "$tmp/c.json" --framework vllm --tp 2 -o "$tmp/m.json"
grep -q "model_type 'gpt2' is not supported" "$tmp/err" || fail "model_type message"
run 128 generate --config "$DCR_SRC/tests/layout/llama-gqa.json" --framework deepspeed --tp 2 -o "$tmp/m.json"
grep -q "unknown framework 'deepspeed'" "$tmp/err" || fail "framework message"
[ ! -e "$tmp/m.json" ] || fail "a map was written on failure"
# A map to stdout is data only.
run 0 generate --config "$DCR_SRC/tests/layout/llama-gqa.json" --framework vllm --tp 2 -o - 
head -c 16 "$tmp/out" | grep -q '^{"dcr_layout": 1' || fail "map on stdout"
[ -s "$tmp/err" ] && fail "stderr noise"
exit 0
