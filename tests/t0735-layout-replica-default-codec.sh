#!/bin/sh
# Canonical deltas of the default codecs (XOR items coded against the
# receiver's bits: the default, and every item forced to delta or classed)
# reach serving layouts: dcr-apply --layout --replica over every rank
# of a vLLM replica decodes them with the old bits read through the map and
# gives exactly the serving shards of the new checkpoint (T in {1,2,4,8},
# GQA and MoE, with and without expert parallelism); a second apply changes
# nothing. One rank alone takes such items only where it holds every
# element of an item's range (replicated norms; T = 1), and otherwise
# refuses, naming --replica, with its files untouched. Killed at every durable step, then
# rerun, the replica still ends with the new shards.
. "$(dirname "$0")/lib-layout.sh"

n=0
for cfg in llama-gqa qwen2-moe; do
	pair $cfg
	c="$tmp/$cfg"
	# the trainer's default (on these small tensors mostly xor-zstd, the
	# delta codec on the norms), and every XOR item forced to delta and to
	# classed; each has items coded against the receiver's bits
	"$B/dcr-diff" "$c/c0" "$c/c1" -o "$c/default.delta" || fail "diff $cfg"
	"$B/dcr-diff" --codec delta "$c/c0" "$c/c1" -o "$c/delta.delta" || fail "diff $cfg"
	"$B/dcr-diff" --codec classed "$c/c0" "$c/c1" -o "$c/classed.delta" || fail "diff $cfg"
	for d in default delta classed; do
		"$DUMP" "$c/$d.delta" >/dev/null 2>"$tmp/err" &&
			fail "$cfg: the $d delta decodes without the receiver's bits"
		grep -q "receiver's bits" "$tmp/err" || fail "dump: $(cat "$tmp/err")"
	done
	for T in 1 2 4 8; do
		es=1
		case $cfg in *moe*) [ $T = 1 ] || es="1 $T" ;; esac
		for E in $es; do
			s="$tmp/s"
			rm -rf "$s" "$s.map"
			"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp $T --ep $E \
				-o "$s.map" 2>/dev/null || continue
			$SLICE slice "$D/$cfg.json" "$c/c0" --framework vllm --tp $T --ep $E -o "$s/0" ||
				fail slice
			$SLICE slice "$D/$cfg.json" "$c/c1" --framework vllm --tp $T --ep $E -o "$s/1" ||
				fail slice
			cp -r "$s/0" "$s/one"
			for d in default delta classed; do
				rm -rf "$s/r"
				cp -r "$s/0" "$s/r"
				"$B/dcr-apply" -q --layout "$s.map" --replica "$s/r" "$c/$d.delta" ||
					fail "$cfg T=$T E=$E: apply --layout --replica ($d)"
				same_shards "$s/r" "$s/1" >/dev/null ||
					fail "$cfg T=$T E=$E ($d): placed shards differ from the new checkpoint's"
				[ ! -e "$s/r/rank-0/.dcr/layout-resolved" ] || fail "the resolved delta stayed"
			done
			"$B/dcr-apply" --layout "$s.map" --replica "$s/r" "$c/classed.delta" 2>"$tmp/err" ||
				fail "$cfg T=$T E=$E: second apply"
			[ "$(grep -c "already holds this delta" "$tmp/err")" = "$((T))" ] ||
				fail "second apply: $(cat "$tmp/err")"
			same_shards "$s/r" "$s/1" >/dev/null || fail "second apply changed bits"
			# one rank alone: llama-gqa's default delta (its base-coded
			# items are the replicated norms), and the delta-coded one
			# only where the rank holds all of it
			r=$((T - 1))
			if [ $cfg = llama-gqa ]; then
				"$B/dcr-apply" -q --layout "$s.map" --rank $r "$s/one/rank-$r" \
					"$c/default.delta" || fail "$cfg T=$T: one rank, default delta"
				"$B/dcr-verify" -q "$s/one/rank-$r" --against "$s/1/rank-$r" ||
					fail "$cfg T=$T: one rank, default delta: wrong bits"
				rm -rf "$s/one" && cp -r "$s/0" "$s/one"
			fi
			if [ $T = 1 ]; then
				"$B/dcr-apply" -q --layout "$s.map" --rank 0 "$s/one/rank-0" "$c/delta.delta" ||
					fail "$cfg: one rank holding everything"
				same_shards "$s/one" "$s/1" >/dev/null || fail "$cfg: one rank: wrong bits"
			else
				"$B/dcr-apply" -q --layout "$s.map" --rank $r "$s/one/rank-$r" \
					"$c/delta.delta" 2>"$tmp/err"
				[ $? = 128 ] || fail "$cfg T=$T: one rank of many took a delta-coded delta"
				grep -q -- "--replica" "$tmp/err" && grep -q -- "--codec plain" "$tmp/err" ||
					fail "refusal does not name both ways out: $(cat "$tmp/err")"
				same_shards "$s/one" "$s/0" >/dev/null || fail "a refused rank changed its files"
			fi
			echo "ok $cfg T=$T E=$E"
			n=$((n + 1))
		done
	done
done
[ $n -ge 8 ] || fail "ran $n cases"

# --replica needs every rank; --rank and --replica exclude each other
cfg=llama-gqa
c="$tmp/$cfg"
"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp 2 -o "$tmp/v.map" || fail map
$SLICE slice "$D/$cfg.json" "$c/c0" --framework vllm --tp 2 -o "$tmp/v0" || fail slice
rm -rf "$tmp/a" && cp -r "$tmp/v0" "$tmp/a"
rm -rf "$tmp/a/rank-1"
"$B/dcr-apply" -q --layout "$tmp/v.map" --replica "$tmp/a" "$c/delta.delta" 2>"$tmp/err" &&
	fail "a replica without rank 1 was taken"
"$B/dcr-apply" --layout "$tmp/v.map" --rank 0 --replica "$tmp/a" "$c/delta.delta" 2>/dev/null
[ $? = 129 ] || fail "--rank with --replica is not a usage error"
echo "ok: refusals"

# fp32 serving shards (residual pieces): the old canonical bits are the
# stored values converted, and a classed delta places exactly
cfg=qwen2-kv8
pair $cfg
c="$tmp/$cfg"
$STEP export "$c/c0" -o "$c/e0" || fail "export c0"
$STEP export "$c/c1" -o "$c/e1" || fail "export c1"
"$B/dcr-diff" --codec classed --no-cache "$c/e0" "$c/e1" -o "$c/e.delta" || fail "canonical diff"
s="$tmp/f"
"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp 4 --stored-dtype F32 \
	-o "$s.map" || fail "vllm F32 map"
$SLICE slice "$D/$cfg.json" "$c/e0" --framework vllm --tp 4 -o "$s/b0" || fail slice
$SLICE slice "$D/$cfg.json" "$c/e1" --framework vllm --tp 4 -o "$s/b1" || fail slice
$STEP widen --exact "$s/b0" -o "$s/0" || fail widen
$STEP widen --exact "$s/b1" -o "$s/1" || fail widen
"$B/dcr-apply" -q --layout "$s.map" --replica "$s/0" "$c/e.delta" || fail "apply --replica F32"
same_shards "$s/0" "$s/1" >/dev/null || fail "fp32 shards differ from the widened target"
echo "ok: residual fp32 shards"
cfg=llama-gqa
c="$tmp/$cfg"

# killed at every durable step of a replica placement, then rerun
"$B/dcr-layout" generate --config "$D/$cfg.json" --framework vllm --tp 4 -o "$tmp/v.map" || fail map
rm -rf "$tmp/v0" "$tmp/v1"
$SLICE slice "$D/$cfg.json" "$c/c0" --framework vllm --tp 4 -o "$tmp/v0" || fail slice
$SLICE slice "$D/$cfg.json" "$c/c1" --framework vllm --tp 4 -o "$tmp/v1" || fail slice
k=1
while :; do
	rm -rf "$tmp/s"
	cp -r "$tmp/v0" "$tmp/s"
	DCR_FAULT_AT=$k "$B/dcr-apply" -q --layout "$tmp/v.map" --replica "$tmp/s" \
		"$c/classed.delta" 2>/dev/null
	st=$?
	[ $st = 0 ] && break
	[ $st = 137 ] || fail "step $k: exit $st"
	"$B/dcr-apply" -q --layout "$tmp/v.map" --replica "$tmp/s" "$c/classed.delta" ||
		fail "rerun after a crash at step $k"
	same_shards "$tmp/s" "$tmp/v1" >/dev/null || fail "crash at step $k: wrong shards after rerun"
	k=$((k + 1))
	[ $k -lt 400 ] || fail "no end of steps"
done
[ $k -gt 8 ] || fail "only $k steps: the fault hook did not bite"
echo "ok: killed at each of $((k - 1)) steps, rerun gives the new shards"

# ranks that disagree on a replicated element (model.norm.weight, which
# every rank holds whole; one bit of rank 1's copy flipped) are refused
# with nothing written
rm -rf "$tmp/s"
cp -r "$tmp/v0" "$tmp/s"
python3 -S - "$tmp/s/rank-1" <<'PY' || fail "cannot flip a bit of rank 1's norm"
import json, os, struct, sys
for f in sorted(os.listdir(sys.argv[1])):
    if not f.endswith(".safetensors"):
        continue
    path = os.path.join(sys.argv[1], f)
    with open(path, "r+b") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        t = json.loads(fh.read(n)).get("model.norm.weight")
        if t:
            fh.seek(8 + n + t["data_offsets"][0])
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 1]))
            sys.exit(0)
sys.exit(1)
PY
before=$(cd "$tmp/s" && find . -name '*.safetensors' -exec sha256sum {} + | sort)
"$B/dcr-apply" --layout "$tmp/v.map" --replica "$tmp/s" "$c/classed.delta" 2>"$tmp/err" &&
	fail "a replica whose ranks disagree was taken"
grep -q "replicas of element 0 of 'model.norm.weight' differ between the ranks' files" "$tmp/err" ||
	fail "message: $(cat "$tmp/err")"
[ "$(cd "$tmp/s" && find . -name '*.safetensors' -exec sha256sum {} + | sort)" = "$before" ] ||
	fail "the refused replica changed"
echo "ok: ranks that disagree on a replicated element are refused, untouched"
exit 0
