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
