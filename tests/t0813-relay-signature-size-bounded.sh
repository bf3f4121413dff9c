#!/bin/sh
# A manifest's signature is a few hundred bytes: a relay takes no more than
# DCR_SIG_MAX (4 KiB) of one, however much a parent sends. A parent that
# answers the signature of a versioned pack with 256 MiB gets the
# manifest refused (502, saying so), and gets to send the relay no more
# than a few socket buffers of it (tests/relay-hostile.py bigsig); a
# directory parent's oversized signature file is refused by its size.
. "$DCR_SRC/tests/lib-relay.sh"
D="$T/hs"
gen 1M 1
run_ok dcr-diff -o "$T/d" "$T/g/v0" "$T/g/v1"
run_ok dcr-pack --version 1 -o "$D/A" "$T/d"
start_py hs relay-hostile.py bigsig "$D" 256
start_relay a --retries 0 "http://127.0.0.1:$PORT/store"
A=$RURL
[ "$(http_code "$A/A/manifest.dcrm")" = 502 ] || fail "the manifest is not 502: $(cat "$T/body")"
contains "$(cat "$T/body")" "manifest.dcrm.sig"
await_line "$T/hs.log" "^SIG-SENT" "the parent is still sending the signature"
most=$(awk '$1 == "SIG-SENT" && $2 > m { m = $2 } END { print m + 0 }' "$T/hs.log")
[ "$most" -le $((32 << 20)) ] || fail "the relay took $most bytes of a signature"

# a directory parent
mkdir -p "$T/s/A"
cp "$D/A/"* "$T/s/A/"
head -c $((1 << 20)) /dev/zero >"$T/s/A/manifest.dcrm.sig"
start_relay b "$T/s"
[ "$(http_code "$RURL/A/manifest.dcrm")" = 502 ] || fail "the manifest is not 502: $(cat "$T/body")"
contains "$(cat "$T/body")" "1048576 bytes, not a signature"
exit 0
