#!/bin/sh
# `dcr-apply R` with a terminal on standard input waited for a delta that
# nobody would type. Commands that read binary data from standard input
# now refuse a terminal at once with one line and exit 128: dcr-apply (also
# --layout), dcr-pack, dcr-pack --list - and dcr-push -; the receiver is
# untouched. So do the inputs named by a path that is a terminal (the
# terminal's own device, /dev/stdin at a prompt): dcr-apply R PATH,
# dcr-pack PATH, dcr-pack --squash PATH..., dcr-push PATH; dcr-pack
# --squash /dev/stdin waited for the end of what nobody would type. (A
# pseudo-terminal from python3's pty module stands in; @TTY@ names it.)
. "$DCR_SRC/tests/lib-dcr.sh"
mkdir "$T/r"
$MKST new "$T/r" t:BF16:8
before=$(snapshot "$T/r")
ontty() { # CMD...: run CMD with a terminal on stdin (10 s at most)
	python3 - "$T" "$@" <<'PY'
import os, pty, subprocess, sys
t, cmd = sys.argv[1], sys.argv[2:]
m, s = pty.openpty()
cmd = [os.ttyname(s) if a == "@TTY@" else a for a in cmd]
try:
    p = subprocess.run(cmd, stdin=s, stdout=open(t + "/out", "wb"),
                       stderr=open(t + "/err", "wb"), timeout=10)
    rc = p.returncode
except subprocess.TimeoutExpired:
    rc = 124
open(t + "/rc", "w").write("%d\n" % rc)
PY
	rc=$(cat "$T/rc")
	[ "$rc" = 128 ] || { cat "$T/err"; fail "'$*' with a terminal on stdin exited $rc (124: it waited)"; }
	one_line_error "$1"
	grep -q "refusing to read .* from a terminal" "$T/err" || { cat "$T/err"; fail "'$*': no refusal"; }
}
ontty dcr-apply "$T/r"
ontty dcr-apply "$T/r" -
ontty dcr-pack
ontty dcr-pack --list -
command -v dcr-push >/dev/null 2>&1 && ontty dcr-push - "$T/store/v1"
ontty dcr-apply "$T/r" @TTY@
ontty dcr-apply "$T/r" /dev/stdin
ontty dcr-pack @TTY@
ontty dcr-pack --squash /dev/stdin @TTY@
ontty dcr-pack --squash --delta -o "$T/sq" @TTY@ @TTY@
[ ! -e "$T/sq" ] || fail "dcr-pack --squash wrote an output"
command -v dcr-push >/dev/null 2>&1 && ontty dcr-push @TTY@ "$T/store/v1"
[ ! -e "$T/store" ] || fail "dcr-push created the store"
[ "$(snapshot "$T/r")" = "$before" ] || fail "the receiver changed"
