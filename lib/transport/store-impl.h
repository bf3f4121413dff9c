/* store-impl.h - what a store kind implements (its table of operations)
 * and what every store shares. store.c opens a store by its URL's scheme
 * and calls the kind only through the table; the kinds (store-dir.c,
 * store-http.c, store-s3.c) never call each other. Not part of the API. */
#ifndef DCR_TRANSPORT_STORE_IMPL_H
#define DCR_TRANSPORT_STORE_IMPL_H

#include <pthread.h>
#include "core/buf.h"
#include "transport/store.h"

struct dcr_blob;
struct dcr_hasher;
#include "transport/names.h"

/* One store kind. store.c checks names and prefixes before it calls an
 * operation; each returns 0 or a negative code with e filled (store.h). */
struct dcr_store_ops {
	int local;  /* a directory: objects are files that can be mapped */
	/* Set s->impl up for url (s->o is filled in). On failure close is
	 * still called, with s->impl NULL or half set up. */
	int (*open)(struct dcr_store *s, const char *url, struct dcr_err *e);
	void (*close)(struct dcr_store *s);
	int (*put)(struct dcr_store *s, const char *name, const void *buf,
		   size_t len, struct dcr_err *e);
	int (*put_file)(struct dcr_store *s, const char *name, const char *path,
			struct dcr_err *e);
	/* DCR_ECONFLICT if name exists (store.c then compares the bytes). */
	int (*put_if_absent)(struct dcr_store *s, const char *name,
			     const void *buf, size_t len, struct dcr_err *e);
	/* Into b (len reset, capacity reused and grown as needed); with h,
	 * feeds it all but the last tail bytes, in order. */
	int (*get)(struct dcr_store *s, const char *name, struct dcr_buf *b,
		   size_t tail, const struct dcr_hasher *h, struct dcr_err *e);
	/* The same into a blob: a mapping where the kind can, else the heap
	 * buffer b may bring. */
	int (*get_blob)(struct dcr_store *s, const char *name, struct dcr_blob *b,
			size_t tail, const struct dcr_hasher *h, struct dcr_err *e);
	/* h (may be NULL) gets the len bytes in order; fresh: as in
	 * dcr_store_get_range_hashed (a directory has no cache between). */
	int (*get_range)(struct dcr_store *s, const char *name, uint64_t off,
			 size_t len, uint8_t *buf, const struct dcr_hasher *h, int fresh,
			 struct dcr_err *e);
	int (*get_to_fd)(struct dcr_store *s, const char *name, int fd,
			 uint64_t *size, struct dcr_err *e);
	int (*stat)(struct dcr_store *s, const char *name, uint64_t *size,
		    struct dcr_err *e);
	/* Add the names starting with prefix to l, in any order; store.c
	 * sorts them, drops duplicates, and frees l on failure. */
	int (*list)(struct dcr_store *s, const char *prefix, struct dcr_names *l,
		    struct dcr_err *e);
	int (*delete)(struct dcr_store *s, const char *name, struct dcr_err *e);
};

struct dcr_store {
	const struct dcr_store_ops *ops;
	void *impl;               /* the kind's own state */
	char *url;                /* as opened, for messages */
	struct dcr_store_opts o;  /* defaults filled in; strings owned */

	/* job pool */
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_done;
	struct dcr_store_job *head, *tail;
	pthread_t *threads;
	int nthreads;
	int stop;
};


#endif
