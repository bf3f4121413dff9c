/* mmap-shim.c - an LD_PRELOAD shim for the tests of a file changed under
 * a command that maps it (t0290, t0291). Right after the first mmap(2) of
 * the file named by
 *   DCR_TEST_SHRINK    it truncates that file to nothing (touching the
 *                      mapping then raises SIGBUS), as a trainer saving
 *                      over the checkpoint dcr-diff reads, with O_TRUNC;
 *   DCR_TEST_SCRIBBLE  it flips the bits of the file's last byte with a
 *                      write(2), as a save still in progress would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_int done;

/* 1 if fd is the file named by environment variable var (once only). */
static int is_target(int fd, const char *var)
{
	const char *want = getenv(var);
	char link[64], path[4096];
	if (fd < 0 || !want || !*want || atomic_load(&done))
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = 0;
	return !strcmp(path, want) && !atomic_exchange(&done, 1);
}

static void act(int fd)
{
	if (is_target(fd, "DCR_TEST_SHRINK")) {
		(void)truncate(getenv("DCR_TEST_SHRINK"), 0);
		return;
	}
	if (is_target(fd, "DCR_TEST_SCRIBBLE")) {
		int w = open(getenv("DCR_TEST_SCRIBBLE"), O_RDWR | O_CLOEXEC);
		struct stat st;
		unsigned char b;
		if (w >= 0 && !fstat(w, &st) && st.st_size > 0 &&
		    pread(w, &b, 1, st.st_size - 1) == 1) {
			b ^= 0xff;
			(void)pwrite(w, &b, 1, st.st_size - 1);
		}
		if (w >= 0)
			close(w);
	}
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mmap");
	void *m = real(addr, len, prot, flags, fd, off);
	if (m != MAP_FAILED)
		act(fd);
	return m;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}
