#!/bin/sh
# Bad input and faults each end that request alone, and the relay keeps
# serving: a payload outside its pack's manifest (404, asked before and
# after the relay holds the manifest), paths and listing prefixes with
# "..", plain or %-encoded (400), other methods (405), 1,000 idle
# connections (a refit still goes through while
# they are open, the relay's threads and memory stay small, and they are
# closed after --idle-timeout), one address past --max-per-ip (closed
# unanswered, others still served), a child that hangs up mid-body, and a
# parent that dies mid-object: with
# no other parent the child gets an error, with another the relay falls
# over to it and the child's refit is exact.
. "$DCR_SRC/tests/lib-relay.sh"
need_node
start_server http http-store.js
S="http://127.0.0.1:$PORT/store"
gen_full 4M
publish "$S/v1" -s 2M
run_ok dcr-pull -q -o "$T/p" "$S/v1"
start_relay a --idle-timeout 5 "$S"
A=$RURL
APID=$RPID

# outside the pack, before and after the manifest is here
[ "$(http_code "$A/v1/payload-000099.dcrp")" = 404 ] || fail "payload 99 is not 404: $(cat "$T/body")"
refit r1 "$A/v1"
[ "$(http_code "$A/v1/payload-000099.dcrp")" = 404 ] || fail "payload 99 is not 404: $(cat "$T/body")"
contains "$(cat "$T/body")" "is not in its pack (its manifest lists"
[ "$(http_code -I "$A/v1/payload-000099.dcrp")" = 404 ] || fail "HEAD of payload 99 is not 404"

# ".." and friends
for p in "v1/../v1/manifest.dcrm" "../store/v1/manifest.dcrm" "v1/%2e%2e/x" "v1//manifest.dcrm" \
	"v1/./manifest.dcrm"; do
	[ "$(http_code --path-as-is "$A/$p")" = 400 ] || fail "'$p' is not 400: $(cat "$T/body")"
done
[ "$(http_code "$A/?prefix=../")" = 400 ] || fail "a listing of ../ is not 400"
[ "$(http_code "$A/?prefix=v1/../..")" = 400 ] || fail "a listing of v1/../.. is not 400"
[ "$(http_code -X PUT --data x "$A/v1/manifest.dcrm")" = 405 ] || fail "PUT is not 405"
[ "$(http_code -X DELETE "$A/v1/manifest.dcrm")" = 405 ] || fail "DELETE is not 405"

# 1,000 idle connections
pyrun '
import os, resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (2000, 2000))
socks = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(1000)]
open(sys.argv[2], "w").write("open\n")
deadline = time.time() + 60
while not os.path.exists(sys.argv[3]) and time.time() < deadline:
    time.sleep(0.05)
for s in socks:
    s.close()' "${A##*:}" "$T/idle.open" "$T/idle.done" &
IDLE=$!
PIDS="$PIDS $IDLE"
i=0
while [ ! -e "$T/idle.open" ]; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "cannot open 1000 connections"
	sleep 0.05
done
# (the kernel queues what the relay has not accepted yet: give it time; the
# count is taken before the refit, which may outlast --idle-timeout on a
# slow or sanitized build)
i=0
until conns=$(status "$A" "d['connections']"); [ "$conns" -ge 1000 ] || [ $i -ge 200 ]; do
	i=$((i + 1))
	sleep 0.05
done
[ "$conns" -ge 1000 ] || fail "the relay holds $conns connections, not 1000"
threads=$(awk '/^Threads:/ { print $2 }' "/proc/$APID/status")
rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$APID/status")
[ "$threads" -le 32 ] || fail "the relay runs $threads threads with 1000 idle connections"
[ "$rss" -le $((200 << 10)) ] || fail "the relay holds $rss KiB with 1000 idle connections"
refit r3 "$A/v1"
echo "1000 idle connections: $threads threads, $rss KiB"
i=0
until [ "$(status "$A" "d['connections']")" -lt 10 ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "idle connections were not closed: $(cat "$T/status.json")"
	sleep 0.05
done
touch "$T/idle.done"
wait "$IDLE" || fail "the idle connections' helper failed"

# one address holding its quota of connections (--max-per-ip): its next
# is closed unanswered, another address is still served, and the first is
# again once it lets go
start_relay q --max-per-ip 8 "$S"
QPID=$RPID
pyrun '
import http.client, json, socket, sys, time
port = int(sys.argv[1])
def get(src, path):
    """(status, body) of GET path from address src; None if the relay closed unanswered"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(src, 0))
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return None
    finally:
        c.close()
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
deadline = time.time() + 30
while json.loads(get("127.0.0.2", "/.dcr/status")[1])["connections"] < 9:
    if time.time() > deadline:
        sys.exit("the relay never held the 8 connections")
    time.sleep(0.05)
if get("127.0.0.1", "/v1/manifest.dcrm") is not None:
    sys.exit("a ninth connection from one address was answered")
if get("127.0.0.2", "/v1/manifest.dcrm")[0] != 200:
    sys.exit("another address was not served")
for s in held:
    s.close()
deadline = time.time() + 30
while (get("127.0.0.1", "/v1/manifest.dcrm") or (0,))[0] != 200:
    if time.time() > deadline:
        sys.exit("the address was not served again once it let go")
    time.sleep(0.05)' "${RURL##*:}"
stop_relay "$QPID"

# a child that hangs up mid-body (the relay still fetching what it reads)
start_server hang http-store.js --rate 512K
run_ok dcr-push -q "$T/p" "http://127.0.0.1:$PORT/store/v1"
start_relay h --no-prefetch "http://127.0.0.1:$PORT/store"
H=$RURL
pyrun '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /v1/payload-000000.dcrp HTTP/1.1\r\nHost: x\r\n\r\n")
if not s.recv(1000):
    sys.exit("the relay closed first")
s.close()' "${H##*:}"
i=0
until [ "$(status "$H" "d['cut']")" -ge 1 ]; do
	i=$((i + 1))
	[ $i -lt 400 ] || fail "the relay did not see the child hang up: $(cat "$T/status.json")"
	sleep 0.05
done
[ "$(http_code "$H/v1/manifest.dcrm")" = 200 ] || fail "the relay stopped serving after a hang-up"

# a parent that dies mid-object: the only one
start_server slow http-store.js --rate 128K
SS="http://127.0.0.1:$PORT/store"
SPID=$pid
run_ok dcr-push -q "$T/p" "$SS/v1"
start_relay one --retries 1 "$SS"
ONE=$RURL
curl -sS -f -o "$T/c1" "$ONE/v1/payload-000000.dcrp" 2>"$T/c1.err" &
C1=$!
start_server slow2 http-store.js --rate 128K
SS2="http://127.0.0.1:$PORT/store"
SPID2=$pid
run_ok dcr-push -q "$T/p" "$SS2/v1"
start_relay two --retries 1 "$SS2" "$S"
TWO=$RURL
refit_bg r4 "$TWO/v1"
i=0
until [ "$(status "$ONE" "obj('v1/payload-000000.dcrp')['ready']")" -gt 0 ] &&
	[ "$(status "$TWO" "d['bytes_fetched']")" -gt $((1 << 20)) ]; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "no piece came from the slow stores in 30 s"
	sleep 0.05
done
kill -KILL "$SPID" "$SPID2"
rc=0
wait "$C1" || rc=$?
[ "$rc" != 0 ] || fail "the child got a whole payload from a relay whose only parent died"
refit_done r4
grep -q "^dcr-relay: error: 'v1/payload-000000.dcrp': " "$T/one.log" ||
	fail "relay one did not report the failed object: $(cat "$T/one.log")"
grep -q "^dcr-relay: warning: .* trying '$S' from byte" "$T/two.log" ||
	fail "relay two did not fall over: $(cat "$T/two.log")"
[ "$(http_code "$ONE/.dcr/status")" = 200 ] || fail "relay one stopped serving"
[ "$(http_code "$ONE/v1/payload-000000.dcrp")" = 502 ] ||
	fail "a payload from a dead parent is not 502: $(cat "$T/body")"
refit r5 "$A/v1"
exit 0
