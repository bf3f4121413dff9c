/* store.c - the store API: the kind chosen by URL and called through its
 * table of operations (store-impl.h), object names and the name list, and
 * the pool of workers that runs transfers in parallel. The kinds live in
 * store-dir.c, store-http.c and store-s3.c. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/buf.h"
#include "core/util.h"
#include "transport/store-dir.h"
#include "transport/store-http.h"
#include "transport/store-s3.h"

/* ---- open/close and dispatch --------------------------------------- */

static const struct {
	const char *scheme;
	const struct dcr_store_ops *ops;
} kinds[] = {
	{"s3://", &store_s3_ops},
	{"http://", &store_http_ops},
	{"https://", &store_http_ops},
	{"file://", &store_dir_ops},
};

static const struct dcr_store_ops *kind_of(const char *url)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!strncmp(url, kinds[i].scheme, strlen(kinds[i].scheme)))
			return kinds[i].ops;
	return strstr(url, "://") ? NULL : &store_dir_ops;
}

int dcr_store_open(const char *url, const struct dcr_store_opts *o,
		   struct dcr_store **out, struct dcr_err *e)
{
	*out = NULL;
	if (!url || !*url)
		return dcr_err_set(e, -EINVAL, "no store given");
	struct dcr_store *s = dcr_calloc(1, sizeof(*s));
	char *shown = dcr_url_redact(url);
	if (!s || !shown) {
		free(s);
		free(shown);
		return dcr_err_sys(e, ENOMEM, "cannot open a store");
	}
	if (o)
		s->o = *o;
	s->o.endpoint = s->o.cacert = NULL;
	if (!s->o.retries)
		s->o.retries = 5;
	if (s->o.retries < 0)
		s->o.retries = 0;
	if (s->o.parallel <= 0)
		s->o.parallel = 8;
	if (s->o.parallel > 256)
		s->o.parallel = 256;
	if (s->o.timeout_s <= 0)
		s->o.timeout_s = 30;
	if (!s->o.part_size)
		s->o.part_size = 16u << 20;
	if (!s->o.multipart_threshold)
		s->o.multipart_threshold = 128u << 20;
	if (s->o.backoff_ms <= 0)
		s->o.backoff_ms = 200;
	if (s->o.list_page <= 0 || s->o.list_page > 1000)
		s->o.list_page = 1000;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv_work, NULL);
	pthread_cond_init(&s->cv_done, NULL);
	s->url = shown; /* what messages show: no credentials */
	if ((o && o->endpoint && !(s->o.endpoint = dcr_strdup(o->endpoint))) ||
	    (o && o->cacert && !(s->o.cacert = dcr_strdup(o->cacert)))) {
		dcr_store_close(s);
		return dcr_err_sys(e, ENOMEM, "cannot open store '%s'", shown);
	}
	const struct dcr_store_ops *ops = kind_of(url);
	int r;
	if (!ops) {
		r = dcr_err_set(e, -EINVAL,
				"cannot open store '%s': unknown URL scheme (use a directory, file://, s3://, http:// or https://)",
				s->url);
	} else {
		s->ops = ops;
		r = ops->open(s, url, e);
	}
	if (r) {
		dcr_store_close(s);
		return r;
	}
	*out = s;
	return 0;
}

void dcr_store_close(struct dcr_store *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	free(s->threads);
	if (s->ops)
		s->ops->close(s);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv_work);
	pthread_cond_destroy(&s->cv_done);
	free((char *)s->o.endpoint);
	free((char *)s->o.cacert);
	free(s->url);
	free(s);
}

const char *dcr_store_url(const struct dcr_store *s) { return s->url; }

int dcr_store_is_local(const struct dcr_store *s)
{
	return s->ops->local;
}

int dcr_store_dir_missing(const struct dcr_store *s)
{
	return s->ops == &store_dir_ops && store_dir_missing(s);
}

int dcr_store_put(struct dcr_store *s, const char *name, const void *buf,
		  size_t len, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	return s->ops->put(s, name, buf, len, e);
}

int dcr_store_put_if_absent(struct dcr_store *s, const char *name,
			    const void *buf, size_t len, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	r = s->ops->put_if_absent(s, name, buf, len, e);
	if (r == DCR_ECONFLICT) {
		/* A create whose answer was lost (and retried, by us or by
		 * libcurl on a dead reused connection) finds its own bytes:
		 * exactly these bytes there means the create is done. */
		uint8_t *got = NULL;
		size_t glen = 0;
		struct dcr_err ge;
		if (!dcr_store_get(s, name, &got, &glen, &ge) && glen == len &&
		    (!len || !memcmp(got, buf, len)))
			r = 0;
		free(got);
	}
	return r;
}

int dcr_store_put_file(struct dcr_store *s, const char *name, const char *path,
		       struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	return s->ops->put_file(s, name, path, e);
}

int dcr_store_get(struct dcr_store *s, const char *name, uint8_t **buf,
		  size_t *len, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	struct dcr_buf b = {0};
	r = s->ops->get(s, name, &b, 0, NULL, e);
	if (!r && dcr_buf_reserve(&b, 1))
		r = dcr_err_sys(e, ENOMEM, "cannot GET '%s'", name);
	if (r) {
		dcr_buf_free(&b);
		return r;
	}
	b.p[b.len] = 0;
	*buf = b.p;
	*len = b.len;
	return 0;
}

/* After a get into b that returned r: unless r, b's bytes copied into
 * malloc'd memory with a NUL after them; b freed either way. */
static int blob_out(struct dcr_blob *b, int r, const char *name, uint8_t **buf, size_t *len,
		    struct dcr_err *e)
{
	if (!r && !(*buf = malloc(b->len + 1)))
		r = dcr_err_sys(e, ENOMEM, "cannot GET '%s'", name);
	if (!r) {
		memcpy(*buf, b->p, b->len);
		(*buf)[b->len] = 0;
		*len = b->len;
	}
	dcr_blob_free(b);
	return r;
}

int dcr_store_get_fresh(struct dcr_store *s, const char *name, uint8_t **buf,
			size_t *len, struct dcr_err *e)
{
	struct dcr_blob b = {.max = DCR_STORE_GET_MAX, .fresh = 1};
	return blob_out(&b, dcr_store_get_blob(s, name, &b, e), name, buf, len, e);
}

int dcr_store_get_blob(struct dcr_store *s, const char *name, struct dcr_blob *b,
		       struct dcr_err *e)
{
	return dcr_store_get_blob_hashed(s, name, b, 0, NULL, e);
}

int dcr_store_get_small(struct dcr_store *s, const char *name, size_t max, const char *what,
			uint8_t **buf, size_t *len, struct dcr_err *e)
{
	struct dcr_blob b = {.max = max};
	uint64_t size = 0;
	*buf = NULL;
	*len = 0;
	int r = dcr_store_is_local(s) ? dcr_store_stat(s, name, &size, e) : 0;
	if (!r && size <= max)
		r = dcr_store_get_blob(s, name, &b, e);
	if (!r && (size > max || b.len > max))
		r = dcr_err_set(e, DCR_EFORMAT, "'%s/%s' is %llu bytes, not %s", s->url, name,
				(unsigned long long)(size > max ? size : b.len), what);
	r = blob_out(&b, r, name, buf, len, e);
	return r == DCR_ENOTFOUND ? 0 : r;
}

int dcr_store_get_blob_hashed(struct dcr_store *s, const char *name, struct dcr_blob *b,
			      size_t tail, const struct dcr_hasher *h, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r) {
		dcr_blob_free(b);
		return r;
	}
	return s->ops->get_blob(s, name, b, tail, h, e);
}

int dcr_store_get_range(struct dcr_store *s, const char *name, uint64_t off,
			size_t len, uint8_t *buf, struct dcr_err *e)
{
	return dcr_store_get_range_hashed(s, name, off, len, buf, NULL, 0, e);
}

int dcr_store_get_range_hashed(struct dcr_store *s, const char *name, uint64_t off,
			       size_t len, uint8_t *buf, const struct dcr_hasher *h, int fresh,
			       struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	return s->ops->get_range(s, name, off, len, buf, h, fresh, e);
}

int dcr_store_get_to_fd(struct dcr_store *s, const char *name, int fd,
			uint64_t *size, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	return s->ops->get_to_fd(s, name, fd, size, e);
}

int dcr_store_stat(struct dcr_store *s, const char *name, uint64_t *size,
		   struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	return s->ops->stat(s, name, size, e);
}

int dcr_store_list(struct dcr_store *s, const char *prefix, char ***names,
		   size_t *n, struct dcr_err *e)
{
	*names = NULL;
	*n = 0;
	if (!prefix)
		prefix = "";
	int r = dcr_store_check_prefix(prefix, e);
	if (r)
		return r;
	struct dcr_names l = {0};
	r = s->ops->list(s, prefix, &l, e);
	if (r) {
		dcr_store_names_free(l.v, l.n);
		return r;
	}
	dcr_names_sort(&l);
	/* Drop duplicates (a server listing twice across pages). */
	size_t w = 0;
	for (size_t i = 0; i < l.n; i++) {
		if (w && !strcmp(l.v[w - 1], l.v[i]))
			free(l.v[i]);
		else
			l.v[w++] = l.v[i];
	}
	*names = l.v;
	*n = w;
	return 0;
}

int dcr_store_delete(struct dcr_store *s, const char *name, struct dcr_err *e)
{
	int r = dcr_store_check_name(name, e);
	if (r)
		return r;
	return s->ops->delete(s, name, e);
}

/* ---- job pool -------------------------------------------------------- */

enum { JOB_QUEUED = 1, JOB_RUNNING, JOB_DONE };

static void run_job(struct dcr_store *s, struct dcr_store_job *j)
{
	struct dcr_err *e = &j->err;
	e->code = 0;
	e->msg[0] = '\0';
	switch (j->op) {
	case DCR_STORE_PUT:
		j->rc = dcr_store_put(s, j->name, j->data, j->len, e);
		break;
	case DCR_STORE_PUT_FILE:
		j->rc = dcr_store_put_file(s, j->name, j->path, e);
		break;
	case DCR_STORE_PUT_IF_ABSENT:
		j->rc = dcr_store_put_if_absent(s, j->name, j->data, j->len, e);
		break;
	case DCR_STORE_GET:
		j->rc = dcr_store_get(s, j->name, &j->buf, &j->buf_len, e);
		break;
	case DCR_STORE_GET_RANGE:
		j->rc = dcr_store_get_range(s, j->name, j->off, j->len, j->dst, e);
		break;
	case DCR_STORE_GET_TO_FD:
		j->rc = dcr_store_get_to_fd(s, j->name, j->fd, &j->size, e);
		break;
	case DCR_STORE_STAT:
		j->rc = dcr_store_stat(s, j->name, &j->size, e);
		break;
	case DCR_STORE_DELETE:
		j->rc = dcr_store_delete(s, j->name, e);
		break;
	default:
		j->rc = dcr_err_set(e, -EINVAL, "unknown store job type %d", j->op);
	}
}

static void *worker(void *arg)
{
	struct dcr_store *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->cv_work, &s->mu);
		if (!s->head)
			break; /* stopping, queue drained */
		struct dcr_store_job *j = s->head;
		s->head = j->next_;
		if (!s->head)
			s->tail = NULL;
		j->state_ = JOB_RUNNING;
		pthread_mutex_unlock(&s->mu);
		run_job(s, j);
		pthread_mutex_lock(&s->mu);
		j->state_ = JOB_DONE;
		pthread_cond_broadcast(&s->cv_done);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int dcr_store_submit(struct dcr_store *s, struct dcr_store_job *j,
		     struct dcr_err *e)
{
	pthread_mutex_lock(&s->mu);
	if (!s->threads) {
		s->threads = dcr_calloc((size_t)s->o.parallel, sizeof(*s->threads));
		if (!s->threads) {
			pthread_mutex_unlock(&s->mu);
			return dcr_err_sys(e, ENOMEM, "cannot start transfer threads");
		}
		for (int i = 0; i < s->o.parallel; i++) {
			int r = pthread_create(&s->threads[s->nthreads], NULL, worker, s);
			if (r) {
				if (!s->nthreads) {
					free(s->threads);
					s->threads = NULL;
					pthread_mutex_unlock(&s->mu);
					return dcr_err_sys(e, r, "cannot start transfer threads");
				}
				break; /* run with fewer */
			}
			s->nthreads++;
		}
	}
	j->next_ = NULL;
	j->state_ = JOB_QUEUED;
	j->rc = 0;
	if (s->tail)
		s->tail->next_ = j;
	else
		s->head = j;
	s->tail = j;
	pthread_cond_signal(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int dcr_store_wait(struct dcr_store *s, struct dcr_store_job *j)
{
	pthread_mutex_lock(&s->mu);
	while (j->state_ == JOB_QUEUED || j->state_ == JOB_RUNNING)
		pthread_cond_wait(&s->cv_done, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return j->rc;
}

int dcr_store_run(struct dcr_store *s, struct dcr_store_job *jobs, size_t n,
		  struct dcr_err *e)
{
	size_t queued = 0;
	int r = 0;
	for (; queued < n; queued++)
		if ((r = dcr_store_submit(s, &jobs[queued], e)))
			break;
	int first = 0;
	for (size_t i = 0; i < queued; i++) {
		int jr = dcr_store_wait(s, &jobs[i]);
		if (jr && !first) {
			first = jr;
			if (e)
				*e = jobs[i].err;
		}
	}
	return r ? r : first;
}
