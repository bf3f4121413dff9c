# build-path.sh - sourced by the bench scripts: where a build tree's
# programs are, and putting them first in PATH.
#
# The commands themselves (BUILD/.libs, with libdcr from BUILD/lib/.libs),
# not the wrapper scripts libtool leaves in BUILD for them: a wrapper runs
# bash and five other processes (about 90 ms, and its CPU on a loaded
# machine) before the command starts, which a timing of one command, or
# of a pipeline of ten, would count as dcr's. make check runs the commands
# the same way (Makefile.am, TESTS_ENVIRONMENT).

# dcr_build_dirs BUILD: BUILD_BIN, where BUILD's commands are, and
# BUILD_LIB, where their libdcr is (empty when BUILD has no .libs: then
# BUILD_BIN is BUILD itself).
dcr_build_dirs() {
	if [ -x "$1/.libs/dcr-diff" ] && [ -d "$1/lib/.libs" ]; then
		BUILD_BIN=$1/.libs BUILD_LIB=$1/lib/.libs
	else
		BUILD_BIN=$1 BUILD_LIB=
	fi
}

# dcr_build_path BUILD: BUILD's commands, then BUILD and BUILD/scripts,
# first in PATH, and their libdcr first in LD_LIBRARY_PATH.
dcr_build_path() {
	dcr_build_dirs "$1"
	PATH=$BUILD_BIN:$1:$1/scripts:$PATH
	if [ -n "$BUILD_LIB" ]; then
		LD_LIBRARY_PATH=$BUILD_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		export LD_LIBRARY_PATH
	fi
}

# dcr_is_wrapper FILE: FILE is one of libtool's wrapper scripts.
dcr_is_wrapper() {
	head -c 512 -- "$1" 2>/dev/null | grep -q 'temporary wrapper script for'
}

# dcr_bench_path: put the programs a benchmark times first in PATH:
# $DCR_BUILD's when it is set; else PATH's own, except that where the
# dcr-diff found there is a build tree's wrapper script (a PATH that names
# the build directory itself), the commands it wraps replace them, with a
# note on stderr: timing the wrappers counted their bash as dcr's time
# (a 1% refit through bench-refit took 3.3 s that way, 2.6 s without).
# Sets BENCH_BIN to the directory whose dcr-diff runs.
dcr_bench_path() {
	local p
	if [ -n "${DCR_BUILD:-}" ]; then
		dcr_build_path "$DCR_BUILD"
	elif p=$(command -v dcr-diff) && dcr_is_wrapper "$p"; then
		dcr_build_path "$(dirname -- "$p")"
		if dcr_is_wrapper "$BUILD_BIN/dcr-diff"; then
			echo "${0##*/}: warning: $p is libtool's wrapper script and its build has no .libs: the timings count the wrapper's start" >&2
		else
			echo "${0##*/}: note: $p is libtool's wrapper script; timing the commands it wraps, in $BUILD_BIN (DCR_BUILD=DIR chooses a build)" >&2
		fi
	fi
	p=$(command -v dcr-diff) && BENCH_BIN=$(dirname -- "$p") || BENCH_BIN=
}
