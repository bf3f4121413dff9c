/* store-net.h - what store.c (directory store, job pool, dispatch) and
 * store_net.c (HTTP and S3 over libcurl) share. Not part of the API. */
#ifndef DCR_TRANSPORT_STORE_NET_H
#define DCR_TRANSPORT_STORE_NET_H

#include <pthread.h>
#include "core/buf.h"
#include "transport/store.h"

enum { STORE_DIR = 1, STORE_HTTP, STORE_S3 };

struct dcr_store {
	int kind;
	char *url;                /* as opened, for messages */
	struct dcr_store_opts o;  /* defaults filled in; strings owned */

	/* directory */
	char *root;

	/* HTTP and S3 */
	char *base;     /* URL that object paths are appended to: http base, or
			   s3 endpoint origin (scheme://host[:port]) */
	char *epath;    /* s3: the endpoint's own path ("" or "/x"), then
			   "/bucket" */
	char *hostport; /* s3: Host header value */
	char *bucket, *prefix; /* s3; prefix without trailing '/' ("" if none) */
	char *akid, *secret, *token, *region;
	pthread_mutex_t curl_mu;
	void **idle;    /* CURL handles kept for connection reuse */
	size_t nidle, cap_idle;
	pthread_mutex_t cas_mu;
	int cas_state;  /* 0 unknown, 1 honoured, -1 ignored */

	/* job pool */
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_done;
	struct dcr_store_job *head, *tail;
	pthread_t *threads;
	int nthreads;
	int stop;
};

/* A growing list of names the list operations hand out (each malloc'd).
 * dcr_names_add takes s on success; on failure the caller still owns it. */
struct dcr_names {
	char **v;
	size_t n, cap;
};
int dcr_names_add(struct dcr_names *l, char *s);
void dcr_names_sort(struct dcr_names *l);

int dcr_net_open(struct dcr_store *s, const char *url, struct dcr_err *e);
void dcr_net_close(struct dcr_store *s);
int dcr_net_put(struct dcr_store *s, const char *name, const void *buf,
		size_t len, int fd, uint64_t flen, int if_absent,
		struct dcr_err *e);
struct dcr_buf;
/* Into b (len reset, capacity reused and grown as needed); with h, feeds
 * it all but the last tail bytes, in order, as they arrive. */
int dcr_net_get_buf(struct dcr_store *s, const char *name, struct dcr_buf *b,
		    size_t tail, const struct dcr_hasher *h, struct dcr_err *e);
int dcr_net_get(struct dcr_store *s, const char *name, uint8_t **buf,
		size_t *len, struct dcr_err *e);
int dcr_net_get_range(struct dcr_store *s, const char *name, uint64_t off,
		      size_t len, uint8_t *buf, const struct dcr_hasher *h, struct dcr_err *e);
int dcr_net_get_to_fd(struct dcr_store *s, const char *name, int fd,
		      uint64_t *size, struct dcr_err *e);
int dcr_net_stat(struct dcr_store *s, const char *name, uint64_t *size,
		 struct dcr_err *e);
int dcr_net_list(struct dcr_store *s, const char *prefix, char ***names,
		 size_t *n, struct dcr_err *e);
int dcr_net_delete(struct dcr_store *s, const char *name, struct dcr_err *e);

/* Name of the probe objects put_if_absent writes on remote stores; lists
 * skip them. */
#define DCR_CAS_PROBE ".dcr-cas-probe-"

#endif
