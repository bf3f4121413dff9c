/* shrink-mapped.c - an LD_PRELOAD shim for tests/t0292: the first mmap(2)
 * of the file named by $DCR_TEST_SHRINK truncates that file to nothing
 * right after mapping it, as a trainer saving over a checkpoint that
 * dcr-diff is reading would. Touching the mapping then raises SIGBUS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_int done;

static void shrink(int fd)
{
	const char *want = getenv("DCR_TEST_SHRINK");
	char link[64], path[4096];
	if (fd < 0 || !want || !*want || atomic_load(&done))
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return;
	path[n] = 0;
	if (!strcmp(path, want) && !atomic_exchange(&done, 1))
		(void)truncate(want, 0);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mmap");
	void *m = real(addr, len, prot, flags, fd, off);
	if (m != MAP_FAILED)
		shrink(fd);
	return m;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}
