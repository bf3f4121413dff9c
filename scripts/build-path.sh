# build-path.sh - sourced by the bench scripts: put a build tree's programs
# first in PATH.
#
# dcr_build_path BUILD: BUILD's commands themselves (BUILD/.libs, with
# libdcr from BUILD/lib/.libs), then BUILD and BUILD/scripts. Not the
# wrapper scripts libtool leaves in BUILD for the commands: a wrapper runs
# bash and five other processes (about 90 ms, and its CPU on a loaded
# machine) before the command starts, which a timing of one command, or
# of a pipeline of ten, would count as dcr's. make check runs the commands
# the same way (Makefile.am, TESTS_ENVIRONMENT).
dcr_build_path() {
	local b=$1
	PATH=$b:$b/scripts:$PATH
	if [ -x "$b/.libs/dcr-diff" ] && [ -d "$b/lib/.libs" ]; then
		PATH=$b/.libs:$PATH
		LD_LIBRARY_PATH=$b/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		export LD_LIBRARY_PATH
	fi
}
