#!/bin/sh
# An object that is not a pack member passes through a relay bounded: a
# GET brings from the parent only the range it asks for, and no GET
# brings more than 256 MiB. Of a 257 MiB object, "Range: bytes=0-0" is
# one byte (206) and a range deep inside it is its bytes, while a GET of
# all of it is refused (403, saying why) and HEAD tells its size; small
# objects pass whole, and by range, as before.
. "$DCR_SRC/tests/lib-relay.sh"
S="$T/s"
mkdir -p "$S/big" "$S/refs"
printf 'one two three' >"$S/refs/policy"
big=$(((256 + 1) << 20))
pyrun '
import sys
with open(sys.argv[1], "wb") as f:
    f.truncate(int(sys.argv[2]))
    f.seek(200 << 20)
    f.write(b"hello")' "$S/big/blob" "$big"
start_relay a "$S"
A=$RURL

[ "$(http_code -r 0-0 "$A/big/blob")" = 206 ] || fail "bytes=0-0 is not 206: $(cat "$T/body")"
[ "$(wc -c <"$T/body")" = 1 ] || fail "bytes=0-0 brought $(wc -c <"$T/body") bytes"
at=$((200 << 20))
[ "$(http_code -r "$at-$((at + 4))" "$A/big/blob")" = 206 ] || fail "a range inside is not 206"
[ "$(cat "$T/body")" = hello ] || fail "a range inside is '$(cat "$T/body")'"
[ "$(http_code -r -3 "$A/big/blob")" = 206 ] || fail "bytes=-3 is not 206"
[ "$(wc -c <"$T/body")" = 3 ] || fail "bytes=-3 brought $(wc -c <"$T/body") bytes"
[ "$(http_code "$A/big/blob")" = 403 ] || fail "a GET of 257 MiB passed through whole"
[ "$(wc -l <"$T/body")" = 1 ] || fail "not one line of reason: $(head -c 300 "$T/body")"
contains "$(cat "$T/body")" "at most 256 MiB"
curl -sS -f -I "$A/big/blob" >"$T/head" 2>"$T/curl.err" || fail "HEAD failed: $(cat "$T/curl.err")"
grep -qi "^content-length: $big" "$T/head" || fail "HEAD does not tell the size: $(cat "$T/head")"

[ "$(curl -sS -f "$A/refs/policy")" = "one two three" ] || fail "a small object did not pass whole"
[ "$(http_code -r 4-6 "$A/refs/policy")" = 206 ] || fail "a small range is not 206"
[ "$(cat "$T/body")" = two ] || fail "a small range is '$(cat "$T/body")'"
[ "$(http_code -r 50-60 "$A/refs/policy")" = 416 ] || fail "a range past the end is not 416"
[ "$(http_code "$A/refs/absent")" = 404 ] || fail "an absent object is not 404"
exit 0
