#!/bin/sh
# http://user:password@host/... store URLs were printed whole in the errors
# of dcr-pull, dcr-push, dcr-commit --store and dcr-push --gc. Every
# message now shows "http://***@host/...": the password (and the user)
# never reach stderr, a relay's log or its status document, while the
# credentials still go to the server (Basic authorization). A query,
# where presigned credentials travel, is shown as "?***".
. "$DCR_SRC/tests/lib-xfer.sh"
lies() { start_py lie lie-server.py "$1"; } # MODE: set PORT
gen 1M 1
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack -o "$T/p" "$T/d"
receiver r
lies deny
U="http://alice:s3cr3tpw@127.0.0.1:$PORT/store"
clean() { # CMD...: fails with one line that names the host, not the secret
	expect_fail 128 "$@"
	case $ERR in *s3cr3tpw* | *alice*) fail "'$*' printed the credentials: $ERR" ;; esac
	contains "$ERR" "***@127.0.0.1:$PORT"
}
clean dcr-pull -q --retries 0 "$U/v1"
clean dcr-push -q --retries 0 "$T/p" "$U/v1"
clean dcr-push -q --retries 0 --gc "$U" --policy rl
clean dcr-commit --store "$U" --policy rl --status
run_ok dcr-apply -q "$T/r" "$T/p"
clean dcr-commit "$T/r" --store "$U" --policy rl --receiver r1
grep -q "Basic " "$T/lie.log" || fail "the credentials did not reach the server: $(cat "$T/lie.log")"
# a URL that is not STORE/NAME, an unknown scheme, a query, a closed port
rc=0
dcr-pull "http://alice:s3cr3tpw@127.0.0.1:$PORT" >"$T/out" 2>"$T/err" || rc=$?
[ $rc = 129 ] || fail "a bad STORE/NAME exited $rc"
contains "$(head -1 "$T/err")" "'http://***@127.0.0.1:$PORT' is not STORE/NAME"
! grep -q s3cr3tpw "$T/err" || fail "a bad STORE/NAME printed the password"
expect_fail 128 dcr-pull "gopher://alice:s3cr3tpw@h/s/v1"
case $ERR in *s3cr3tpw*) fail "an unknown scheme printed the password: $ERR" ;; esac
contains "$ERR" "gopher://***@h/s"
expect_fail 128 dcr-pull "http://alice:s3cr3tpw@127.0.0.1:$PORT/s?X-Amz-Signature=abcdef/v1"
case $ERR in *s3cr3tpw* | *abcdef*) fail "a query printed credentials: $ERR" ;; esac
contains "$ERR" "?***"
expect_fail 128 dcr-pull -q --retries 0 "http://alice:s3cr3tpw@127.0.0.1:1/s/v1"
case $ERR in *s3cr3tpw*) fail "a refused connection printed the password: $ERR" ;; esac

# a relay: its log and status show the parent without the password
if command -v dcr-relay >/dev/null 2>&1 && command -v curl >/dev/null 2>&1; then
	rm -f "$T/relay.port"
	dcr-relay --listen 127.0.0.1:0 --port-file "$T/relay.port" --retries 0 "$U" 2>"$T/relay.log" &
	RP=$!
	PIDS="$PIDS $RP"
	i=0
	while [ ! -s "$T/relay.port" ]; do
		i=$((i + 1))
		[ $i -lt 200 ] || fail "the relay did not start: $(cat "$T/relay.log")"
		sleep 0.05
	done
	R="http://127.0.0.1:$(cat "$T/relay.port")"
	dcr-pull -q --retries 0 "$R/v1" >/dev/null 2>&1 && fail "pulled through a relay whose parent refuses"
	curl -s "$R/.dcr/status" >"$T/status"
	kill "$RP"
	wait "$RP" 2>/dev/null || :
	grep -q "***@127.0.0.1:$PORT" "$T/status" || fail "the status names no parent: $(cat "$T/status")"
	! grep -q s3cr3tpw "$T/relay.log" "$T/status" || fail "the relay showed the password"
fi
