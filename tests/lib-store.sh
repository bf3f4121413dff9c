# lib-store.sh - sourced by the store tests (tests/t03*.sh): a scratch
# directory, loopback servers started from tests/node and always killed at
# exit, and checks on store-tool's exit status and one-line errors.
set -eu
: "${DCR_SRC:?run through make check}"
: "${DCR_BUILD:?run through make check}"
TOOL="$DCR_BUILD/tests/store-tool"
NODE_DIR="$DCR_SRC/tests/node"
# The npm modules: tests/node/node_modules, or $DCR_NODE_MODULES (make
# distcheck's copy of the tree has none; configure DCR_NODE_MODULES=DIR).
NODE_MODULES=${DCR_NODE_MODULES:-$NODE_DIR/node_modules}
T=$(mktemp -d "${TMPDIR:-/tmp}/dcr-t03.XXXXXX")
PIDS=""
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null || true; done
	for p in $PIDS; do wait "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
# need CMD...: skip unless every CMD is on PATH.
need() {
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || skip "$c is not on PATH"
	done
}

# need_node MODULE...: skip unless node and these npm modules are there.
need_node() {
	command -v node >/dev/null 2>&1 || skip "node not found (scripts/install-deps installs it)"
	for m in "$@"; do
		[ -d "$NODE_MODULES/$m" ] ||
			skip "npm module '$m' missing in $NODE_MODULES (scripts/install-deps installs it)"
	done
}

# wait_port NAME PID LOG: wait until server NAME (process PID, output in
# LOG) has written its port to $T/NAME.port.
wait_port() {
	PIDS="$PIDS $2"
	i=0
	while [ ! -s "$T/$1.port" ]; do
		kill -0 "$2" 2>/dev/null || { cat "$3"; fail "server $1 exited"; }
		i=$((i + 1))
		[ $i -lt 400 ] || { cat "$3"; fail "server $1 did not start in 20 s"; }
		sleep 0.05
	done
}

# start_server NAME SCRIPT ARGS...: start tests/node/SCRIPT on 127.0.0.1 with
# a free port, wait until it listens, set PORT (and pid, its process).
start_server() {
	name=$1 script=$2
	shift 2
	rm -f "$T/$name.port"
	NODE_PATH=$NODE_MODULES node "$NODE_DIR/$script" --port-file "$T/$name.port" "$@" >"$T/$name.out" 2>&1 &
	pid=$!
	wait_port "$name" $pid "$T/$name.out"
	PORT=$(cat "$T/$name.port")
}

# start_py NAME SCRIPT ARGS...: the same for tests/SCRIPT, a Python server
# taking --port-file (lie-server.py, redirect-server.py); what it writes
# to stderr (its request log) goes to $T/NAME.log.
start_py() {
	name=$1 script=$2
	shift 2
	rm -f "$T/$name.port"
	python3 "$DCR_SRC/tests/$script" --port-file "$T/$name.port" "$@" 2>"$T/$name.log" &
	pid=$!
	wait_port "$name" $pid "$T/$name.log"
	PORT=$(cat "$T/$name.port")
}

# run_ok CMD...: CMD must succeed.
run_ok() {
	"$@" >"$T/out" 2>"$T/err" || fail "'$*' exited $?: $(cat "$T/err")"
}

# expect_fail STATUS CMD...: CMD must exit STATUS with exactly one line on
# stderr, left in ERR.
expect_fail() {
	want=$1
	shift
	rc=0
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	ERR=$(cat "$T/err")
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want; stderr: $ERR"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "'$*' did not print one line: $ERR"
}

# contains STRING PATTERN: fixed-string match.
contains() {
	case $1 in *"$2"*) ;; *) fail "expected '$2' in: $1" ;; esac
}

# mkdata FILE BYTES: pseudo-random content.
mkdata() {
	head -c "$2" /dev/urandom >"$1"
}

# start_s3 NAME ARGS...: s3rver behind the SigV4-checking proxy
# (tests/node/s3-server.js); sets EP (the proxy's URL) and the AWS variables
# of the one credential it accepts.
start_s3() {
	name=$1
	shift
	mkdir -p "$T/$name.data"
	export AWS_ACCESS_KEY_ID=S3RVER
	export AWS_SECRET_ACCESS_KEY='dcr-test/secret+KEY'
	export AWS_REGION=us-east-1
	unset AWS_SESSION_TOKEN DCR_S3_ENDPOINT AWS_PROFILE AWS_DEFAULT_PROFILE AWS_ENDPOINT_URL \
		AWS_ENDPOINT_URL_S3 AWS_CA_BUNDLE AWS_WEB_IDENTITY_TOKEN_FILE AWS_ROLE_ARN \
		AWS_ROLE_SESSION_NAME AWS_ENDPOINT_URL_STS AWS_CONTAINER_CREDENTIALS_RELATIVE_URI \
		AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_CONTAINER_AUTHORIZATION_TOKEN \
		AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE 2>/dev/null || true
	# the tester's own ~/.aws never takes part
	export AWS_SHARED_CREDENTIALS_FILE="$T/no-aws-credentials" AWS_CONFIG_FILE="$T/no-aws-config"
	start_server "$name" s3-server.js --dir "$T/$name.data" --bucket dcr-test \
		--key "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" "$@"
	EP="http://127.0.0.1:$PORT"
}
