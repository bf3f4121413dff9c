#!/bin/sh
# Every command (and each mode with options of its own: dcr-diff --layout
# and --merge, dcr-apply --layout, dcr-layout's subcommands) reports an
# unknown option or a missing argument as "CMD: error: ..." naming the
# option (getopt's own messages, which lack "error:", stay quiet), exits 129
# with the usage on stderr; and every usage text lists exit status 129.
# dcr --help lists every command built, dcr-relay and dcr-keygen too.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr dcr-pack dcr-push dcr-pull dcr-commit dcr-layout

# usage_error CMDNAME MESSAGE CMD ARGS...: exit 129, the first line of stderr
# is "CMDNAME: error: MESSAGE", a usage follows, nothing from getopt
usage_error() {
	_name=$1 _msg=$2
	shift 2
	run 129 "$@"
	[ "$(head -1 "$T/err")" = "$_name: error: $_msg" ] ||
		fail "'$*': first line '$(head -1 "$T/err")', want '$_name: error: $_msg'"
	grep -q "^usage:" "$T/err" || fail "'$*': no usage on stderr"
	grep -q "unrecognized option\|invalid option\|requires an argument" "$T/err" &&
		fail "'$*': getopt spoke: $(cat "$T/err")"
	return 0
}

for c in dcr-diff dcr-pack dcr-push dcr-pull dcr-apply dcr-commit dcr-verify dcr-keygen; do
	usage_error $c "unknown option '--bogus'" $c --bogus x
	usage_error $c "unknown option '--bogus'" $c --bogus=1 x
	usage_error $c "unknown option '-Y'" $c -Y x
	usage_error $c "unknown option '-Y'" $c -qY x
	usage_error $c "option '--help' takes no argument" $c --help=yes
done
usage_error dcr-diff "unknown option '--bogus'" dcr-diff --layout m --bogus
usage_error dcr-diff "unknown option '--bogus'" dcr-diff --merge --bogus d
usage_error dcr-apply "unknown option '--bogus'" dcr-apply --layout m --bogus
for s in generate check show materialize; do
	usage_error dcr-layout "unknown option '--bogus'" dcr-layout $s --bogus
done

# missing arguments, long and short
usage_error dcr-diff "option '--chunk' needs an argument" dcr-diff a b --chunk
usage_error dcr-diff "option '-o' needs an argument" dcr-diff a b -o
usage_error dcr-diff "option '--rank' needs an argument" dcr-diff --layout m a b --rank
usage_error dcr-pack "option '-s' needs an argument" dcr-pack -s
usage_error dcr-push "option '--retries' needs an argument" dcr-push a b --retries
usage_error dcr-pull "option '-j' needs an argument" dcr-pull a -j
usage_error dcr-apply "option '--version' needs an argument" dcr-apply a --version
usage_error dcr-apply "option '--layout' needs an argument" dcr-apply a --layout
usage_error dcr-commit "option '--store' needs an argument" dcr-commit a --store
usage_error dcr-verify "option '--against' needs an argument" dcr-verify a --against
usage_error dcr-keygen "option '-p' needs an argument" dcr-keygen -p
usage_error dcr-layout "option '--tp' needs an argument" dcr-layout generate --tp

# every usage text lists 129
for c in dcr dcr-diff dcr-pack dcr-push dcr-pull dcr-apply dcr-commit dcr-verify dcr-layout dcr-keygen; do
	run 0 $c --help
	grep -q "129 usage error" "$T/out" || fail "$c --help does not list 129"
done
for m in "dcr-diff --layout" "dcr-diff --merge" "dcr-apply --layout"; do
	run 0 $m -h
	grep -q "129 usage error" "$T/out" || fail "$m -h does not list 129"
done
# the front end lists every command built beside it, and names no such
# command as a usage error
run 0 dcr --help
for c in diff pack push pull apply commit verify layout relay keygen; do
	command -v dcr-$c >/dev/null 2>&1 || continue
	grep -q "^  $c  " "$T/out" || fail "dcr --help does not list $c"
done
run 0 dcr help apply
grep -q "^usage: dcr-apply " "$T/out" || fail "dcr help apply does not show dcr-apply's help: $(head -3 "$T/out")"
run 129 dcr help nosuch
run 129 dcr nosuch
grep -q "^dcr: error: 'nosuch' is not a dcr command (no dcr-nosuch here or on PATH; 'dcr --help' lists them)$" \
	"$T/err" || fail "dcr nosuch: $(cat "$T/err")"
say "ok: bad options are usage errors"
