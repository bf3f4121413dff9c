#!/bin/sh
# libcurl and libmicrohttpd are loaded where a store or the relay first needs
# them (lib/core/dynlib.h), not at every command's start: libdcr does not link
# them, a command that uses neither runs where they are missing, and one that
# needs a library that cannot be loaded, or lacks a function, says so in one
# line and exits 128.
. "$DCR_SRC/tests/lib-store.sh"
so=$(ls "$DCR_BUILD"/lib/.libs/libdcr.so 2>/dev/null || true)
if [ -n "$so" ] && command -v ldd >/dev/null 2>&1; then
	ldd "$so" >"$T/ldd" || fail "ldd $so failed"
	grep -q libdcr "$T/ldd" && fail "libdcr links itself?"
	if grep -E 'libcurl|libmicrohttpd' "$T/ldd"; then
		fail "libdcr.so links libcurl or libmicrohttpd at start"
	fi
fi
# a stand-in libcurl.so.4 and libmicrohttpd.so.12 that export nothing dcr
# needs, found before the real ones
command -v cc >/dev/null 2>&1 || skip "no C compiler for the stand-in libraries"
mkdir "$T/fake"
echo 'int dcr_stand_in;' >"$T/fake/x.c"
cc -shared -fPIC -o "$T/fake/libcurl.so.4" "$T/fake/x.c" || skip "cc -shared failed"
cp "$T/fake/libcurl.so.4" "$T/fake/libmicrohttpd.so.12"
LD_LIBRARY_PATH="$T/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# a directory store needs neither
mkdata "$T/a" 1000
run_ok "$TOOL" "$T/store" put v1/x "$T/a"
run_ok "$TOOL" "$T/store" get v1/x
cmp "$T/out" "$T/a" || fail "directory store returned other bytes"
# the HTTP store and the S3 store need libcurl
expect_fail 128 "$TOOL" http://127.0.0.1:1/store get v1/x
contains "$ERR" "libcurl.so.4 lacks curl_"
contains "$ERR" "needed for the HTTP and S3 stores"
expect_fail 128 dcr-pull -o "$T/in" s3://bucket/p
contains "$ERR" "needed for the HTTP and S3 stores"
# the relay needs libmicrohttpd
if command -v dcr-relay >/dev/null 2>&1; then
	expect_fail 128 dcr-relay --listen 127.0.0.1:0 --cache "$T/cache" "$T/store"
	contains "$ERR" "libmicrohttpd.so.12 lacks MHD_"
fi
echo "ok"
