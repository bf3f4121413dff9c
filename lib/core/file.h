/* file.h - whole reads and writes, directories, atomic files, mappings. */
#ifndef DCR_CORE_FILE_H
#define DCR_CORE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Files. */
int dcr_read_full(int fd, void *buf, size_t n); /* 0, -errno, or -EPIPE at EOF */
/* Up to n bytes, fewer only at the end of the input (a sniffer's first
 * bytes of a pipe): how many, or -errno. */
long dcr_read_upto(int fd, void *buf, size_t n);
int dcr_write_full(int fd, const void *buf, size_t n);
int dcr_pread_full(int fd, void *buf, size_t n, uint64_t off);
int dcr_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
int dcr_fsync_dir(const char *dir);
/* fsync the directory holding path (after a rename, link or unlink in it). */
int dcr_fsync_parent(const char *path, struct dcr_err *e);
int dcr_mkdir_p(const char *path, struct dcr_err *e);
char *dcr_path_join(const char *a, const char *b);
char *dcr_dirname(const char *path);

/* Atomic file creation: a temp file beside the final name, fsync, rename,
 * fsync the directory. */
struct dcr_atomic {
	char *final;
	char *tmp;
	int fd;
	int direct; /* dcr_output_open: written in place, no temporary file */
	int slot;   /* 1 + its place in dcr_atomic_remove_all's table; 0 none */
};
int dcr_atomic_open(struct dcr_atomic *a, const char *final, struct dcr_err *e);
/* The same, making final's directory (and its parents) first, where
 * another process may remove it whenever it is empty (a directory
 * store's delete does): the directory is made right before each try to
 * create the temporary file, and a try that finds it gone again is
 * repeated, DCR_ATOMIC_DIR_TRIES times at most. */
#define DCR_ATOMIC_DIR_TRIES 10000
int dcr_atomic_open_mkdir(struct dcr_atomic *a, const char *final, struct dcr_err *e);
/* Whether an output named by a user is a stream to write in place rather
 * than a file to replace: a name of an open descriptor (/dev/stdout,
 * /dev/stderr, /dev/fd/N, /proc/self/fd/N) or of something that exists
 * and is neither a regular file nor a directory (a FIFO, a character
 * device such as /dev/null, a socket). A rename onto such a name would
 * replace the FIFO, or the /dev link itself, with a regular file. */
int dcr_output_is_stream(const char *path);
/* Open an output a user named: a stream (dcr_output_is_stream) is written
 * in place, through a duplicate of the named descriptor (its offset and
 * append mode kept) or by opening it for writing (a FIFO waits for its
 * reader); a directory is refused (EISDIR) before anything is written;
 * anything else as dcr_atomic_open. a->final is set in both cases;
 * dcr_atomic_commit closes a stream (fsyncing it where it is a regular
 * file), dcr_atomic_abort closes it. */
int dcr_output_open(struct dcr_atomic *a, const char *final, struct dcr_err *e);
int dcr_atomic_commit(struct dcr_atomic *a, struct dcr_err *e);
/* The first half of commit: fsync and close the temporary file (any
 * thread, ahead of an ordered commit). */
int dcr_atomic_sync(struct dcr_atomic *a, struct dcr_err *e);
void dcr_atomic_abort(struct dcr_atomic *a);
/* Remove every temporary file of this process's dcr_atomic_open that is
 * neither committed nor aborted yet (up to DCR_ATOMIC_TRACKED at once; the
 * name of each is kept from before the file is created until it is renamed
 * or removed). Async-signal-safe: a program's handler of SIGINT, SIGTERM
 * or SIGHUP calls it before the process dies, so that an interrupted
 * refit leaves no hidden temporary file of up to a whole checkpoint behind
 * (the dcr commands do, cmd_init). A library installs no handler. */
#define DCR_ATOMIC_TRACKED 64
void dcr_atomic_remove_all(void);
/* Whether name (a file name, no directory) is a temporary file of
 * dcr_atomic_open left by a process that no longer runs on this machine
 * (SIGKILL, a crash): of the form .NAME.tmp-PID-K, PID neither ours nor
 * alive. */
int dcr_atomic_is_stale(const char *name);
/* Write a whole small file atomically. */
int dcr_write_file_atomic(const char *path, const void *buf, size_t n,
			  struct dcr_err *e);
/* The same for an output a user named (dcr_output_open: a FIFO or
 * /dev/fd/N is written in place). */
int dcr_write_output(const char *path, const void *buf, size_t n, struct dcr_err *e);
/* Read a whole file (at most max bytes) into malloc'd memory, NUL added:
 * read as a stream until its end, so a pipe, a FIFO or a process
 * substitution (/dev/fd/N) reads as well as a regular file, whose size is
 * only a first guess of the buffer's. More than max bytes: DCR_EFORMAT. */
int dcr_read_file(const char *path, size_t max, uint8_t **out, size_t *len,
		  struct dcr_err *e);
/* The same from an open descriptor (read to its end, left open); what
 * names it in messages. */
int dcr_read_fd(int fd, const char *what, size_t max, uint8_t **out, size_t *len,
		struct dcr_err *e);

/* An unlinked temporary file in $TMPDIR (else /tmp), open for reading and
 * writing, in *fd; what names its use in messages. */
int dcr_tmpfile(const char *what, int *fd, struct dcr_err *e);
/* What is left to read on fd (a pipe, a FIFO, a process substitution)
 * copied to its end into a dcr_tmpfile, rewound, in *out (fd is left
 * open), and its length in *len: for a reader that must go through its
 * input twice. Memory stays bounded; the disk holds the bytes. */
int dcr_spool_fd(int fd, const char *what, int *out, uint64_t *len, struct dcr_err *e);

/* Fault in n bytes at p about to be written, in one call and with huge
 * pages where the kernel allows: touching fresh memory page by page costs
 * more than the copy into it (measured: 192 MB in 200 ms one 4 KiB fault
 * at a time, 25 ms this way). Best effort: nothing happens where it is not
 * supported; small ranges are left alone. */
void dcr_prefault(void *p, size_t n);

/* The filesystem holding fd (or path, when fd < 0): *room, the bytes a
 * writer may still use there, and *keep (may be NULL), what a writer that
 * must not fill it leaves free: 1/50 of its size, at least keep_min, at
 * most 4 GiB. 0, or -1 where it cannot tell (the writes will). */
int dcr_fs_room(int fd, const char *path, uint64_t keep_min, uint64_t *room, uint64_t *keep);

/* The object pfd (an O_PATH descriptor) opened with flags, if it is a
 * regular file: a new descriptor (pfd stays the caller's), or -errno.
 * Anything else is never opened (a FIFO's open waits for a writer or
 * wakes one, a device's open may act: a tape rewinds, a watchdog arms):
 * -EINVAL, for the caller's "not a regular file". Through
 * /proc/self/fd/PFD; without /proc, path is opened again (with
 * O_NONBLOCK) and must be the same file (-EAGAIN if it was replaced). */
int dcr_reopen_regular(int pfd, const char *path, int flags);
/* path opened with flags if it is a regular file (after symbolic links,
 * unless flags has O_NOFOLLOW), as dcr_reopen_regular; or -errno. */
int dcr_open_regular(const char *path, int flags);

/* Bytes that travel with their owner: a read-only mapping of a file, or a
 * heap buffer (map == NULL). dcr_blob_free releases either and zeroes b. */
struct dcr_blob {
	uint8_t *p;
	size_t len;
	void *map;
	size_t map_len;
	size_t cap;	/* heap: bytes allocated at p, for reuse */
	uint64_t max;	/* set by the caller: the most a store may bring here (0: its own bound) */
	int fresh;	/* set by the caller: caches on the way (a relay) are to
			 * check their copy again before they answer (HTTP's
			 * Cache-Control: no-cache); a store ignores it */
};
/* Map PATH (a regular file of at most MAX bytes) into b, pages populated:
 * no copy, no page faults one by one. An empty file gets a heap byte. */
int dcr_blob_map(struct dcr_blob *b, const char *path, size_t max, struct dcr_err *e);
int dcr_blob_map_fd(struct dcr_blob *b, int fd, const char *path, size_t max,
		    struct dcr_err *e);
void dcr_blob_free(struct dcr_blob *b);

#endif
