# lib-producers.sh - sourced by the many-producers tests (t074N): the
# helpers of lib-store.sh (scratch directory $T, loopback servers killed at
# exit, expect_fail, contains), canonical pairs and Megatron rank shards cut
# by tests/layout-slice.py (never by the map code), and N training ranks
# that each diff, pack and push their own shards in parallel.
. "$DCR_SRC/tests/lib-store.sh"
# B: where the commands are, the programs themselves where make check's
# PATH names them (see lib-layout.sh)
B=$(dirname "$(command -v dcr-apply || echo "$DCR_BUILD/dcr-apply")")
D="$DCR_SRC/tests/layout"
SLICE="python3 -S $DCR_SRC/tests/layout-slice.py"
STEP="python3 -S $DCR_SRC/tests/layout-step.py"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

# pair CFG: $T/CFG/c0 and c1 (a step of ~5% of most tensors' elements),
# c1's state id in $T/CFG/new-id, c0's in $T/CFG/base-id
pair() {
	[ -d "$T/$1/c1" ] && return 0
	mkdir -p "$T/$1"
	$SLICE canon "$D/$1.json" -o "$T/$1/c0" --seed 7 >/dev/null || fail "canon $1"
	$STEP step "$T/$1/c0" -o "$T/$1/c1" --rate 0.05 --seed 8 >/dev/null || fail "step $1"
	"$B/dcr-verify" "$T/$1/c0" >"$T/$1/base-id" || fail "verify $1 c0"
	"$B/dcr-verify" "$T/$1/c1" >"$T/$1/new-id" || fail "verify $1 c1"
}

# ranks CFG TP EP DIR: Megatron shards of c0 and c1 in DIR/t0/rank-R and
# DIR/t1/rank-R, the map DIR/map.json; NR gets the number of ranks
ranks() {
	rm -rf "$4"
	mkdir -p "$4"
	"$B/dcr-layout" generate --config "$D/$1.json" --framework megatron --tp $2 --ep $3 \
		-o "$4/map.json" || fail "generate $1 TP=$2 EP=$3"
	$SLICE slice "$D/$1.json" "$T/$1/c0" --framework megatron --tp $2 --ep $3 -o "$4/t0" ||
		fail "slice $1 c0"
	$SLICE slice "$D/$1.json" "$T/$1/c1" --framework megatron --tp $2 --ep $3 -o "$4/t1" ||
		fail "slice $1 c1"
	NR=$(cd "$4/t0" && ls -d rank-* | wc -l)
}

# produce DIR CFG R N DEST [PACK-OPTIONS...]: rank R's own pipeline,
# dcr-diff --layout | dcr-pack --producer R/N | dcr-push - DEST, each
# stage's status in DIR/rc-R (three numbers, "0 0 0" when all went well)
produce() {
	_w=$1 _c=$2 _r=$3 _n=$4 _d=$5
	shift 5
	{
		{
			{
				"$B/dcr-diff" --layout "$_w/map.json" --rank $_r \
					--base-id "$(cat "$T/$_c/base-id")" "$_w/t0/rank-$_r" \
					"$_w/t1/rank-$_r" 2>>"$_w/err-$_r"
				echo $? >"$_w/rc-$_r.0"
			} | {
				"$B/dcr-pack" --producer $_r/$_n "$@" 2>>"$_w/err-$_r"
				echo $? >"$_w/rc-$_r.1"
			}
		} | "$B/dcr-push" - "$_d" 2>>"$_w/err-$_r"
		echo $? >"$_w/rc-$_r.2"
	}
	echo "$(cat "$_w/rc-$_r.0") $(cat "$_w/rc-$_r.1") $(cat "$_w/rc-$_r.2")" >"$_w/rc-$_r"
}

# producers DIR CFG N DEST [PACK-OPTIONS...]: ranks 0..N-1 as separate
# processes at once; every stage of every rank must succeed
producers() {
	_pw=$1 _pc=$2 _pn=$3 _pd=$4
	shift 4
	_pids=""
	for _pr in $(seq 0 $((_pn - 1))); do
		rm -f "$_pw/err-$_pr" "$_pw/rc-$_pr"*
		produce "$_pw" "$_pc" $_pr $_pn "$_pd" "$@" &
		_pids="$_pids $!"
	done
	wait $_pids
	for _pr in $(seq 0 $((_pn - 1))); do
		[ "$(cat "$_pw/rc-$_pr")" = "0 0 0" ] ||
			fail "rank $_pr: diff, pack, push exited $(cat "$_pw/rc-$_pr"): $(cat "$_pw/err-$_pr")"
	done
}

# receive CFG SRC NAME [PULL-OPTIONS...]: a receiver $T/NAME at c0 pulls SRC
# and applies it; it must end bit-identical to c1 with c1's state id
receive() {
	_rc=$1 _src=$2 _rn=$3
	shift 3
	rm -rf "$T/$_rn"
	cp -r "$T/$_rc/c0" "$T/$_rn"
	{
		"$B/dcr-pull" "$@" "$_src" 2>"$T/pull-err"
		echo $? >"$T/pull-rc"
	} | "$B/dcr-apply" -q "$T/$_rn" 2>"$T/apply-err" ||
		fail "dcr-apply of $_src exited $?: $(cat "$T/apply-err")"
	[ "$(cat "$T/pull-rc")" = 0 ] || fail "dcr-pull $_src exited $(cat "$T/pull-rc"): $(cat "$T/pull-err")"
	"$B/dcr-verify" -q "$T/$_rn" --against "$T/$_rc/c1" || fail "$_rn differs from the canonical target"
	[ "$("$B/dcr-verify" "$T/$_rn")" = "$(cat "$T/$_rc/new-id")" ] ||
		fail "$_rn: state id is not the canonical target's"
}
