#!/bin/sh
# A 512-byte tar header declaring a 2 GiB entry (followed by 100 bytes) is
# refused as truncated by dcr-apply, dcr-push and dcr-pack --list without
# reserving what it declares: each stays under 200 MiB (it took 2 GB), and
# the receiver is untouched.
. "$DCR_SRC/tests/lib-dcr.sh"
need_gnu_time
command -v dcr-push >/dev/null 2>&1 || skip "dcr-push is not built"

python3 - "$T/huge.tar" <<'PY'
import sys, tarfile
ti = tarfile.TarInfo("payload-000000.dcrp")
ti.size = 2 ** 31
open(sys.argv[1], "wb").write(ti.tobuf(format=tarfile.USTAR_FORMAT) + b"\0" * 100)
PY
mkdir "$T/r" "$T/store"
$MKST new "$T/r" t:BF16:64
before=$(snapshot "$T/r")

for cmd in "dcr-pack --list $T/huge.tar" "dcr-apply $T/r $T/huge.tar" "dcr-push $T/huge.tar $T/store/v1"; do
	m=$(peak_rss 128 $cmd)
	grep -q 'truncated\|Truncated' "$T/err" || { cat "$T/err" >&2; fail "'$cmd': no word of truncation"; }
	say "$cmd: $m MiB"
	[ "$m" -lt 200 ] || fail "$cmd reserved $m MiB for a 612-byte input"
done
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
