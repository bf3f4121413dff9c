# lib-relay.sh - sourced by the relay tests (tests/t08*.sh): the helpers of
# lib-xfer.sh (scratch directory $T, loopback servers killed at exit,
# receivers, pipelines with every stage's status checked) plus relays and
# relay trees on loopback, stopped at exit.
. "$DCR_SRC/tests/lib-xfer.sh"

command -v dcr-relay >/dev/null 2>&1 || skip "dcr-relay is not on PATH"
command -v curl >/dev/null 2>&1 || skip "curl is missing"
RELAY_TREE="$DCR_SRC/scripts/relay-tree"
# relays' temporary spools inside the scratch directory, gone with it even
# when a test kills a relay with SIGKILL
TMPDIR=$T
export TMPDIR

# A tree started by tree_start is stopped (and waited for) before the
# scratch directory goes.
relay_cleanup() {
	[ ! -f "$T/tree/relays" ] || bash "$RELAY_TREE" stop --dir "$T/tree" 2>/dev/null || true
	cleanup
}
trap relay_cleanup EXIT

# start_relay NAME ARGS...: dcr-relay on 127.0.0.1 (a free port) with ARGS
# (options, then parents); its stderr in $T/NAME.log; sets RURL and RPID.
start_relay() {
	_sr=$1
	shift
	rm -f "$T/$_sr.port"
	dcr-relay --listen 127.0.0.1:0 --port-file "$T/$_sr.port" "$@" 2>"$T/$_sr.log" &
	RPID=$!
	wait_port "$_sr" $RPID "$T/$_sr.log"
	RURL="http://127.0.0.1:$(cat "$T/$_sr.port")"
}

# stop_relay PID: SIGTERM it and wait; its exit status in STOPPED.
stop_relay() {
	kill -TERM "$1" 2>/dev/null || true
	STOPPED=0
	wait "$1" || STOPPED=$?
}

# tree_start ARGS...: scripts/relay-tree start --dir $T/tree ARGS; the
# leaf URLs are left in $T/leaves, one per line.
tree_start() {
	bash "$RELAY_TREE" start --dir "$T/tree" "$@" >"$T/leaves" 2>"$T/tree.err" ||
		fail "relay-tree start exited $?: $(cat "$T/tree.err")"
}

# tree_url NAME, tree_pid NAME: relay NAME of the tree (r, r.0, r.0.1, ...).
tree_url() { awk -v n="$1" '$1 == n { print $2 }' "$T/tree/relays"; }
tree_pid() { awk -v n="$1" '$1 == n { print $3 }' "$T/tree/relays"; }

# status URL EXPR: python3's value of EXPR, with d the relay's
# /.dcr/status document and obj(NAME) its object NAME (None if absent).
status() {
	curl -sS -f "$1/.dcr/status" >"$T/status.json" || fail "GET $1/.dcr/status failed"
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
def obj(n):
    return next((o for o in d["objects"] if o["name"] == n), None)
print(eval(sys.argv[2]))' "$T/status.json" "$2" || fail "cannot read the status of $1"
}

# gen_full SIZE: $T/g/v0 and $T/g/v1 two unrelated checkpoints, so that
# every value changes and payloads are large (several 1 MiB pieces).
gen_full() {
	gen "$1" 0
	mv "$T/g/v0" "$T/a0"
	gen "$1" 0 --seed 2
	mv "$T/g/v0" "$T/g/v1"
	mv "$T/a0" "$T/g/v0"
}

# pack_bytes DIR: the bytes of the pack directory DIR.
pack_bytes() {
	cat "$1"/* | wc -c
}

# await_line FILE PATTERN WHAT: poll (50 ms) until a line of FILE matches
# PATTERN (grep), at most 30 s; else fail: "WHAT in 30 s" and FILE.
await_line() {
	_al=0
	until grep -q "$2" "$1" 2>/dev/null; do
		_al=$((_al + 1))
		[ $_al -lt 600 ] || fail "$3 in 30 s: $(cat "$1" 2>/dev/null)"
		sleep 0.05
	done
}

# signed_packs PIECE: a key pair ($T/k.pub, $T/k.sec) and the step
# $T/g/v0 -> v1 ($T/d) in store $S twice, in pieces of PIECE: signed at
# version 1 as v1 ($T/p), unsigned as u1 ($T/pu).
signed_packs() {
	run_ok dcr-keygen -p "$T/k.pub" -s "$T/k.sec"
	run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
	run_ok dcr-pack --sign "$T/k.sec" --version 1 -s "$1" -o "$T/p" "$T/d"
	run_ok dcr-push -q "$T/p" "$S/v1"
	run_ok dcr-pack -s "$1" -o "$T/pu" "$T/d"
	run_ok dcr-push -q "$T/pu" "$S/u1"
}

# http_code ARGS...: curl's status code for ARGS (the body in $T/body).
http_code() {
	curl -sS -o "$T/body" -w '%{http_code}' "$@" 2>"$T/curl.err" || true
}

# refit_bg NAME ARGS...: in the background, a fresh receiver $T/NAME at v0
# and dcr-pull -q ARGS | dcr-apply -q $T/NAME; check it with refit_done.
refit_bg() {
	_rb=$1
	shift
	receiver "$_rb"
	(st "pull.$_rb" dcr-pull -q "$@" | st "apply.$_rb" dcr-apply -q "$T/$_rb") &
	BGPIDS="${BGPIDS:-} $!"
}

# refit_done NAME...: wait for the background refits; each pull and apply
# exited 0 and each receiver is bit-identical to v1.
refit_done() {
	for _p in ${BGPIDS:-}; do wait "$_p" || true; done
	BGPIDS=
	for _rd in "$@"; do
		rc_is "pull.$_rd" 0
		rc_is "apply.$_rd" 0
		same "$T/$_rd" "$T/g/v1"
	done
}
