/* relay.c - dcr-relay: a node of a relay tree (see relay.h).
 *
 * Threads: libmicrohttpd's pool serves the children (epoll, one thread per
 * core of the pool, never one per connection); `parallel` fetch workers
 * bring payloads from the parents; four meta workers run the short jobs
 * (manifests, listings, HEADs, objects passed through).
 *
 * A request waits without a thread: it parks (MHD_suspend_connection)
 * until the object it reads has news, and the fetcher that publishes the
 * news resumes it. One mutex guards the table, the queues and every
 * object's state; libmicrohttpd is never called with it held.
 *
 * An object's bytes go to its spool file only once checked, so what a
 * reader finds in [0, ready) is verified: pieces as they arrive (manifest
 * piece table), or the whole object at once (its trailer). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <jansson.h>
#include <microhttpd.h>

#include "core/blake3.h"
#include "core/buf.h"
#include "core/dynlib.h"
#include "core/file.h"
#include "core/manifest.h"
#include "core/payload.h"
#include "core/util.h"
#include "core/sign.h"
#include "core/trust.h"
#include "transport/relay.h"

#define RESP_BLOCK (256u << 10) /* bytes per response buffer */
#define META_THREADS 4
#define TABLE_MIN 1024 /* buckets at start; the table doubles as it fills */
/* objects in the table: finished ones past it are dropped as those past
 * the cache size are (each costs a few hundred bytes of memory, however
 * small it is on disk) */
#define OBJ_MAX (1u << 18)
#define PREFETCH_STEP 256 /* payload names looked at per hold of the lock */
/* objects passed through (not pack members): the most bytes one GET
 * brings (a range of a larger object is fine), and all of them held in
 * temporary files at once, outside the cache */
#define PASS_MAX (256ull << 20)
#define PASS_HELD (1ull << 30)
#define ROUNDS 2 /* each parent is tried this many times per object */

enum { O_NEW, O_QUEUED, O_FETCHING, O_DONE, O_FAILED };
static const char *const state_name[] = {"new", "queued", "fetching", "done", "failed"};
enum { V_NONE, V_PIECES, V_WHOLE, V_MANIFEST };
static const char *const check_name[] = {"none", "pieces", "whole", "manifest"};

struct parent {
	struct dcr_store *s;
	char *url;
	uint64_t bytes;
	unsigned failures;
};

/* A pack (a version): NAME of NAME/manifest.dcrm. It lives as long as
 * objects of it do. */
struct rpack {
	char *name;
	struct dcr_manifest m;
	int have_m;
	uint8_t mtrailer[32]; /* of the manifest loaded */
	/* the manifest's signature, fetched with it (sig_known: 1 held, 2 the
	 * pack has none) and answered from here; 0 unknown: passed through */
	uint8_t *sig;
	size_t sig_len;
	int sig_known;
	uint64_t seq;	      /* creation order: the oldest are dropped first */
	unsigned nobj;	      /* objects that point here */
	struct robj *objs, *objs_tail; /* those in the table, oldest first */
	/* prefetch: the manifest's payloads from position pf_next on are
	 * still to be fetched (while pf_on) */
	uint32_t pf_next;
	int pf_on;
	struct rpack *next; /* oldest first */
};

struct robj {
	char *name;
	struct rpack *pack;
	long idx; /* payload index; -1: the manifest */
	int state, in_table, refs;
	uint64_t size, ready; /* [0, ready) is checked and in the spool */
	int have_size;
	int fd; /* the fetcher's, while it fetches; readers open their own */
	char *path, *tmp; /* spool: final name, temporary name while fetching */
	uint64_t counted; /* bytes counted in the cache */
	dcr_digest digest;
	int have_digest, check;
	struct dcr_err err;
	uint64_t seq;
	int src; /* parent it came from, -1: the cache */
	unsigned failovers;
	int was_lost; /* fetched again: its cached file had gone (1) or was
		       * damaged (2) */
	int damaged, rechecking; /* a child's fresh request found its file
				    bad; one such check at a time */
	double t_checked; /* when that check last ran */
	double t_fetch0, t_fetched;
	/* children */
	unsigned active, children, wave_children;
	uint64_t served, wave_bytes;
	double wave_t0;
	unsigned hash;
	struct robj *hnext, *qnext;
	struct robj *pk_prev, *pk_next; /* the pack's objects in the table */
};

enum { Q_NONE, Q_OBJ, Q_LIST, Q_PASS, Q_DONE };
enum { W_NONE, W_PARKING, W_SUSPENDED, W_WOKEN };

struct rreq {
	struct dcr_relay *r;
	struct MHD_Connection *conn;
	int kind, head, reject, started, responding;
	char *name;   /* object name, or the listed directory ("" or "a/b/") */
	char *prefix; /* listing: the whole prefix asked for */
	char *range, *if_match; /* the request's headers (or NULL) */
	int fresh; /* Cache-Control or Pragma: no-cache */
	struct robj *o;
	int fd; /* o's spool file, opened for this response */
	uint64_t start, len, sent;
	int status;
	/* parking */
	int wstate;
	const void *wfor;
	struct rreq *pnext, *pprev, *rnext;
	/* a meta job's result (Q_LIST, Q_PASS) */
	int trc;
	struct dcr_err terr;
	char *body;
	size_t body_len;
	int tfd;	   /* Q_PASS: the bytes to send, from offset 0 */
	uint64_t tsize;	   /* Q_PASS: the object's size */
	int tstatus;	   /* Q_PASS: the status to answer */
	uint64_t held;	   /* Q_PASS: bytes counted in r->pass_held */
	struct rreq *tnext;
};

struct dcr_relay {
	struct dcr_relay_opts o;
	struct parent *parents;
	size_t np;
	size_t good; /* the parent that served last: fetches start there */
	char *spool; /* cache directory or our temporary one */
	int spool_temp;
	int lock_fd; /* --cache: DIR/.lock, flock(2)ed while the relay runs */
	uint64_t cache_size, cache_bytes, window;
	struct MHD_Daemon *d;
	unsigned port;
	char listen[160];

	pthread_mutex_t mu;
	pthread_cond_t cv;  /* any object's news, for blocking readers */
	pthread_cond_t fcv; /* fetch queue */
	pthread_cond_t mcv; /* meta queue */
	int stopping;
	struct robj **tab; /* tab_size buckets (a power of 2), tab_n objects */
	size_t tab_size, tab_n;
	struct rpack *packs, *packs_tail;
	uint64_t seq;
	struct robj *fq, *fq_tail; /* payloads to fetch */
	struct robj *mq;	   /* manifests to fetch */
	struct rreq *mreq, *mreq_tail; /* listings and objects passed through */
	struct rreq *parked;
	uint64_t pass_held; /* bytes of objects passed through, in flight */
	int pulls; /* dcr_relay_pull calls in progress */
	pthread_t *workers;
	int nworkers;

	/* totals */
	uint64_t requests, errors, cut, bytes_served, fetched;
	uint64_t disk_drops; /* objects dropped because the disk was full */
	uint64_t lost; /* finished objects whose spool file had gone */
	uint64_t damaged; /* finished objects a fresh request found damaged */
};

/* libmicrohttpd, loaded when the first relay starts (core/dynlib.h): with
 * it come GnuTLS and its libraries, which no other command needs */
static struct {
	__typeof__(MHD_add_response_header) *add_response_header;
	__typeof__(MHD_queue_response) *queue_response;
	__typeof__(MHD_destroy_response) *destroy_response;
	__typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
	__typeof__(MHD_lookup_connection_value) *lookup_connection_value;
	__typeof__(MHD_suspend_connection) *suspend_connection;
	__typeof__(MHD_resume_connection) *resume_connection;
	__typeof__(MHD_get_daemon_info) *get_daemon_info;
	__typeof__(MHD_create_response_from_callback) *create_response_from_callback;
	__typeof__(MHD_create_response_from_fd_at_offset64) *create_response_from_fd_at_offset64;
	__typeof__(MHD_stop_daemon) *stop_daemon;
	__typeof__(MHD_start_daemon) *start_daemon;
	__typeof__(MHD_is_feature_supported) *is_feature_supported;
} mh;

static pthread_once_t mh_once = PTHREAD_ONCE_INIT;
static int mh_rc;
static struct dcr_err mh_err;
static void mh_load(void)
{
	static const char *const so[] = {"libmicrohttpd.so.12", "libmicrohttpd.so", NULL};
	const struct dcr_dynsym sym[] = {
		{"MHD_add_response_header", &mh.add_response_header},
		{"MHD_queue_response", &mh.queue_response},
		{"MHD_destroy_response", &mh.destroy_response},
		{"MHD_create_response_from_buffer", &mh.create_response_from_buffer},
		{"MHD_lookup_connection_value", &mh.lookup_connection_value},
		{"MHD_suspend_connection", &mh.suspend_connection},
		{"MHD_resume_connection", &mh.resume_connection},
		{"MHD_get_daemon_info", &mh.get_daemon_info},
		{"MHD_create_response_from_callback", &mh.create_response_from_callback},
		{"MHD_create_response_from_fd_at_offset64", &mh.create_response_from_fd_at_offset64},
		{"MHD_stop_daemon", &mh.stop_daemon},
		{"MHD_start_daemon", &mh.start_daemon},
		{"MHD_is_feature_supported", &mh.is_feature_supported},
	};
	mh_rc = dcr_dynlib_load("for the relay", so, sym, sizeof(sym) / sizeof(sym[0]), &mh_err);
}

static void say(struct dcr_relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct dcr_relay *r, const char *fmt, ...)
{
	if (!r->o.log)
		return;
	char line[1400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	r->o.log(r->o.log_ctx, line);
}

/* With trusted keys: nothing of a pack is taken before its manifest,
 * signed by one of them. */
static int trusting(const struct dcr_relay *r)
{
	return r->o.trust && r->o.trust->nkeys;
}

/* The parent fetches start at: the last that served (atomic: read
 * without the lock). */
static size_t good(struct dcr_relay *r)
{
	return __atomic_load_n(&r->good, __ATOMIC_RELAXED);
}

/* o came whole from parent i: the next fetches start there too. */
static void came_from(struct dcr_relay *r, struct robj *o, size_t i)
{
	pthread_mutex_lock(&r->mu);
	o->src = (int)i;
	pthread_mutex_unlock(&r->mu);
	__atomic_store_n(&r->good, i, __ATOMIC_RELAXED);
}

/* ---- parking: requests that wait without a thread ---- */

/* Under mu: q is to be suspended until `what` has news. The caller
 * unlocks and then calls park_finish. */
static void park(struct dcr_relay *r, struct rreq *q, const void *what)
{
	q->wstate = W_PARKING;
	q->wfor = what;
	q->pprev = NULL;
	q->pnext = r->parked;
	if (r->parked)
		r->parked->pprev = q;
	r->parked = q;
}

static void park_finish(struct dcr_relay *r, struct rreq *q)
{
	mh.suspend_connection(q->conn);
	pthread_mutex_lock(&r->mu);
	if (q->wstate == W_WOKEN) {
		/* the news came before the suspension */
		q->wstate = W_NONE;
		pthread_mutex_unlock(&r->mu);
		mh.resume_connection(q->conn);
		return;
	}
	q->wstate = W_SUSPENDED;
	pthread_mutex_unlock(&r->mu);
}

/* Under mu: unpark the requests waiting for what (NULL: all); those that
 * are suspended come back chained by rnext, to resume once unlocked. */
static struct rreq *wake(struct dcr_relay *r, const void *what)
{
	struct rreq *l = NULL, *q = r->parked, *next;
	for (; q; q = next) {
		next = q->pnext;
		if (what && q->wfor != what)
			continue;
		if (q->pprev)
			q->pprev->pnext = q->pnext;
		else
			r->parked = q->pnext;
		if (q->pnext)
			q->pnext->pprev = q->pprev;
		q->pnext = q->pprev = NULL;
		if (q->wstate == W_PARKING) {
			q->wstate = W_WOKEN;
		} else if (q->wstate == W_SUSPENDED) {
			q->wstate = W_NONE;
			q->rnext = l;
			l = q;
		}
	}
	return l;
}

static void resume_all(struct rreq *l)
{
	while (l) {
		struct rreq *next = l->rnext;
		mh.resume_connection(l->conn);
		l = next;
	}
}

/* ---- the table ---- */

static unsigned hash_name(const char *s)
{
	unsigned h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

static struct rpack *pack_get(struct dcr_relay *r, const char *name, size_t n)
{
	for (struct rpack *p = r->packs; p; p = p->next)
		if (strlen(p->name) == n && !memcmp(p->name, name, n))
			return p;
	struct rpack *p = dcr_calloc(1, sizeof(*p));
	if (!p || !(p->name = strndup(name, n))) {
		free(p);
		return NULL;
	}
	p->seq = ++r->seq;
	if (r->packs_tail)
		r->packs_tail->next = p;
	else
		r->packs = p;
	r->packs_tail = p;
	return p;
}

static void pack_put(struct dcr_relay *r, struct rpack *p)
{
	if (!p || --p->nobj)
		return;
	struct rpack *prev = NULL;
	for (struct rpack **pp = &r->packs; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			if (r->packs_tail == p)
				r->packs_tail = prev;
			break;
		}
	if (p->have_m)
		dcr_manifest_release(&p->m);
	free(p->sig);
	free(p->name);
	free(p);
}

/* Which pack member a name is: 1 (pack name length in *plen, payload index
 * or -1 in *idx), or 0 for any other object. */
static int pack_member(const char *name, size_t *plen, long *idx)
{
	const char *b = strrchr(name, '/');
	if (!b || b == name)
		return 0;
	uint32_t i;
	if (!strcmp(b + 1, DCR_MANIFEST_NAME))
		*idx = -1;
	else if (dcr_payload_name_parse(b + 1, &i))
		*idx = i;
	else
		return 0;
	*plen = (size_t)(b - name);
	return 1;
}

static struct robj **bucket(struct dcr_relay *r, unsigned hash)
{
	return &r->tab[hash & (r->tab_size - 1)];
}

static struct robj *tab_find(struct dcr_relay *r, const char *name)
{
	unsigned h = hash_name(name);
	for (struct robj *o = *bucket(r, h); o; o = o->hnext)
		if (o->hash == h && !strcmp(o->name, name))
			return o;
	return NULL;
}

/* Twice the buckets, when memory allows (else the chains grow). */
static void tab_grow(struct dcr_relay *r)
{
	size_t n = r->tab_size * 2;
	struct robj **t = n > r->tab_size ? dcr_calloc(n, sizeof(*t)) : NULL;
	if (!t)
		return;
	for (size_t h = 0; h < r->tab_size; h++)
		for (struct robj *o = r->tab[h], *next; o; o = next) {
			next = o->hnext;
			o->hnext = t[o->hash & (n - 1)];
			t[o->hash & (n - 1)] = o;
		}
	free(r->tab);
	r->tab = t;
	r->tab_size = n;
}

static void tab_insert(struct dcr_relay *r, struct robj *o)
{
	struct rpack *p = o->pack;
	o->hash = hash_name(o->name);
	o->hnext = *bucket(r, o->hash);
	*bucket(r, o->hash) = o;
	o->pk_prev = p->objs_tail;
	o->pk_next = NULL;
	if (p->objs_tail)
		p->objs_tail->pk_next = o;
	else
		p->objs = o;
	p->objs_tail = o;
	o->in_table = 1;
	if (++r->tab_n > r->tab_size)
		tab_grow(r);
}

static void tab_remove(struct dcr_relay *r, struct robj *o)
{
	if (!o->in_table)
		return;
	for (struct robj **pp = bucket(r, o->hash); *pp; pp = &(*pp)->hnext)
		if (*pp == o) {
			*pp = o->hnext;
			break;
		}
	struct rpack *p = o->pack;
	if (o->pk_prev)
		o->pk_prev->pk_next = o->pk_next;
	else
		p->objs = o->pk_next;
	if (o->pk_next)
		o->pk_next->pk_prev = o->pk_prev;
	else
		p->objs_tail = o->pk_prev;
	o->pk_prev = o->pk_next = NULL;
	o->in_table = 0;
	o->hnext = NULL;
	r->tab_n--;
}

static void obj_free(struct dcr_relay *r, struct robj *o)
{
	if (o->fd >= 0)
		close(o->fd);
	pack_put(r, o->pack);
	free(o->name);
	free(o->path);
	free(o->tmp);
	free(o);
}

/* Under mu: drop a reference. An object out of the table goes with its
 * last one (its spool file was removed when it left). */
static void obj_put(struct dcr_relay *r, struct robj *o)
{
	if (--o->refs == 0)
		obj_free(r, o);
}

/* Under mu: take o out of the table and its file out of the spool. */
static void obj_drop(struct dcr_relay *r, struct robj *o)
{
	if (!o->in_table)
		return;
	tab_remove(r, o);
	if (o->tmp)
		unlink(o->tmp);
	else if (o->path && o->state == O_DONE)
		unlink(o->path);
	r->cache_bytes -= o->counted;
	o->counted = 0;
	obj_put(r, o);
}

/* Under mu: the object named name, created (in state O_NEW) when absent.
 * NULL with *code set: DCR_ENOTFOUND for a payload outside its pack's
 * manifest, -ENOMEM. */
/* The position in manifest m of the payload with index idx (its entry
 * name's), or -1: a pack of several producers has an index table. */
static long mpos(const struct dcr_manifest *m, long idx)
{
	return idx < 0 || idx > (long)UINT32_MAX ? -1 : (long)dcr_manifest_find(m, (uint32_t)idx);
}

/* Under mu: 1 if o is finished but its spool file is gone or not its
 * size (removed under the relay: a cleaner of /tmp, an operator freeing
 * the disk), so that it must be fetched again. */
static int obj_lost(const struct robj *o)
{
	const char *path = o->tmp ? o->tmp : o->path;
	struct stat st;
	return o->state == O_DONE && path &&
	       (o->damaged || stat(path, &st) || (o->have_size && (uint64_t)st.st_size != o->size));
}

static struct robj *obj_get(struct dcr_relay *r, const char *name, int *code)
{
	struct robj *o = tab_find(r, name);
	int lost = o && obj_lost(o);
	if (o && !lost)
		return o;
	if (lost) {
		lost += o->damaged;
		obj_drop(r, o); /* (readers that have it keep their reference) */
		if (lost == 2)
			r->damaged++;
		else
			r->lost++;
	}
	size_t plen;
	long idx;
	if (!pack_member(name, &plen, &idx)) {
		*code = DCR_EFORMAT;
		return NULL;
	}
	struct rpack *p = pack_get(r, name, plen);
	if (!p) {
		*code = -ENOMEM;
		return NULL;
	}
	if (idx >= 0 && p->have_m && mpos(&p->m, idx) < 0) {
		*code = DCR_ENOTFOUND;
		p->nobj++;
		pack_put(r, p);
		return NULL;
	}
	o = dcr_calloc(1, sizeof(*o));
	if (!o || !(o->name = dcr_strdup(name))) {
		free(o);
		*code = -ENOMEM;
		p->nobj++;
		pack_put(r, p);
		return NULL;
	}
	o->pack = p;
	p->nobj++;
	o->idx = idx;
	o->fd = -1;
	o->src = -1;
	o->seq = ++r->seq;
	if (idx >= 0 && p->have_m) {
		o->size = p->m.psize[mpos(&p->m, idx)];
		o->have_size = 1;
	}
	o->refs = 1; /* the table's */
	o->was_lost = lost;
	tab_insert(r, o);
	return o;
}

/* Under mu: a descriptor of o's spool file of its own, to read o's
 * checked bytes from, or -1 (errno set). The fetcher's is closed once o
 * is done: a finished object holds no open file. */
static int obj_open(const struct robj *o)
{
	const char *path = o->tmp ? o->tmp : o->path;
	if (!path) {
		errno = ENOENT;
		return -1;
	}
	return open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/* ---- the cache ---- */

/* Under mu: the finished, unused object to drop first: of the oldest
 * pack, its oldest; a manifest last of its pack. */
static struct robj *victim(struct dcr_relay *r)
{
	for (struct rpack *p = r->packs; p; p = p->next)
		for (struct robj *o = p->objs; o; o = o->pk_next)
			if (o->state == O_DONE && o->refs == 1 && o->counted &&
			    (o->idx >= 0 || p->nobj == 1))
				return o;
	return NULL;
}

/* Under mu: no room for need more bytes, or too many objects. */
static int cache_full(const struct dcr_relay *r, uint64_t need)
{
	return r->cache_bytes + need > r->cache_size || r->tab_n > OBJ_MAX;
}

/* 1 if the spool's filesystem has less than need bytes free beyond the
 * share it keeps free for whoever else writes there (1/50 of it, at most
 * 4 GiB: dcr_fs_room), so that a cache size larger than the disk holds
 * does not fill it; 0 if it has them or cannot tell. */
static int disk_short(const struct dcr_relay *r, uint64_t need)
{
	uint64_t room, keep;
	if (dcr_fs_room(-1, r->spool, 0, &room, &keep))
		return 0;
	return room < keep || room - keep < need;
}

/* Under mu: drop finished, unused objects, oldest packs first, until need
 * more bytes fit, in the cache size and on the spool's filesystem, and
 * the table is within OBJ_MAX (or nothing more can go). */
static void make_room(struct dcr_relay *r, uint64_t need)
{
	struct robj *o;
	while (cache_full(r, need) && (o = victim(r)))
		obj_drop(r, o);
	while (disk_short(r, need) && (o = victim(r))) {
		obj_drop(r, o);
		r->disk_drops++;
	}
}

/* Write n bytes at off into o's spool file. Where the filesystem is full
 * all the same (objects fetched at once, each counted before its bytes
 * come; another writer), drop finished, unused objects, oldest packs
 * first, and write again, until it fits or nothing is left to drop.
 * 0, or an errno value. */
static int spool_write(struct dcr_relay *r, struct robj *o, const void *p, size_t n,
		       uint64_t off)
{
	for (;;) {
		if (!dcr_pwrite_full(o->fd, p, n, off))
			return 0;
		int err = errno;
		if (err != ENOSPC && err != EDQUOT)
			return err;
		pthread_mutex_lock(&r->mu);
		struct robj *v = victim(r);
		if (v) {
			obj_drop(r, v);
			r->disk_drops++;
		}
		pthread_mutex_unlock(&r->mu);
		if (!v)
			return err;
	}
}

/* The error of a spool write that failed with err. */
static int spool_err(const struct robj *o, int err, struct dcr_err *e)
{
	if (err == ENOSPC || err == EDQUOT)
		return dcr_err_sys(e, err,
				   "cannot write '%s' (the cache's filesystem is full, and nothing finished and unused is left in it to drop)",
				   o->tmp);
	return dcr_err_sys(e, err, "cannot write '%s'", o->tmp);
}

/* Under mu: count o's bytes in the cache (once its size is known). */
static void count_obj(struct dcr_relay *r, struct robj *o)
{
	if (o->counted || !o->have_size)
		return;
	make_room(r, o->size);
	o->counted = o->size ? o->size : 1;
	r->cache_bytes += o->counted;
}

/* Create o's spool file (a temporary name beside its final one). */
static int spool_open(struct dcr_relay *r, struct robj *o, struct dcr_err *e)
{
	if (o->fd >= 0)
		return 0;
	char *path = dcr_path_join(r->spool, o->name);
	char *dir = path ? dcr_dirname(path) : NULL;
	char *tmp = path ? dcr_asprintf("%s.tmp.XXXXXX", path) : NULL;
	int rc = 0;
	if (!path || !dir || !tmp) {
		rc = dcr_err_sys(e, ENOMEM, "relay");
	} else if (!(rc = dcr_mkdir_p(dir, e))) {
		int fd = mkostemp(tmp, O_CLOEXEC);
		if (fd < 0) {
			rc = dcr_err_sys(e, errno, "cannot create '%s'", tmp);
		} else {
			pthread_mutex_lock(&r->mu);
			o->fd = fd;
			o->path = path;
			o->tmp = tmp;
			pthread_mutex_unlock(&r->mu);
			path = tmp = NULL;
		}
	}
	free(path);
	free(dir);
	free(tmp);
	return rc;
}

/* ---- publishing ---- */

/* Under mu: the line that ends a wave of children reading o, if one does. */
static int wave_line(struct dcr_relay *r, struct robj *o, char *line, size_t n)
{
	if (o->state != O_DONE || o->active || !o->wave_children)
		return 0;
	const char *from = o->src >= 0 ? r->parents[o->src].url : "the cache";
	snprintf(line, n, "served '%s': %llu bytes to %u %s (%llu bytes sent) in %.2f s, from '%s'%s",
		 o->name, (unsigned long long)o->size, o->wave_children,
		 o->wave_children == 1 ? "child" : "children", (unsigned long long)o->wave_bytes,
		 dcr_now_s() - o->wave_t0, from,
		 o->failovers ? " after a failover"
		 : o->was_lost == 2 && o->src >= 0 ? " again (its file in the cache was damaged)"
		 : o->was_lost && o->src >= 0 ? " again (its file in the cache had gone)" : "");
	o->wave_children = 0;
	o->wave_bytes = 0;
	return 1;
}

/* News of o: its checked bytes reach ready (if more), its state becomes
 * state (unless 0); wake whoever waits for it. */
static void publish(struct dcr_relay *r, struct robj *o, uint64_t ready, int state)
{
	char line[1400];
	int have_line = 0;
	pthread_mutex_lock(&r->mu);
	if (o->state == O_FAILED)
		ready = state = 0; /* revoked */
	if (ready > o->ready)
		o->ready = ready;
	if (state)
		o->state = state;
	if (state == O_DONE)
		have_line = wave_line(r, o, line, sizeof(line));
	struct rreq *l = wake(r, o);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	resume_all(l);
	if (have_line)
		say(r, "%s", line);
}

/* ---- fetching: manifests ---- */

/* Under mu: o's bytes turned out not to be its pack's (its manifest came
 * and says otherwise): no reader gets another byte of them, the object
 * leaves the table and the cache, and a fetch in flight ends failed (see
 * fetch_obj). Its waiters are added to *l, to resume once unlocked. */
static void obj_revoke(struct dcr_relay *r, struct robj *o, int code, const char *why,
		   struct rreq **l)
{
	o->refs++;
	obj_drop(r, o);
	o->ready = 0;
	o->state = O_FAILED;
	dcr_err_set(&o->err, code, "'%s' %s", o->name, why);
	for (struct rreq *w = wake(r, o), *next; w; w = next) {
		next = w->rnext;
		w->rnext = *l;
		*l = w;
	}
	obj_put(r, o);
}

/* Under mu: a manifest arrived for p: give its payloads their sizes,
 * revoke payloads checked whole before it (done, or checked and not yet
 * done) that it does not list with that digest, and have the fetch
 * workers prefetch the pack's payloads (prefetch_next). Requests to
 * resume come back. */
static struct rreq *manifest_loaded(struct dcr_relay *r, struct rpack *p)
{
	struct rreq *l = NULL;
	for (struct robj *o = p->objs, *next; o; o = next) {
		next = o->pk_next;
		if (o->idx < 0)
			continue;
		long at = mpos(&p->m, o->idx);
		if (at < 0) {
			obj_revoke(r, o, DCR_ENOTFOUND, "is not in its pack's manifest", &l);
			continue;
		}
		if (!o->have_size) {
			o->size = p->m.psize[at];
			o->have_size = 1;
		}
		if (o->have_digest && o->check == V_WHOLE &&
		    (o->size != p->m.psize[at] || memcmp(o->digest.b, p->m.pdigest[at].b, 32)))
			obj_revoke(r, o, DCR_EDIGEST, "does not match the manifest's digest", &l);
	}
	if (!r->o.no_prefetch && p->m.npayloads) {
		p->pf_on = 1;
		pthread_cond_broadcast(&r->fcv);
	}
	return l;
}

/* Under mu: the next payload to prefetch (a reference to it taken, in
 * state O_NEW), of the oldest pack that has one; NULL when there is none
 * now, with *more set when the caller should ask again once it has let
 * go of the lock: at most PREFETCH_STEP names are looked at per call, so
 * a manifest of many payloads never holds the lock long. A pack's
 * prefetch stops where the cache has no room (those payloads are fetched
 * when asked for). */
static struct robj *prefetch_next(struct dcr_relay *r, int *more)
{
	struct rpack *p = r->packs;
	while (p && !p->pf_on)
		p = p->next;
	*more = 0;
	if (!p)
		return NULL;
	for (int k = 0; k < PREFETCH_STEP; k++) {
		if (p->pf_next >= p->m.npayloads) {
			p->pf_on = 0;
			break;
		}
		char *en = dcr_payload_name(dcr_manifest_index(&p->m, p->pf_next));
		char *name = en ? dcr_asprintf("%s/%s", p->name, en) : NULL;
		free(en);
		int code;
		struct robj *o = name ? obj_get(r, name, &code) : NULL;
		free(name);
		if (!o) {
			p->pf_on = 0; /* out of memory */
			break;
		}
		p->pf_next++;
		if (o->state != O_NEW)
			continue;
		make_room(r, o->size);
		if (cache_full(r, o->size)) {
			if (o->refs == 1 && !o->active)
				obj_drop(r, o); /* nobody asked: leave it for later */
			p->pf_on = 0;
			break;
		}
		o->refs++; /* the fetcher's */
		count_obj(r, o);
		return o;
	}
	*more = 1;
	return NULL;
}

/* The signature of pack's manifest at parent pa, into *sig (NULL and 0
 * when the pack is unsigned there): no more than DCR_SIG_MAX bytes of it
 * taken, whatever the parent sends (dcr_store_get_small). */
static int get_sig(struct parent *pa, const char *pack, uint8_t **sig, size_t *len,
		   struct dcr_err *e)
{
	char *sn = dcr_asprintf("%s/%s", pack, DCR_MANIFEST_SIG_NAME);
	*sig = NULL;
	*len = 0;
	if (!sn)
		return dcr_err_sys(e, ENOMEM, "relay");
	int rc = dcr_store_get_small(pa->s, sn, DCR_SIG_MAX, "a signature", sig, len, e);
	free(sn);
	return rc;
}

/* The signature of the manifest man of pack at parent pa (when the
 * manifest names a version: an unversioned pack is never signed, or when
 * a key wants one), into *sig (NULL: none); with opts.trust the manifest
 * must be signed by a trusted key. */
static int trust_manifest(struct dcr_relay *r, struct parent *pa, const char *pack,
			  const uint8_t *man, size_t len, const struct dcr_manifest *m,
			  const char *url, uint8_t **sig, size_t *sig_len, struct dcr_err *e)
{
	const struct dcr_trust *t = r->o.trust;
	int keys = t && t->nkeys, rc = 0;
	*sig = NULL;
	*sig_len = 0;
	if ((m->have_version || keys) && !(rc = get_sig(pa, pack, sig, sig_len, e)) && keys)
		rc = dcr_trust_check(t, man, len, m, *sig, *sig_len, url ? url : pack, e);
	if (rc) {
		free(*sig);
		*sig = NULL;
	}
	return rc;
}

static int fetch_manifest(struct dcr_relay *r, struct robj *o, struct dcr_err *e)
{
	struct rpack *p = o->pack;
	int notfound = 0, failed = 0, rc = 0;
	int fresh = 0; /* after bad bytes: a parent relay checks its copy again */
	for (size_t t = 0; t < r->np * ROUNDS; t++) {
		if (t == r->np && !failed)
			break; /* every parent said "absent" */
		size_t i = (good(r) + t) % r->np;
		struct parent *pa = &r->parents[i];
		uint8_t *buf = NULL, *sig = NULL;
		size_t len = 0, sig_len = 0;
		struct dcr_err pe;
		struct dcr_manifest m;
		rc = fresh ? dcr_store_get_fresh(pa->s, o->name, &buf, &len, &pe)
			   : dcr_store_get(pa->s, o->name, &buf, &len, &pe);
		if (rc == DCR_ENOTFOUND) {
			notfound++;
			continue;
		}
		char *url = rc ? NULL : dcr_asprintf("%s/%s", pa->url, o->name);
		if (!rc) {
			rc = url ? dcr_manifest_parse(buf, len, url, &m, &pe)
				 : dcr_err_sys(&pe, ENOMEM, "relay");
			fresh |= rc == DCR_EDIGEST || rc == DCR_EFORMAT;
		}
		if (!rc && (rc = trust_manifest(r, pa, p->name, buf, len, &m, url, &sig, &sig_len,
						&pe)))
			dcr_manifest_release(&m);
		free(url);
		int werr;
		if (!rc && (rc = spool_open(r, o, &pe)) == 0 &&
		    (werr = spool_write(r, o, buf, len, 0)))
			rc = spool_err(o, werr, &pe);
		if (rc) {
			free(buf);
			free(sig);
			pthread_mutex_lock(&r->mu);
			pa->failures++;
			pthread_mutex_unlock(&r->mu);
			say(r, "warning: '%s' from '%s': %s", o->name, pa->url, pe.msg);
			*e = pe;
			failed++;
			continue;
		}
		pthread_mutex_lock(&r->mu);
		if (p->have_m && memcmp(p->mtrailer, buf + len - 32, 32)) {
			pthread_mutex_unlock(&r->mu);
			dcr_manifest_release(&m);
			free(buf);
			free(sig);
			return dcr_err_set(e, DCR_EDIGEST,
					   "the manifest of '%s' at '%s' is not the one this relay holds (a pack changed under its name)",
					   p->name, pa->url);
		}
		int fresh = !p->have_m;
		if (fresh) {
			p->m = m;
			p->have_m = 1;
			memcpy(p->mtrailer, buf + len - 32, 32);
			if (m.have_version || trusting(r)) {
				p->sig = sig;
				p->sig_len = sig_len;
				p->sig_known = sig ? 1 : 2;
				sig = NULL;
			}
		} else {
			dcr_manifest_release(&m);
		}
		free(sig);
		memcpy(o->digest.b, buf + len - 32, 32);
		o->have_digest = 1;
		o->check = V_MANIFEST;
		o->size = len;
		o->have_size = 1;
		o->src = (int)i;
		pa->bytes += len;
		r->fetched += len;
		__atomic_store_n(&r->good, i, __ATOMIC_RELAXED);
		count_obj(r, o);
		struct rreq *l = fresh ? manifest_loaded(r, p) : NULL;
		pthread_mutex_unlock(&r->mu);
		resume_all(l);
		free(buf);
		publish(r, o, len, 0);
		return 0;
	}
	if (!failed)
		return dcr_err_set(e, DCR_ENOTFOUND, "no '%s' at %s", o->name,
				   r->np == 1 ? "the parent" : "any parent");
	(void)notfound;
	return rc;
}

/* The pack's manifest, fetched here or waited for: 0 when the relay holds
 * it, else why not (DCR_ENOTFOUND: absent), in *me. Absent is fine
 * without keys (the payloads are then checked whole). */
static void fetch_obj(struct dcr_relay *r, struct robj *o, uint8_t *buf);
static int ensure_manifest(struct dcr_relay *r, struct rpack *p, uint8_t *buf,
			   struct dcr_err *me)
{
	pthread_mutex_lock(&r->mu);
	if (p->have_m) {
		pthread_mutex_unlock(&r->mu);
		return 0;
	}
	char *name = dcr_asprintf("%s/%s", p->name, DCR_MANIFEST_NAME);
	int code, rc;
	struct robj *mo = name ? obj_get(r, name, &code) : NULL;
	free(name);
	if (!mo) {
		pthread_mutex_unlock(&r->mu);
		return dcr_err_sys(me, ENOMEM, "relay");
	}
	mo->refs++;
	if (mo->state == O_NEW || mo->state == O_QUEUED) {
		mo->state = O_FETCHING; /* a queued job finds it taken */
		pthread_mutex_unlock(&r->mu);
		fetch_obj(r, mo, buf);
		pthread_mutex_lock(&r->mu);
	} else {
		while (mo->state != O_DONE && mo->state != O_FAILED && !r->stopping)
			pthread_cond_wait(&r->cv, &r->mu);
	}
	if (p->have_m)
		rc = 0;
	else if (mo->state == O_FAILED)
		rc = (*me = mo->err).code;
	else
		rc = dcr_err_set(me, -ECANCELED, "the relay is stopping");
	obj_put(r, mo);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* Why payload o of a pack without a trusted manifest is not served (mrc
 * and me: why the manifest is not here). */
static int untrusted(const struct robj *o, int mrc, const struct dcr_err *me, struct dcr_err *e)
{
	if (mrc == DCR_ENOTFOUND)
		return dcr_err_set(e, DCR_ENOTFOUND,
				   "pack '%s' has no signed manifest yet: with a trusted key, its payloads are served only after it",
				   o->pack->name);
	if (mrc == -ECANCELED)
		return dcr_err_set(e, mrc, "%s", me->msg);
	return dcr_err_set(e, mrc, "pack '%s' is not trusted: %s", o->pack->name, me->msg);
}

/* ---- fetching: payloads checked piece by piece ---- */

struct pcheck {
	struct dcr_relay *r;
	struct robj *o;
	struct dcr_piece_check pc;
	const uint8_t *buf; /* the window, from woff */
	uint64_t woff;
	long bad;
	int werr;
	struct dcr_err *e;
};

/* A dcr_hasher that checks a window's pieces as they arrive; each good
 * one goes into the spool and out to the children at once. */
static void pcheck_update(void *ctx, const void *p, size_t n)
{
	struct pcheck *c = ctx;
	const struct dcr_manifest *m = c->pc.m;
	const uint8_t *q = p;
	while (n && c->pc.pos < c->pc.end && c->bad < 0) {
		int ok;
		long k = dcr_piece_check_feed(&c->pc, &q, &n, &ok);
		if (k < 0)
			break;
		if (!ok) {
			c->bad = k;
			break;
		}
		uint64_t ps = (uint64_t)k << m->piece_log2, stop = c->pc.pos;
		int werr = spool_write(c->r, c->o, c->buf + (ps - c->woff), (size_t)(stop - ps), ps);
		if (werr) {
			c->werr = spool_err(c->o, werr, c->e);
			c->bad = k;
			break;
		}
		publish(c->r, c->o, stop, 0);
	}
}

/* Try the next parent after parent i failed with e; 0 if none is left. */
static int failover(struct dcr_relay *r, struct robj *o, size_t *i, size_t *t,
		    const struct dcr_err *e)
{
	struct parent *pa = &r->parents[*i];
	pthread_mutex_lock(&r->mu);
	pa->failures++;
	o->failovers++;
	uint64_t at = o->ready;
	pthread_mutex_unlock(&r->mu);
	if (++*t >= r->np * ROUNDS || r->stopping)
		return 0;
	size_t next = (*i + 1) % r->np;
	say(r, "warning: '%s' from '%s': %s; %s '%s' from byte %llu", o->name, pa->url, e->msg,
	    next == *i ? "retrying" : "trying", r->parents[next].url, (unsigned long long)at);
	*i = next;
	return 1;
}

static int fetch_pieces(struct dcr_relay *r, struct robj *o, const struct dcr_manifest *m,
			uint8_t *buf, struct dcr_err *e)
{
	uint64_t size = o->size, end = size - 32;
	uint64_t piece = (uint64_t)1 << m->piece_log2;
	uint64_t w = r->window < piece ? piece : r->window / piece * piece;
	size_t i = good(r), t = 0;
	int fresh = 0; /* after bad bytes: a parent relay checks its copy again */
	for (;;) {
		struct parent *pa = &r->parents[i];
		int rc = 0;
		while (!rc && o->ready < size) {
			if (r->stopping)
				return dcr_err_set(e, -ECANCELED, "'%s': the relay is stopping", o->name);
			uint64_t pos = o->ready, len = size - pos < w ? size - pos : w;
			if (pos + len < size && pos + len > end)
				len = end - pos; /* the trailer comes whole, on its own */
			struct pcheck c = {.r = r, .o = o, .buf = buf, .woff = pos, .bad = -1, .e = e};
			dcr_piece_check_init(&c.pc, m, (uint32_t)mpos(m, o->idx), pos);
			struct dcr_hasher h = {pcheck_update, &c};
			rc = dcr_store_get_range_hashed(pa->s, o->name, pos, (size_t)len, buf, &h, fresh,
							e);
			if (c.werr)
				return c.werr;
			if (!rc && c.bad >= 0)
				rc = dcr_err_set(e, DCR_EDIGEST,
						 "'%s/%s': piece %ld does not match the manifest",
						 pa->url, o->name, c.bad);
			if (!rc && c.pc.pos != (pos + len < end ? pos + len : end))
				rc = dcr_err_set(e, -EIO, "'%s/%s': the range at %llu was not hashed whole",
						 pa->url, o->name, (unsigned long long)pos);
			if (!rc && pos + len == size) {
				const uint8_t *tr = buf + (end - pos);
				int werr;
				if (DCR_CHECKSUM_DIFFERS(m->pdigest[mpos(m, o->idx)].b, tr))
					rc = dcr_err_set(e, DCR_EDIGEST,
							 "'%s/%s' is corrupt: checksum mismatch", pa->url,
							 o->name);
				else if ((werr = spool_write(r, o, tr, 32, end)))
					return spool_err(o, werr, e);
				else
					publish(r, o, size, 0);
			}
			if (!rc) {
				pthread_mutex_lock(&r->mu);
				pa->bytes += len;
				r->fetched += len;
				pthread_mutex_unlock(&r->mu);
			}
		}
		if (!rc) {
			came_from(r, o, i);
			return 0;
		}
		fresh |= rc == DCR_EDIGEST;
		if (!failover(r, o, &i, &t, e))
			return rc;
	}
}

/* ---- fetching: payloads checked whole (no piece table, or no manifest) ---- */

struct wcheck {
	struct dcr_payload_hash ph;
	uint64_t pos, end; /* next byte to hash, end of the hashed bytes */
	uint64_t fed;	   /* bytes of this window fed */
};

static void wcheck_update(void *ctx, const void *p, size_t n)
{
	struct wcheck *c = ctx;
	c->fed += n;
	if (c->pos < c->end) {
		size_t k = c->end - c->pos < n ? (size_t)(c->end - c->pos) : n;
		dcr_payload_hash_update(&c->ph, p, k);
	}
	c->pos += n;
}

static int whole_size(struct dcr_relay *r, struct robj *o, size_t *i, size_t *t,
		      struct dcr_err *e)
{
	for (;;) {
		uint64_t size;
		int rc = dcr_store_stat(r->parents[*i].s, o->name, &size, e);
		if (!rc && (size < DCR_PAYLOAD_HDR_LEN + 32 || size > DCR_PAYLOAD_MAX_FILE))
			rc = dcr_err_set(e, DCR_EFORMAT, "'%s/%s' is %llu bytes: not a payload",
					 r->parents[*i].url, o->name, (unsigned long long)size);
		if (!rc) {
			pthread_mutex_lock(&r->mu);
			o->size = size;
			o->have_size = 1;
			count_obj(r, o);
			pthread_mutex_unlock(&r->mu);
			publish(r, o, 0, 0);
			return 0;
		}
		if (rc == DCR_ENOTFOUND && *t + 1 >= r->np)
			return rc;
		if (!failover(r, o, i, t, e))
			return rc;
	}
}

static int whole_check(struct robj *o, struct wcheck *c, const char *url, dcr_digest *digest,
		       struct dcr_err *e)
{
	dcr_digest sum;
	uint8_t tr[32], head[DCR_PAYLOAD_HDR_LEN];
	if (dcr_payload_hash_final(&c->ph, &sum))
		return dcr_err_sys(e, ENOMEM, "relay");
	if (dcr_pread_full(o->fd, tr, 32, o->size - 32) ||
	    dcr_pread_full(o->fd, head, sizeof(head), 0))
		return dcr_err_sys(e, errno, "cannot read '%s'", o->tmp);
	struct dcr_payload pl;
	int rc = dcr_payload_check_head(head, sizeof(head), o->size, url, &pl, e);
	if (rc)
		return rc;
	dcr_payload_release(&pl);
	if (pl.index != (uint32_t)o->idx)
		return dcr_err_set(e, DCR_EFORMAT, "'%s' holds payload %u", url, pl.index);
	if (DCR_CHECKSUM_DIFFERS(sum.b, tr))
		return dcr_err_set(e, DCR_EDIGEST, "'%s' is corrupt: checksum mismatch", url);
	*digest = sum;
	return 0;
}

/* Under mu: o, checked whole with digest d, is what its pack's manifest
 * lists, when the relay holds one (it may have come during the fetch);
 * then its bytes are ready, in the same step, so that a manifest that
 * comes later finds it checked (manifest_loaded). */
static int whole_agrees(struct robj *o, const dcr_digest *d, const char *url, struct dcr_err *e)
{
	const struct rpack *p = o->pack;
	long at = p->have_m ? mpos(&p->m, o->idx) : 0;
	if (p->have_m && (at < 0 || o->size != p->m.psize[at] ||
			  memcmp(d->b, p->m.pdigest[at].b, 32)))
		return dcr_err_set(e, DCR_EDIGEST, "'%s' does not match the manifest's digest", url);
	o->digest = *d;
	o->have_digest = 1;
	return 0;
}

static int fetch_whole(struct dcr_relay *r, struct robj *o, uint8_t *buf, struct dcr_err *e)
{
	size_t i = good(r), t = 0;
	int rc;
	if (!o->have_size && (rc = whole_size(r, o, &i, &t, e)))
		return rc;
	struct wcheck c = {.end = o->size - 32};
	dcr_payload_hash_init(&c.ph);
	uint64_t pos = 0;
	int fresh = 0; /* after bad bytes: a parent relay checks its copy again */
	for (;;) {
		struct parent *pa = &r->parents[i];
		char *url = dcr_asprintf("%s/%s", pa->url, o->name);
		if (!url) {
			dcr_digest d;
			dcr_payload_hash_final(&c.ph, &d);
			return dcr_err_sys(e, ENOMEM, "relay");
		}
		rc = 0;
		while (!rc && pos < o->size) {
			if (r->stopping) {
				rc = dcr_err_set(e, -ECANCELED, "'%s': the relay is stopping", o->name);
				break;
			}
			uint64_t len = o->size - pos < r->window ? o->size - pos : r->window;
			c.fed = 0;
			struct dcr_hasher h = {wcheck_update, &c};
			rc = dcr_store_get_range_hashed(pa->s, o->name, pos, (size_t)len, buf, &h, fresh,
							e);
			uint64_t keep = rc ? c.fed : len; /* what was hashed, in order */
			int werr = keep ? spool_write(r, o, buf, (size_t)keep, pos) : 0;
			if (werr) {
				free(url);
				dcr_digest d;
				dcr_payload_hash_final(&c.ph, &d);
				return spool_err(o, werr, e);
			}
			pos += keep;
			if (!rc) {
				pthread_mutex_lock(&r->mu);
				pa->bytes += len;
				r->fetched += len;
				pthread_mutex_unlock(&r->mu);
			}
		}
		if (!rc) {
			dcr_digest sum;
			rc = whole_check(o, &c, url, &sum, e);
			if (!rc) {
				pthread_mutex_lock(&r->mu);
				rc = whole_agrees(o, &sum, url, e);
				if (!rc && o->state != O_FAILED)
					o->ready = o->size;
				pthread_mutex_unlock(&r->mu);
			}
			if (!rc) {
				free(url);
				came_from(r, o, i);
				publish(r, o, o->size, 0);
				return 0;
			}
			/* bad bytes somewhere: all of it again, from the next parent */
			fresh = 1;
			memset(&c, 0, sizeof(c));
			c.end = o->size - 32;
			dcr_payload_hash_init(&c.ph);
			pos = 0;
		}
		free(url);
		if (rc == -ECANCELED || !failover(r, o, &i, &t, e)) {
			dcr_digest d;
			dcr_payload_hash_final(&c.ph, &d); /* frees it */
			return rc;
		}
	}
}

static int fetch_payload(struct dcr_relay *r, struct robj *o, uint8_t *buf, struct dcr_err *e)
{
	struct rpack *p = o->pack;
	if (!buf)
		return dcr_err_sys(e, ENOMEM, "relay: no fetch buffer");
	struct dcr_err me;
	int mrc = ensure_manifest(r, p, buf, &me);
	if (mrc && trusting(r))
		return untrusted(o, mrc, &me, e);
	pthread_mutex_lock(&r->mu);
	const struct dcr_manifest *m = p->have_m ? &p->m : NULL;
	if (m && mpos(m, o->idx) < 0) {
		pthread_mutex_unlock(&r->mu);
		return dcr_err_set(e, DCR_ENOTFOUND, "'%s' is not in pack '%s' (%u payloads)", o->name,
				   p->name, m->npayloads);
	}
	if (m && !o->have_size) {
		o->size = m->psize[mpos(m, o->idx)];
		o->have_size = 1;
	}
	count_obj(r, o);
	o->check = m && m->pieces ? V_PIECES : V_WHOLE;
	pthread_mutex_unlock(&r->mu);
	if (o->have_size)
		publish(r, o, 0, 0);
	int rc = spool_open(r, o, e);
	if (rc)
		return rc;
	return o->check == V_PIECES ? fetch_pieces(r, o, m, buf, e) : fetch_whole(r, o, buf, e);
}

static void fetch_obj(struct dcr_relay *r, struct robj *o, uint8_t *buf)
{
	struct dcr_err e = {0};
	o->t_fetch0 = dcr_now_s();
	int rc = o->idx < 0 ? fetch_manifest(r, o, &e) : fetch_payload(r, o, buf, &e);
	char line[1400];
	int have_line = 0;
	pthread_mutex_lock(&r->mu);
	o->t_fetched = dcr_now_s();
	if (!rc && o->state == O_FAILED) {
		/* revoked while it was fetched (manifest_loaded) */
		e = o->err;
		rc = e.code;
	}
	if (rc) {
		o->err = e;
		o->err.code = rc;
		o->state = O_FAILED;
		if (rc != DCR_ENOTFOUND && rc != -ECANCELED)
			r->errors++;
		obj_drop(r, o); /* the next request starts afresh */
	} else {
		if (o->tmp && !rename(o->tmp, o->path)) {
			free(o->tmp);
			o->tmp = NULL;
		}
		o->state = O_DONE;
		have_line = wave_line(r, o, line, sizeof(line));
	}
	int fd = o->fd; /* readers open their own */
	o->fd = -1;
	struct rreq *l = wake(r, o);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (fd >= 0)
		close(fd);
	resume_all(l);
	if (rc && rc != DCR_ENOTFOUND && rc != -ECANCELED)
		say(r, "error: '%s': %s", o->name, e.msg);
	if (have_line)
		say(r, "%s", line);
}

/* Under mu: have o fetched, as a child asked for it: ahead of the
 * payloads asked for before it, and of the prefetches. */
static void enqueue_fetch(struct dcr_relay *r, struct robj *o)
{
	if (o->state == O_QUEUED && o->idx >= 0 && r->fq != o) {
		/* move it to the front */
		for (struct robj **pp = &r->fq; *pp; pp = &(*pp)->qnext)
			if (*pp == o) {
				*pp = o->qnext;
				if (r->fq_tail == o) {
					r->fq_tail = NULL;
					for (struct robj *x = r->fq; x; x = x->qnext)
						r->fq_tail = x;
				}
				break;
			}
		o->qnext = r->fq;
		r->fq = o;
		if (!r->fq_tail)
			r->fq_tail = o;
		return;
	}
	if (o->state != O_NEW || r->stopping)
		return;
	o->state = O_QUEUED;
	o->refs++; /* the queue's */
	count_obj(r, o);
	if (o->idx < 0) {
		o->qnext = r->mq;
		r->mq = o;
		pthread_cond_signal(&r->mcv);
		return;
	}
	o->qnext = r->fq;
	r->fq = o;
	if (!r->fq_tail)
		r->fq_tail = o;
	pthread_cond_signal(&r->fcv);
}

/* Fetch what children asked for first (r->fq), then what the packs'
 * manifests list (prefetch_next). */
static void *fetch_worker(void *arg)
{
	struct dcr_relay *r = arg;
	uint8_t *buf = malloc(r->window);
	pthread_mutex_lock(&r->mu);
	while (!r->stopping) {
		struct robj *o = r->fq;
		int more;
		if (o) {
			r->fq = o->qnext;
			if (!r->fq)
				r->fq_tail = NULL;
			o->qnext = NULL;
			if (o->state != O_QUEUED || !o->in_table) {
				obj_put(r, o);
				continue;
			}
		} else if (!(o = prefetch_next(r, &more))) {
			if (more) {
				pthread_mutex_unlock(&r->mu);
				sched_yield();
				pthread_mutex_lock(&r->mu);
			} else {
				pthread_cond_wait(&r->fcv, &r->mu);
			}
			continue;
		}
		o->state = O_FETCHING;
		pthread_mutex_unlock(&r->mu);
		fetch_obj(r, o, buf);
		pthread_mutex_lock(&r->mu);
		obj_put(r, o);
	}
	pthread_mutex_unlock(&r->mu);
	free(buf);
	return NULL;
}

/* ---- meta jobs: listings and objects passed through ---- */

static int is_absent(int rc)
{
	return rc == DCR_ENOTFOUND;
}

static void run_list(struct dcr_relay *r, struct rreq *q)
{
	size_t dl = strlen(q->name);
	for (size_t t = 0; t < r->np; t++) {
		size_t i = (good(r) + t) % r->np;
		char **names = NULL;
		size_t n = 0;
		q->trc = dcr_store_list(r->parents[i].s, q->prefix, &names, &n, &q->terr);
		if (q->trc)
			continue;
		struct dcr_buf b = {0};
		for (size_t k = 0; k < n && !q->trc; k++)
			if (strlen(names[k]) > dl && !strncmp(names[k], q->name, dl) &&
			    (dcr_buf_add(&b, names[k] + dl, strlen(names[k]) - dl) ||
			     dcr_buf_add_u8(&b, '\n')))
				q->trc = dcr_err_sys(&q->terr, ENOMEM, "relay");
		dcr_store_names_free(names, n);
		q->body = (char *)b.p;
		q->body_len = b.len;
		return;
	}
}

/* An empty temporary file in the spool for q's bytes (q->tfd). */
static int pass_file(struct dcr_relay *r, struct rreq *q)
{
	if (q->tfd < 0)
		q->tfd = open(r->spool, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (q->tfd < 0)
		return dcr_err_sys(&q->terr, errno, "cannot create a file in '%s'", r->spool);
	if (ftruncate(q->tfd, 0))
		return dcr_err_sys(&q->terr, errno, "cannot reset a file in '%s'", r->spool);
	return 0;
}

/* Count q's len bytes in r->pass_held, if they fit (else 503). */
static int pass_reserve(struct dcr_relay *r, struct rreq *q)
{
	int rc = 0;
	pthread_mutex_lock(&r->mu);
	r->pass_held -= q->held;
	q->held = 0;
	if (r->pass_held + q->len > PASS_HELD) {
		q->tstatus = MHD_HTTP_SERVICE_UNAVAILABLE;
		rc = dcr_err_set(&q->terr, -EBUSY,
				 "the relay holds %llu MiB of objects passed through, its most: try again later",
				 (unsigned long long)(r->pass_held >> 20));
	} else {
		r->pass_held += q->len;
		q->held = q->len;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* The bytes of object q->name (size q->tsize) that q's Range asks for,
 * from store s into q->tfd, window by window through buf: never more
 * than that range, nor more than PASS_MAX. */
static int parse_range(struct rreq *q, uint64_t size);
static int pass_get(struct dcr_relay *r, struct rreq *q, struct dcr_store *s, uint8_t *buf)
{
	q->tstatus = parse_range(q, q->tsize);
	if (q->tstatus == MHD_HTTP_RANGE_NOT_SATISFIABLE)
		return 0;
	if (q->len > PASS_MAX) {
		q->tstatus = MHD_HTTP_FORBIDDEN;
		return dcr_err_set(&q->terr, DCR_EFORMAT,
				   "'%s' is %llu bytes: a relay passes at most %llu MiB of an object that is not a pack member at once (ask for a range)",
				   q->name, (unsigned long long)q->len,
				   (unsigned long long)(PASS_MAX >> 20));
	}
	int rc;
	if (!buf)
		return dcr_err_sys(&q->terr, ENOMEM, "relay: no buffer");
	if ((rc = pass_reserve(r, q)) || (rc = pass_file(r, q)))
		return rc;
	for (uint64_t pos = 0; pos < q->len;) {
		size_t n = q->len - pos < r->window ? (size_t)(q->len - pos) : (size_t)r->window;
		if ((rc = dcr_store_get_range(s, q->name, q->start + pos, n, buf, &q->terr)))
			return rc;
		if (dcr_pwrite_full(q->tfd, buf, n, pos))
			return dcr_err_sys(&q->terr, errno, "cannot write a file in '%s'", r->spool);
		pos += n;
	}
	return 0;
}

static void run_pass(struct dcr_relay *r, struct rreq *q, uint8_t *buf)
{
	int absent = 0;
	for (size_t t = 0; t < r->np; t++) {
		size_t i = (good(r) + t) % r->np;
		struct dcr_store *s = r->parents[i].s;
		q->tstatus = 0;
		q->trc = dcr_store_stat(s, q->name, &q->tsize, &q->terr);
		if (!q->trc && !q->head)
			q->trc = pass_get(r, q, s, buf);
		if (!q->trc || q->tstatus == MHD_HTTP_FORBIDDEN ||
		    q->tstatus == MHD_HTTP_SERVICE_UNAVAILABLE)
			return;
		absent += is_absent(q->trc);
	}
	if (absent == (int)r->np)
		q->trc = dcr_err_set(&q->terr, DCR_ENOTFOUND, "no '%s' at %s", q->name,
				     r->np == 1 ? "the parent" : "any parent");
}

static void *meta_worker(void *arg)
{
	struct dcr_relay *r = arg;
	uint8_t *buf = malloc(r->window);
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->stopping && !r->mq && !r->mreq)
			pthread_cond_wait(&r->mcv, &r->mu);
		if (r->stopping)
			break;
		if (r->mq) {
			struct robj *o = r->mq;
			r->mq = o->qnext;
			o->qnext = NULL;
			if (o->state == O_QUEUED && o->in_table) {
				o->state = O_FETCHING;
				pthread_mutex_unlock(&r->mu);
				fetch_obj(r, o, buf);
				pthread_mutex_lock(&r->mu);
			}
			obj_put(r, o);
			continue;
		}
		struct rreq *q = r->mreq;
		r->mreq = q->tnext;
		if (!r->mreq)
			r->mreq_tail = NULL;
		pthread_mutex_unlock(&r->mu);
		if (q->kind == Q_LIST)
			run_list(r, q);
		else
			run_pass(r, q, buf);
		pthread_mutex_lock(&r->mu);
		q->kind = Q_DONE + q->kind; /* done: Q_DONE + what it was */
		struct rreq *l = wake(r, q);
		pthread_mutex_unlock(&r->mu);
		resume_all(l);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	free(buf);
	return NULL;
}

/* ---- answering children ---- */

static enum MHD_Result answer_text(struct rreq *q, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static enum MHD_Result answer_text(struct rreq *q, int status, const char *fmt, ...)
{
	char msg[1200];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(msg) - 2)
		n = (int)sizeof(msg) - 2;
	msg[n++] = '\n';
	struct MHD_Response *resp = mh.create_response_from_buffer((size_t)n, msg,
								    MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	mh.add_response_header(resp, "Content-Type", "text/plain");
	q->status = status;
	if (status >= 500) {
		pthread_mutex_lock(&q->r->mu);
		q->r->errors++;
		pthread_mutex_unlock(&q->r->mu);
	}
	enum MHD_Result ret = mh.queue_response(q->conn, (unsigned)status, resp);
	mh.destroy_response(resp);
	return ret;
}

static enum MHD_Result answer_err(struct rreq *q, int rc, const struct dcr_err *e)
{
	if (rc == DCR_ENOTFOUND)
		return answer_text(q, MHD_HTTP_NOT_FOUND, "%s", e->msg);
	if (rc == -ECANCELED)
		return answer_text(q, MHD_HTTP_SERVICE_UNAVAILABLE, "%s", e->msg);
	return answer_text(q, MHD_HTTP_BAD_GATEWAY, "%s", e->msg);
}

/* The Range of q against an object of size bytes: 200 (whole), 206 with
 * q->start and q->len, or 416. */
static int parse_range(struct rreq *q, uint64_t size)
{
	const char *h = q->range;
	q->start = 0;
	q->len = size;
	if (!h || strncmp(h, "bytes=", 6) || strchr(h, ','))
		return MHD_HTTP_OK; /* none, or one we may ignore */
	const char *p = h + 6;
	char *end;
	unsigned long long a, b;
	if (*p == '-') {
		errno = 0;
		b = strtoull(p + 1, &end, 10);
		if (errno || *end || end == p + 1 || !b)
			return MHD_HTTP_RANGE_NOT_SATISFIABLE;
		if (b > size)
			b = size;
		q->start = size - b;
		q->len = b;
		return b ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_RANGE_NOT_SATISFIABLE;
	}
	errno = 0;
	a = strtoull(p, &end, 10);
	if (errno || end == p || *end != '-')
		return MHD_HTTP_OK;
	p = end + 1;
	if (*p) {
		b = strtoull(p, &end, 10);
		if (errno || *end || b < a)
			return MHD_HTTP_OK;
	} else {
		b = size ? size - 1 : 0;
	}
	if (a >= size)
		return MHD_HTTP_RANGE_NOT_SATISFIABLE;
	if (b >= size)
		b = size - 1;
	q->start = a;
	q->len = b - a + 1;
	return MHD_HTTP_PARTIAL_CONTENT;
}

static void range_headers(struct MHD_Response *resp, int status, const struct rreq *q,
			  uint64_t size)
{
	char v[96];
	mh.add_response_header(resp, "Accept-Ranges", "bytes");
	if (status == MHD_HTTP_PARTIAL_CONTENT) {
		snprintf(v, sizeof(v), "bytes %llu-%llu/%llu", (unsigned long long)q->start,
			 (unsigned long long)(q->start + q->len - 1), (unsigned long long)size);
		mh.add_response_header(resp, "Content-Range", v);
	}
}

static enum MHD_Result answer_416(struct rreq *q, uint64_t size)
{
	char v[64];
	struct MHD_Response *resp = mh.create_response_from_buffer(0, (void *)"",
								    MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	snprintf(v, sizeof(v), "bytes */%llu", (unsigned long long)size);
	mh.add_response_header(resp, "Content-Range", v);
	q->status = MHD_HTTP_RANGE_NOT_SATISFIABLE;
	enum MHD_Result ret = mh.queue_response(q->conn, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
	mh.destroy_response(resp);
	return ret;
}

/* The body of a pack object, as its checked bytes arrive. */
static ssize_t obj_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct rreq *q = cls;
	struct dcr_relay *r = q->r;
	struct robj *o = q->o;
	uint64_t at = q->start + pos;
	pthread_mutex_lock(&r->mu);
	uint64_t avail = o->ready > at ? o->ready - at : 0;
	if (r->stopping || (!avail && o->state == O_FAILED)) {
		pthread_mutex_unlock(&r->mu);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (!avail) {
		park(r, q, o);
		pthread_mutex_unlock(&r->mu);
		park_finish(r, q);
		return 0;
	}
	if (q->fd < 0)
		q->fd = obj_open(o);
	pthread_mutex_unlock(&r->mu);
	size_t n = avail < max ? (size_t)avail : max;
	if (n > q->len - pos)
		n = (size_t)(q->len - pos);
	if (q->fd < 0 || dcr_pread_full(q->fd, buf, n, at))
		return MHD_CONTENT_READER_END_WITH_ERROR;
	q->sent += n;
	return (ssize_t)n;
}

static ssize_t no_body(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls, (void)pos, (void)buf, (void)max;
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

static enum MHD_Result answer_obj(struct rreq *q)
{
	struct dcr_relay *r = q->r;
	struct robj *o = q->o;
	char etag[72] = "";
	pthread_mutex_lock(&r->mu);
	uint64_t size = o->size;
	if (o->have_digest) {
		etag[0] = '"';
		dcr_digest_hex(&o->digest, etag + 1);
		strcat(etag, "\"");
	} else if (o->idx >= 0 && o->pack->have_m && mpos(&o->pack->m, o->idx) >= 0) {
		etag[0] = '"';
		dcr_digest_hex(&o->pack->m.pdigest[mpos(&o->pack->m, o->idx)], etag + 1);
		strcat(etag, "\"");
	}
	pthread_mutex_unlock(&r->mu);
	const char *im = q->if_match;
	if (im && etag[0] && strcmp(im, "*") && strcmp(im, etag))
		return answer_text(q, MHD_HTTP_PRECONDITION_FAILED,
				   "precondition failed: '%s' has ETag %s", o->name, etag);
	int status = parse_range(q, size);
	if (status == MHD_HTTP_RANGE_NOT_SATISFIABLE)
		return answer_416(q, size);
	struct MHD_Response *resp =
		mh.create_response_from_callback(q->len, RESP_BLOCK, q->head ? no_body : obj_reader,
						  q, NULL);
	if (!resp)
		return MHD_NO;
	mh.add_response_header(resp, "Content-Type", "application/octet-stream");
	if (etag[0])
		mh.add_response_header(resp, "ETag", etag);
	range_headers(resp, status, q, size);
	if (!q->head) {
		pthread_mutex_lock(&r->mu);
		if (!o->wave_children++)
			o->wave_t0 = dcr_now_s();
		o->children++;
		o->active++;
		q->responding = 1;
		enqueue_fetch(r, o);
		pthread_mutex_unlock(&r->mu);
	}
	q->status = status;
	enum MHD_Result ret = mh.queue_response(q->conn, (unsigned)status, resp);
	mh.destroy_response(resp);
	return ret;
}

static enum MHD_Result answer_pass(struct rreq *q)
{
	if (q->trc && (q->tstatus == MHD_HTTP_FORBIDDEN ||
		       q->tstatus == MHD_HTTP_SERVICE_UNAVAILABLE))
		return answer_text(q, q->tstatus, "%s", q->terr.msg);
	if (q->trc)
		return answer_err(q, q->trc, &q->terr);
	/* a GET's range was taken by run_pass: its bytes are at 0 in tfd */
	int status = q->head ? parse_range(q, q->tsize) : q->tstatus;
	if (status == MHD_HTTP_RANGE_NOT_SATISFIABLE)
		return answer_416(q, q->tsize);
	struct MHD_Response *resp;
	if (q->head) {
		resp = mh.create_response_from_callback(q->tsize, RESP_BLOCK, no_body, NULL, NULL);
	} else {
		resp = mh.create_response_from_fd_at_offset64(q->len, q->tfd, 0);
		if (resp)
			q->tfd = -1; /* the response closes it */
	}
	if (!resp)
		return MHD_NO;
	range_headers(resp, status, q, q->tsize);
	q->status = status;
	q->sent = q->head ? 0 : q->len;
	enum MHD_Result ret = mh.queue_response(q->conn, (unsigned)status, resp);
	mh.destroy_response(resp);
	return ret;
}

static enum MHD_Result answer_list(struct rreq *q)
{
	if (q->trc) {
		if (q->trc == DCR_ENOTFOUND || q->trc == DCR_EREMOTE)
			return answer_text(q, MHD_HTTP_NOT_FOUND, "%s", q->terr.msg);
		return answer_err(q, q->trc, &q->terr);
	}
	struct MHD_Response *resp = mh.create_response_from_buffer(
		q->body_len, q->body ? q->body : (void *)"", MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	mh.add_response_header(resp, "Content-Type", "text/plain");
	q->status = MHD_HTTP_OK;
	enum MHD_Result ret = mh.queue_response(q->conn, MHD_HTTP_OK, resp);
	mh.destroy_response(resp);
	return ret;
}

static enum MHD_Result answer_status(struct rreq *q)
{
	const char *pfx = mh.lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "prefix");
	char *s = dcr_relay_status_for(q->r, pfx);
	if (!s)
		return answer_text(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	struct MHD_Response *resp = mh.create_response_from_buffer(strlen(s), s,
								    MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return MHD_NO;
	}
	mh.add_response_header(resp, "Content-Type", "application/json");
	q->status = MHD_HTTP_OK;
	enum MHD_Result ret = mh.queue_response(q->conn, MHD_HTTP_OK, resp);
	mh.destroy_response(resp);
	return ret;
}

/* Under mu: queue a meta job for q and park it. */
static void meta_job(struct dcr_relay *r, struct rreq *q)
{
	q->tnext = NULL;
	if (r->mreq_tail)
		r->mreq_tail->tnext = q;
	else
		r->mreq = q;
	r->mreq_tail = q;
	pthread_cond_signal(&r->mcv);
	park(r, q, q);
}

/* A pack object: answer at once when its size is known, else wait. */
static enum MHD_Result serve_obj(struct rreq *q)
{
	struct dcr_relay *r = q->r;
	struct robj *o = q->o;
	pthread_mutex_lock(&r->mu);
	if (r->stopping) {
		pthread_mutex_unlock(&r->mu);
		return answer_text(q, MHD_HTTP_SERVICE_UNAVAILABLE, "the relay is stopping");
	}
	if (o->state == O_FAILED) {
		struct dcr_err e = o->err;
		pthread_mutex_unlock(&r->mu);
		return answer_err(q, e.code, &e);
	}
	if (o->have_size && (o->idx >= 0 || o->state == O_DONE)) {
		/* a GET is answered once the first byte it asks for is here
		 * (there is nothing to send before), so that a fetch that fails
		 * first is an error status, not a cut body */
		int st = q->head ? 0 : parse_range(q, o->size);
		if (q->head || o->state == O_DONE || o->ready > q->start ||
		    st == MHD_HTTP_RANGE_NOT_SATISFIABLE) {
			pthread_mutex_unlock(&r->mu);
			return answer_obj(q);
		}
	}
	enqueue_fetch(r, o);
	park(r, q, o);
	pthread_mutex_unlock(&r->mu);
	park_finish(r, q);
	return MHD_YES;
}

/* A listing's prefix: its directory part an acceptable name, its last
 * part neither "." nor ".." nor holding a control character. */
static int check_prefix(const char *pfx, struct dcr_err *e)
{
	const char *slash = strrchr(pfx, '/'), *last = slash ? slash + 1 : pfx;
	if (slash) {
		char *dir = strndup(pfx, (size_t)(slash - pfx));
		int rc = dir ? dcr_store_check_name(dir, e) : dcr_err_sys(e, ENOMEM, "relay");
		free(dir);
		if (rc)
			return rc;
	}
	if (!strcmp(last, ".") || !strcmp(last, ".."))
		return dcr_err_set(e, DCR_EFORMAT, "bad listing prefix '%s'", pfx);
	for (const char *p = last; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return dcr_err_set(e, DCR_EFORMAT, "bad listing prefix: a control character");
	return 0;
}

/* A GET of a manifest's signature that the relay fetched with the
 * manifest, answered from memory (r->mu held): 1 when answered, 0 when
 * it must be passed through. */
static int answer_sig(struct rreq *q, const char *name)
{
	struct dcr_relay *r = q->r;
	const char *b = strrchr(name, '/');
	if (!b || strcmp(b + 1, DCR_MANIFEST_SIG_NAME))
		return 0;
	size_t plen = (size_t)(b - name);
	struct rpack *p;
	for (p = r->packs; p; p = p->next)
		if (strlen(p->name) == plen && !memcmp(p->name, name, plen))
			break;
	if (!p || !p->have_m || !p->sig_known)
		return 0;
	struct MHD_Response *resp =
		p->sig_known == 1
			? mh.create_response_from_buffer(p->sig_len, p->sig, MHD_RESPMEM_MUST_COPY)
			: mh.create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return 0;
	q->status = p->sig_known == 1 ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND;
	q->sent = p->sig_known == 1 ? p->sig_len : 0;
	mh.queue_response(q->conn, (unsigned)q->status, resp);
	mh.destroy_response(resp);
	return 1;
}

/* A fresh request (Cache-Control: no-cache: a child whose copy did not
 * check out asks again) for a payload or manifest the cache holds: its
 * file is hashed again, outside the lock, a payload's against the
 * manifest's digest, a manifest's by its own checksum and against the
 * trailer of the one loaded; at most one check of an object at a time
 * and one per RECHECK_S (a child cannot make the relay hash without end).
 * A damaged file is marked so, and obj_get fetches the object again. */
#define RECHECK_S 5.0
static void obj_recheck(struct dcr_relay *r, const char *name)
{
	pthread_mutex_lock(&r->mu);
	struct robj *o = tab_find(r, name);
	double now = dcr_now_s();
	const struct dcr_manifest *m = o && o->pack->have_m ? &o->pack->m : NULL;
	if (!o || o->state != O_DONE || !o->path || o->tmp || o->damaged || o->rechecking ||
	    now - o->t_checked < RECHECK_S || (o->idx >= 0 && !m && !o->have_digest) ||
	    (o->idx >= 0 && m && mpos(m, o->idx) < 0) || (o->idx < 0 && !m)) {
		pthread_mutex_unlock(&r->mu);
		return;
	}
	char *path = dcr_strdup(o->path);
	uint64_t size = o->size;
	long idx = o->idx;
	/* a payload's digest, or the trailer of the manifest loaded */
	dcr_digest want;
	if (idx < 0)
		memcpy(want.b, o->pack->mtrailer, 32);
	else
		want = m ? m->pdigest[mpos(m, idx)] : o->digest;
	o->refs++;
	o->rechecking = 1;
	pthread_mutex_unlock(&r->mu);
	struct dcr_blob b = {0};
	struct dcr_err e;
	int bad = -1; /* not known */
	if (path && !dcr_blob_map(&b, path, DCR_PAYLOAD_MAX_FILE, &e)) {
		dcr_digest d;
		struct dcr_manifest pm;
		bad = b.len != size || b.len <= 32 || memcmp(b.p + b.len - 32, want.b, 32);
		if (!bad && idx >= 0) {
			dcr_payload_digest(b.p, b.len - 32, &d);
			bad = memcmp(d.b, want.b, 32) != 0;
		} else if (!bad) {
			bad = dcr_manifest_parse(b.p, b.len, path, &pm, &e) != 0;
			if (!bad)
				dcr_manifest_release(&pm);
		}
	}
	dcr_blob_free(&b);
	free(path);
	pthread_mutex_lock(&r->mu);
	o->rechecking = 0;
	o->t_checked = dcr_now_s();
	if (bad == 1 && o->in_table && o->state == O_DONE)
		o->damaged = 1;
	obj_put(r, o);
	pthread_mutex_unlock(&r->mu);
	/* a file that checks out points at what lies between the relay and
	 * the child (a proxy, the network): said, for whoever debugs it */
	if (bad >= 0)
		say(r, bad ? "warning: '%s': its file in the cache is damaged (a child asked again, no-cache); fetching it again"
			   : "warning: '%s': a child asked again (no-cache), and its file in the cache checks out",
		    name);
}

static enum MHD_Result start_req(struct rreq *q, const char *url)
{
	struct dcr_relay *r = q->r;
	struct dcr_err e;
	if (!strcmp(url, "/.dcr/status"))
		return answer_status(q);
	if (url[0] != '/')
		return answer_text(q, MHD_HTTP_BAD_REQUEST, "bad path '%s'", url);
	const char *name = url + 1;
	size_t n = strlen(name);
	const char *pfx = mh.lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "prefix");
	if ((!n || name[n - 1] == '/') && pfx && !q->head) {
		/* a listing: GET DIR/?prefix=PFX */
		q->name = dcr_strdup(name);
		q->prefix = dcr_asprintf("%s%s", name, pfx);
		if (!q->name || !q->prefix)
			return answer_text(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
		if (check_prefix(q->prefix, &e))
			return answer_text(q, MHD_HTTP_BAD_REQUEST, "%s", e.msg);
		q->kind = Q_LIST;
		pthread_mutex_lock(&r->mu);
		meta_job(r, q);
		pthread_mutex_unlock(&r->mu);
		park_finish(r, q);
		return MHD_YES;
	}
	if (dcr_store_check_name(name, &e))
		return answer_text(q, MHD_HTTP_BAD_REQUEST, "%s", e.msg);
	if (!strncmp(name, ".dcr/", 5))
		return answer_text(q, MHD_HTTP_NOT_FOUND, "no '%s' here", name);
	if (!(q->name = dcr_strdup(name)))
		return answer_text(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	if (q->fresh && !q->head)
		obj_recheck(r, name);
	pthread_mutex_lock(&r->mu);
	if (r->stopping) {
		pthread_mutex_unlock(&r->mu);
		return answer_text(q, MHD_HTTP_SERVICE_UNAVAILABLE, "the relay is stopping");
	}
	if (!q->head && !q->range && answer_sig(q, name)) {
		pthread_mutex_unlock(&r->mu);
		return MHD_YES;
	}
	int code = 0;
	struct robj *o = obj_get(r, name, &code);
	if (!o && code == DCR_EFORMAT) {
		/* not a pack member: passed through, not cached */
		q->kind = Q_PASS;
		q->tfd = -1;
		meta_job(r, q);
		pthread_mutex_unlock(&r->mu);
		park_finish(r, q);
		return MHD_YES;
	}
	if (!o) {
		struct rpack *p = NULL;
		size_t plen;
		long idx;
		if (pack_member(name, &plen, &idx))
			for (p = r->packs; p; p = p->next)
				if (strlen(p->name) == plen && !memcmp(p->name, name, plen))
					break;
		unsigned np = p && p->have_m ? p->m.npayloads : 0;
		pthread_mutex_unlock(&r->mu);
		if (code == DCR_ENOTFOUND)
			return answer_text(q, MHD_HTTP_NOT_FOUND,
					   "'%s' is not in its pack (its manifest lists %u payloads)",
					   name, np);
		return answer_text(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	}
	o->refs++;
	q->o = o;
	q->kind = Q_OBJ;
	pthread_mutex_unlock(&r->mu);
	return serve_obj(q);
}

/* 1 if a Cache-Control or Pragma header's value holds the no-cache
 * directive (a token of a comma-separated list, any case). */
static int no_cache(const char *v)
{
	while (v && *v) {
		v += strspn(v, " \t,");
		size_t n = strcspn(v, " \t,=");
		if (n == 8 && !strncasecmp(v, "no-cache", 8) && v[n] != '=')
			return 1;
		v = strchr(v, ',');
	}
	return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct dcr_relay *r = cls;
	struct rreq *q = *con_cls;
	(void)version, (void)upload;
	if (!q) {
		q = dcr_calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		q->r = r;
		q->conn = conn;
		q->fd = -1;
		q->tfd = -1;
		q->head = !strcmp(method, MHD_HTTP_METHOD_HEAD);
		q->reject = !q->head && strcmp(method, MHD_HTTP_METHOD_GET);
		const char *h = mh.lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
		if (h && !(q->range = dcr_strdup(h)))
			q->reject = 1;
		h = mh.lookup_connection_value(conn, MHD_HEADER_KIND, "If-Match");
		if (h && !(q->if_match = dcr_strdup(h)))
			q->reject = 1;
		q->fresh = no_cache(mh.lookup_connection_value(conn, MHD_HEADER_KIND,
							       "Cache-Control")) ||
			   no_cache(mh.lookup_connection_value(conn, MHD_HEADER_KIND, "Pragma"));
		*con_cls = q;
		pthread_mutex_lock(&r->mu);
		r->requests++;
		pthread_mutex_unlock(&r->mu);
		return MHD_YES;
	}
	if (*upload_size) {
		*upload_size = 0; /* a body we do not want */
		return MHD_YES;
	}
	if (q->reject)
		return answer_text(q, MHD_HTTP_METHOD_NOT_ALLOWED,
				   "a relay serves GET and HEAD only, not %s", method);
	if (!q->started) {
		q->started = 1;
		return start_req(q, url);
	}
	/* back after a park */
	if (q->kind == Q_DONE + Q_LIST)
		return answer_list(q);
	if (q->kind == Q_DONE + Q_PASS)
		return answer_pass(q);
	if (q->kind == Q_OBJ)
		return serve_obj(q);
	pthread_mutex_lock(&r->mu);
	if (q->kind != Q_DONE + Q_LIST && q->kind != Q_DONE + Q_PASS) {
		/* its meta job still runs (and writes q): wait for it, even
		 * when stopping (dcr_relay_stop ends every job) */
		park(r, q, q);
		pthread_mutex_unlock(&r->mu);
		park_finish(r, q);
		return MHD_YES;
	}
	pthread_mutex_unlock(&r->mu);
	return q->kind == Q_DONE + Q_LIST ? answer_list(q) : answer_pass(q);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct dcr_relay *r = cls;
	struct rreq *q = *con_cls;
	(void)conn;
	if (!q)
		return;
	*con_cls = NULL;
	char line[1400];
	int have_line = 0;
	pthread_mutex_lock(&r->mu);
	r->pass_held -= q->held;
	r->bytes_served += q->sent;
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && q->started)
		r->cut++;
	if (q->o) {
		struct robj *o = q->o;
		o->served += q->sent;
		if (q->responding) {
			o->wave_bytes += q->sent;
			o->active--;
			have_line = wave_line(r, o, line, sizeof(line));
		}
		obj_put(r, o);
	}
	pthread_mutex_unlock(&r->mu);
	if (q->fd >= 0)
		close(q->fd);
	if (q->tfd >= 0)
		close(q->tfd);
	free(q->name);
	free(q->prefix);
	free(q->range);
	free(q->if_match);
	free(q->body);
	free(q);
	if (have_line)
		say(r, "%s", line);
}

/* ---- status ---- */

/* Under mu: object o as a member of the status's objects. */
static json_t *status_obj(const struct dcr_relay *r, const struct robj *o)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "name", o->name,
			      "state", state_name[o->state], "check", check_name[o->check], "size",
			      (json_int_t)o->size, "ready", (json_int_t)o->ready, "children",
			      (json_int_t)o->children, "active", (json_int_t)o->active,
			      "bytes_served", (json_int_t)o->served, "failovers",
			      (json_int_t)o->failovers);
	if (j && o->src >= 0)
		json_object_set_new(j, "from", json_string(r->parents[o->src].url));
	return j;
}

static int status_busy(const struct robj *o)
{
	return o->state == O_QUEUED || o->state == O_FETCHING || o->active;
}

char *dcr_relay_status(struct dcr_relay *r)
{
	return dcr_relay_status_for(r, NULL);
}

char *dcr_relay_status_for(struct dcr_relay *r, const char *prefix)
{
	json_t *doc = json_object(), *parents = json_array(), *objs = json_array();
	if (!doc || !parents || !objs) {
		json_decref(doc);
		json_decref(parents);
		json_decref(objs);
		return NULL;
	}
	size_t np = prefix ? strlen(prefix) : 0, held = 0, listed = 0;
	const union MHD_DaemonInfo *di =
		r->d ? mh.get_daemon_info(r->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
	pthread_mutex_lock(&r->mu);
	json_object_set_new(doc, "listen", json_string(r->listen));
	for (size_t i = 0; i < r->np; i++)
		json_array_append_new(parents,
				      json_pack("{s:s, s:I, s:I}", "url", r->parents[i].url, "bytes",
						(json_int_t)r->parents[i].bytes, "failures",
						(json_int_t)r->parents[i].failures));
	json_object_set_new(doc, "parents", parents);
	json_object_set_new(doc, "cache",
			    json_pack("{s:s, s:b, s:I, s:I, s:I, s:I, s:I}", "dir", r->spool, "temporary",
				      r->spool_temp, "bytes", (json_int_t)r->cache_bytes, "limit",
				      (json_int_t)r->cache_size, "dropped_disk_full",
				      (json_int_t)r->disk_drops, "lost", (json_int_t)r->lost, "damaged",
				      (json_int_t)r->damaged));
	json_object_set_new(doc, "requests", json_integer((json_int_t)r->requests));
	json_object_set_new(doc, "errors", json_integer((json_int_t)r->errors));
	json_object_set_new(doc, "cut", json_integer((json_int_t)r->cut));
	json_object_set_new(doc, "bytes_served", json_integer((json_int_t)r->bytes_served));
	json_object_set_new(doc, "bytes_fetched", json_integer((json_int_t)r->fetched));
	json_object_set_new(doc, "connections",
			    json_integer(di ? (json_int_t)di->num_connections : 0));
	/* the objects in flight first, then the others, at most
	 * DCR_RELAY_STATUS_MAX (the table holds up to 2^18) */
	for (int busy = 1; busy >= 0; busy--)
		for (size_t h = 0; h < r->tab_size; h++)
			for (struct robj *o = r->tab[h]; o; o = o->hnext) {
				if ((np && strncmp(o->name, prefix, np)) || status_busy(o) != busy)
					continue;
				held++;
				json_t *j = listed < DCR_RELAY_STATUS_MAX ? status_obj(r, o) : NULL;
				if (j && !json_array_append_new(objs, j))
					listed++;
			}
	pthread_mutex_unlock(&r->mu);
	json_object_set_new(doc, "objects", objs);
	json_object_set_new(doc, "objects_held", json_integer((json_int_t)held));
	json_object_set_new(doc, "objects_listed", json_integer((json_int_t)listed));
	if (prefix)
		json_object_set_new(doc, "prefix", json_string(prefix));
	char *s = json_dumps(doc, JSON_INDENT(1) | JSON_SORT_KEYS);
	json_decref(doc);
	if (s) {
		/* end it with a newline, as the other answers */
		size_t n = strlen(s);
		char *t = realloc(s, n + 2);
		if (t) {
			t[n] = '\n';
			t[n + 1] = '\0';
			s = t;
		}
	}
	return s;
}

/* ---- reading the table from this process: dcr_relay_pull ---- */

/* A reference to the object name, its fetch started; counted as a child. */
static struct robj *acquire(struct dcr_relay *r, const char *name, struct dcr_err *e)
{
	pthread_mutex_lock(&r->mu);
	int code = 0;
	struct robj *o = obj_get(r, name, &code);
	if (!o) {
		pthread_mutex_unlock(&r->mu);
		if (code == DCR_ENOTFOUND)
			dcr_err_set(e, DCR_ENOTFOUND, "'%s' is not in its pack", name);
		else
			dcr_err_sys(e, ENOMEM, "relay");
		return NULL;
	}
	o->refs++;
	if (!o->wave_children++)
		o->wave_t0 = dcr_now_s();
	o->children++;
	o->active++;
	enqueue_fetch(r, o);
	pthread_mutex_unlock(&r->mu);
	return o;
}

static void release(struct dcr_relay *r, struct robj *o, uint64_t sent)
{
	char line[1400];
	pthread_mutex_lock(&r->mu);
	o->served += sent;
	o->wave_bytes += sent;
	o->active--;
	int have_line = wave_line(r, o, line, sizeof(line));
	obj_put(r, o);
	pthread_mutex_unlock(&r->mu);
	if (have_line)
		say(r, "%s", line);
}

/* Wait until o has checked bytes past pos (1, *avail set, and *fd open
 * on its spool file), is done with none (0), or failed (<0, e set). */
static int wait_bytes(struct dcr_relay *r, struct robj *o, uint64_t pos, uint64_t *avail,
		      int *fd, struct dcr_err *e)
{
	pthread_mutex_lock(&r->mu);
	for (;;) {
		if (o->ready > pos && *fd < 0 && (*fd = obj_open(o)) < 0) {
			int rc = dcr_err_sys(e, errno, "cannot open '%s' in the spool", o->name);
			pthread_mutex_unlock(&r->mu);
			return rc;
		}
		if (o->ready > pos) {
			*avail = o->ready - pos;
			pthread_mutex_unlock(&r->mu);
			return 1;
		}
		if (o->state == O_DONE && o->have_size && pos >= o->size) {
			pthread_mutex_unlock(&r->mu);
			return 0;
		}
		if (o->state == O_FAILED || r->stopping) {
			int rc = o->state == O_FAILED ? o->err.code : -ECANCELED;
			if (o->state == O_FAILED)
				*e = o->err;
			else
				dcr_err_set(e, rc, "the relay is stopping");
			pthread_mutex_unlock(&r->mu);
			return rc < 0 ? rc : -EIO;
		}
		pthread_cond_wait(&r->cv, &r->mu);
	}
}

/* The whole (small) object name into memory: a manifest. */
static int read_whole(struct dcr_relay *r, const char *name, uint8_t **out, size_t *len,
		      struct dcr_err *e)
{
	struct robj *o = acquire(r, name, e);
	if (!o)
		return e->code ? e->code : -ENOMEM;
	int rc = 0, fd = -1;
	pthread_mutex_lock(&r->mu);
	while (o->state != O_DONE && o->state != O_FAILED && !r->stopping)
		pthread_cond_wait(&r->cv, &r->mu);
	if (o->state == O_FAILED) {
		*e = o->err;
		rc = e->code < 0 ? e->code : -EIO;
	} else if (o->state != O_DONE) {
		rc = dcr_err_set(e, -ECANCELED, "the relay is stopping");
	} else if ((fd = obj_open(o)) < 0) {
		rc = dcr_err_sys(e, errno, "cannot open '%s' in the spool", name);
	}
	pthread_mutex_unlock(&r->mu);
	if (!rc) {
		if (o->size > DCR_MANIFEST_MAX)
			rc = dcr_err_set(e, DCR_EFORMAT, "'%s' is too large", name);
		else if (!(*out = malloc(o->size ? (size_t)o->size : 1)))
			rc = dcr_err_sys(e, ENOMEM, "relay");
		else if (dcr_pread_full(fd, *out, (size_t)o->size, 0))
			rc = dcr_err_sys(e, errno, "cannot read '%s'", name);
		*len = (size_t)o->size;
	}
	if (fd >= 0)
		close(fd);
	release(r, o, rc ? 0 : o->size);
	return rc;
}

/* Payload `name` of size bytes into out, from the table, as its pieces
 * check out; a failed fetch is started again (three times) from where it
 * stopped. */
static int stream_payload(struct dcr_relay *r, const char *ename, const char *name, uint64_t size,
			  struct dcr_pack_out out, uint8_t *buf, size_t cap, struct dcr_err *e)
{
	uint64_t pos = 0;
	/* an output that takes whole entries gets the payload in a buffer
	 * grown with the bytes that checked out, not sized by the manifest */
	int whole = !out.begin;
	struct dcr_buf wb = {0};
	int rc = 0;
	if (out.begin && (rc = out.begin(out.ctx, ename, size, e)))
		return rc;
	for (int attempt = 0;; attempt++) {
		struct robj *o = acquire(r, name, e);
		if (!o) {
			rc = e->code ? e->code : -ENOMEM;
			break;
		}
		uint64_t sent = 0, avail = 0;
		int fd = -1;
		while (pos < size && (rc = wait_bytes(r, o, pos, &avail, &fd, e)) == 1) {
			size_t n = avail < cap ? (size_t)avail : cap;
			if (whole && dcr_buf_reserve(&wb, n)) {
				rc = dcr_err_sys(e, ENOMEM, "relay");
				break;
			}
			uint8_t *dst = whole ? wb.p + wb.len : buf;
			if (dcr_pread_full(fd, dst, n, pos)) {
				rc = dcr_err_sys(e, errno, "cannot read '%s'", name);
				break;
			}
			if (!whole && (rc = out.data(out.ctx, buf, n, e)))
				break;
			wb.len += whole ? n : 0;
			pos += n;
			sent += n;
		}
		if (fd >= 0)
			close(fd);
		release(r, o, sent);
		if (pos >= size) {
			rc = 0;
			break;
		}
		if (rc == 0) /* done, and shorter than the manifest says */
			rc = dcr_err_set(e, DCR_EFORMAT, "'%s' ended at %llu of %llu bytes", name,
					 (unsigned long long)pos, (unsigned long long)size);
		/* a fetch that failed (every parent, twice) may be started
		 * again: the next one resumes at pos */
		if (rc == -ECANCELED || rc == DCR_ENOTFOUND || rc == DCR_EFORMAT || attempt == 2)
			break;
	}
	if (!rc)
		rc = whole ? out.entry(out.ctx, ename, wb.p, wb.len, e) : out.end(out.ctx, e);
	dcr_buf_free(&wb);
	return rc;
}

int dcr_relay_pull(struct dcr_relay *r, const char *name, struct dcr_pack_out out, double wait_s,
		   struct dcr_xfer_stats *st, struct dcr_err *e)
{
	int rc = dcr_store_check_name(name, e);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->mu);
	if (r->stopping) {
		pthread_mutex_unlock(&r->mu);
		return dcr_err_set(e, -ECANCELED, "the relay is stopping");
	}
	r->pulls++;
	pthread_mutex_unlock(&r->mu);
	char *mname = dcr_asprintf("%s/%s", name, DCR_MANIFEST_NAME);
	uint8_t *man = NULL, *buf = malloc(1u << 20);
	size_t man_len = 0;
	struct dcr_manifest m;
	int have_m = 0;
	double deadline = dcr_now_s() + wait_s;
	if (!mname || !buf) {
		rc = dcr_err_sys(e, ENOMEM, "relay");
		goto out;
	}
	while ((rc = read_whole(r, mname, &man, &man_len, e)) == DCR_ENOTFOUND &&
	       dcr_now_s() < deadline)
		usleep(250 * 1000);
	if (rc == DCR_ENOTFOUND)
		rc = dcr_err_set(e, DCR_ENOTFOUND, "no pack '%s' at the relay's parents%s", name,
				 wait_s > 0 ? " (waited for it)" : "");
	if (rc || (rc = dcr_manifest_parse(man, man_len, mname, &m, e)))
		goto out;
	have_m = 1;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < m.npayloads && !rc; i++) {
		char *en = dcr_payload_name(dcr_manifest_index(&m, i));
		char *on = en ? dcr_asprintf("%s/%s", name, en) : NULL;
		rc = on ? stream_payload(r, en, on, m.psize[i], out, buf, 1u << 20, e)
			: dcr_err_sys(e, ENOMEM, "relay");
		bytes += m.psize[i];
		free(en);
		free(on);
	}
	/* the signature from the first parent that answers, then the manifest */
	uint8_t *sig = NULL;
	size_t sig_len = 0;
	for (size_t i = 0; !rc && i < r->np; i++) {
		struct dcr_err se;
		if (!get_sig(&r->parents[(good(r) + i) % r->np], name, &sig, &sig_len, &se))
			break;
		if (i == r->np - 1)
			rc = dcr_err_set(e, se.code, "%s", se.msg);
	}
	if (!rc && sig)
		rc = out.entry(out.ctx, DCR_MANIFEST_SIG_NAME, sig, sig_len, e);
	free(sig);
	if (!rc)
		rc = out.entry(out.ctx, DCR_MANIFEST_NAME, man, man_len, e);
	if (!rc && st) {
		st->payloads = m.npayloads;
		st->bytes = bytes + man_len + sig_len;
	}
out:
	if (have_m)
		dcr_manifest_release(&m);
	free(man);
	free(mname);
	free(buf);
	pthread_mutex_lock(&r->mu);
	r->pulls--;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* ---- the cache directory across runs ---- */

/* Reload what a cache directory holds: each pack's manifest (checked by its
 * trailer), then the payloads beside it that match it, re-hashed whole;
 * temporary files and whatever does not check out are removed. */
static void reload_dir(struct dcr_relay *r, const char *rel)
{
	char *dir = *rel ? dcr_path_join(r->spool, rel) : dcr_strdup(r->spool);
	DIR *d = dir ? opendir(dir) : NULL;
	if (!d) {
		free(dir);
		return;
	}
	struct dirent *de;
	struct rpack *p = NULL;
	char **files = NULL;
	size_t nf = 0, cap = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *path = dcr_path_join(dir, de->d_name);
		char *sub = *rel ? dcr_asprintf("%s/%s", rel, de->d_name) : dcr_strdup(de->d_name);
		struct stat sb;
		if (!path || !sub || lstat(path, &sb)) {
			free(path);
			free(sub);
			continue;
		}
		if (S_ISDIR(sb.st_mode)) {
			reload_dir(r, sub);
		} else if (S_ISREG(sb.st_mode) && strstr(de->d_name, ".tmp.")) {
			unlink(path);
		} else if (S_ISREG(sb.st_mode)) {
			if (nf == cap) {
				size_t nc = cap ? 2 * cap : 16;
				char **f = realloc(files, nc * sizeof(*f));
				if (!f) {
					free(path);
					free(sub);
					continue;
				}
				files = f;
				cap = nc;
			}
			files[nf++] = sub;
			sub = NULL;
		}
		free(path);
		free(sub);
	}
	closedir(d);
	/* the manifest first, then the payloads it lists */
	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; k < nf; k++) {
			size_t plen;
			long idx;
			if (!files[k] || !pack_member(files[k], &plen, &idx) || (idx < 0) != !pass)
				continue;
			char *path = dcr_path_join(r->spool, files[k]);
			struct dcr_blob b = {0};
			struct dcr_err e;
			int ok = 0;
			if (path && !dcr_blob_map(&b, path, DCR_PAYLOAD_MAX_FILE, &e)) {
				pthread_mutex_lock(&r->mu);
				if (idx < 0) {
					struct dcr_manifest m;
					p = pack_get(r, files[k], plen);
					/* with a key, a manifest is taken only with its
					 * signature, which the cache does not keep */
					if (p && !p->have_m && b.len >= 32 &&
					    !trusting(r) &&
					    !dcr_manifest_parse(b.p, b.len, path, &m, &e)) {
						p->m = m;
						p->have_m = 1;
						memcpy(p->mtrailer, b.p + b.len - 32, 32);
						ok = 1;
					}
				} else if (p && p->have_m && mpos(&p->m, idx) >= 0 &&
					   b.len == p->m.psize[mpos(&p->m, idx)] && b.len > 32) {
					dcr_digest d;
					dcr_payload_digest(b.p, b.len - 32, &d);
					ok = !memcmp(d.b, p->m.pdigest[mpos(&p->m, idx)].b, 32) &&
					     !memcmp(d.b, b.p + b.len - 32, 32);
				}
				int code;
				struct robj *o = ok ? obj_get(r, files[k], &code) : NULL;
				if (o && o->state == O_NEW) {
					o->path = path;
					path = NULL;
					o->size = o->ready = b.len;
					o->have_size = 1;
					o->state = O_DONE;
					o->check = idx < 0 ? V_MANIFEST : V_WHOLE;
					memcpy(o->digest.b, b.p + b.len - 32, 32);
					o->have_digest = 1;
					o->counted = b.len;
					r->cache_bytes += b.len;
				} else if (!ok) {
					unlink(path);
				}
				if (idx < 0 && p && !p->have_m && !p->nobj) {
					p->nobj = 1;
					pack_put(r, p);
					p = NULL;
				}
				pthread_mutex_unlock(&r->mu);
				dcr_blob_free(&b);
			}
			free(path);
		}
	for (size_t k = 0; k < nf; k++)
		free(files[k]);
	free(files);
	free(dir);
}

/* A cache directory is one relay's: two that share it would remove each
 * other's objects in flight (a start removes every temporary file) and
 * count the same bytes twice. Held until the relay stops. */
static int lock_cache(struct dcr_relay *r, struct dcr_err *e)
{
	char *lp = dcr_path_join(r->spool, ".lock");
	if (!lp)
		return dcr_err_sys(e, ENOMEM, "relay");
	int rc = 0;
	r->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (r->lock_fd < 0)
		rc = dcr_err_sys(e, errno, "cannot open '%s'", lp);
	else if (flock(r->lock_fd, LOCK_EX | LOCK_NB))
		rc = errno == EWOULDBLOCK
			? dcr_err_set(e, DCR_ELOCKED,
				      "cache '%s' is in use: another dcr-relay holds its lock (each relay needs a --cache of its own)",
				      r->spool)
			: dcr_err_sys(e, errno, "cannot lock '%s'", lp);
	free(lp);
	return rc;
}

/* Remove our temporary spool directory and everything under it. */
static void remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *path = dcr_path_join(dir, de->d_name);
		struct stat sb;
		if (path && !lstat(path, &sb)) {
			if (S_ISDIR(sb.st_mode))
				remove_tree(path);
			else
				unlink(path);
		}
		free(path);
	}
	closedir(d);
	rmdir(dir);
}

/* ---- start, stop ---- */

static int parse_listen(const char *s, struct sockaddr_storage *ss, int *v6, struct dcr_err *e)
{
	const char *colon = strrchr(s, ':');
	if (!colon || !colon[1])
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is not ADDR:PORT", s);
	char host[128];
	size_t hl = (size_t)(colon - s);
	if (hl && s[0] == '[' && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is not ADDR:PORT", s);
	memcpy(host, s, hl);
	host[hl] = '\0';
	char *end;
	errno = 0;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (errno || *end || port > 65535 || colon[1] == '-' || colon[1] == '+')
		return dcr_err_set(e, DCR_EFORMAT, "bad port in '%s'", s);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE}, *ai = NULL;
	int g = getaddrinfo(hl ? host : NULL, colon + 1, &hints, &ai);
	if (g)
		return dcr_err_set(e, DCR_EFORMAT, "cannot resolve '%s': %s", host, gai_strerror(g));
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*v6 = ai->ai_family == AF_INET6;
	freeaddrinfo(ai);
	return 0;
}

int dcr_relay_start(const struct dcr_relay_opts *o, struct dcr_relay **out, struct dcr_err *e)
{
	if (!o->nparents)
		return dcr_err_set(e, DCR_EFORMAT, "a relay needs a parent");
	pthread_once(&mh_once, mh_load);
	if (mh_rc)
		return dcr_err_set(e, mh_rc, "%s", mh_err.msg);
	struct sockaddr_storage ss;
	int v6 = 0, rc = parse_listen(o->listen ? o->listen : "127.0.0.1:0", &ss, &v6, e);
	if (rc)
		return rc;
	struct dcr_relay *r = dcr_calloc(1, sizeof(*r));
	if (!r)
		return dcr_err_sys(e, ENOMEM, "relay");
	r->o = *o;
	r->lock_fd = -1;
	r->cache_size = o->cache_size ? o->cache_size : 16ull << 30;
	/* one piece per GET by default: the store feeds a ranged GET's
	 * hasher as bytes arrive only in some cases (see dcr-relay(1)), and a
	 * piece goes out once it is hashed */
	r->window = o->window ? o->window : (1u << DCR_PIECE_LOG2);
	if (r->window < (1u << DCR_PIECE_LOG2))
		r->window = 1u << DCR_PIECE_LOG2;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	pthread_cond_init(&r->fcv, NULL);
	pthread_cond_init(&r->mcv, NULL);
	r->tab_size = TABLE_MIN;
	r->tab = dcr_calloc(r->tab_size, sizeof(*r->tab));
	r->parents = dcr_calloc(o->nparents, sizeof(*r->parents));
	if (!r->tab || !r->parents) {
		rc = dcr_err_sys(e, ENOMEM, "relay");
		goto fail;
	}
	/* a directory parent is read only under its root: what the relay
	 * reads, it serves, and a symbolic link somebody put in the store
	 * must not lead a child to the relay's own files */
	struct dcr_store_opts so = o->store ? *o->store : (struct dcr_store_opts){0};
	so.beneath = 1;
	for (size_t i = 0; i < o->nparents; i++) {
		const char *u = o->parents[i];
		size_t n = strlen(u);
		while (n > 1 && u[n - 1] == '/')
			n--;
		if (!(r->parents[i].url = strndup(u, n))) {
			rc = dcr_err_sys(e, ENOMEM, "relay");
			goto fail;
		}
		if ((rc = dcr_store_open(r->parents[i].url, &so, &r->parents[i].s, e)))
			goto fail;
		r->np++;
		/* from here on the URL is for messages, the log and the status
		 * document: without credentials */
		char *shown = dcr_url_redact(r->parents[i].url);
		if (!shown) {
			rc = dcr_err_sys(e, ENOMEM, "relay");
			goto fail;
		}
		free(r->parents[i].url);
		r->parents[i].url = shown;
	}
	if (o->cache_dir) {
		if ((rc = dcr_mkdir_p(o->cache_dir, e)))
			goto fail;
		r->spool = dcr_strdup(o->cache_dir);
	} else {
		const char *td = getenv("TMPDIR");
		r->spool = dcr_asprintf("%s/dcr-relay.XXXXXX", td && *td ? td : "/tmp");
		if (r->spool && !mkdtemp(r->spool)) {
			rc = dcr_err_sys(e, errno, "cannot create '%s'", r->spool);
			goto fail;
		}
		r->spool_temp = 1;
	}
	if (!r->spool) {
		rc = dcr_err_sys(e, ENOMEM, "relay");
		goto fail;
	}
	if (!r->spool_temp && (rc = lock_cache(r, e)))
		goto fail;
	if (!r->spool_temp)
		reload_dir(r, "");
	int par = o->parallel > 0 ? o->parallel : 4;
	r->workers = dcr_calloc((size_t)par + META_THREADS, sizeof(*r->workers));
	if (!r->workers) {
		rc = dcr_err_sys(e, ENOMEM, "relay");
		goto fail;
	}
	for (int i = 0; i < par + META_THREADS; i++) {
		if (pthread_create(&r->workers[i], NULL, i < par ? fetch_worker : meta_worker, r)) {
			rc = dcr_err_sys(e, EAGAIN, "cannot start a thread");
			goto fail;
		}
		r->nworkers++;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME;
	if (mh.is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
		flags |= MHD_USE_EPOLL;
	else
		flags |= MHD_USE_POLL;
	if (v6)
		flags |= MHD_USE_IPv6;
	unsigned threads = o->threads > 0 ? (unsigned)o->threads : 4;
	unsigned maxc = o->max_connections ? o->max_connections : 4096u;
	unsigned per_ip = o->max_per_ip ? o->max_per_ip : (maxc + 3) / 4;
	errno = 0;
	r->d = mh.start_daemon(flags, 0, NULL, NULL, on_request, r, MHD_OPTION_SOCK_ADDR,
				(struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE, threads,
				MHD_OPTION_CONNECTION_LIMIT, maxc,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
				MHD_OPTION_CONNECTION_TIMEOUT,
				o->idle_timeout_s ? o->idle_timeout_s : 60u,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, r,
				MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
	if (!r->d) {
		rc = dcr_err_sys(e, errno ? errno : EADDRINUSE, "cannot listen on '%s'", o->listen);
		goto fail;
	}
	const union MHD_DaemonInfo *di = mh.get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT);
	r->port = di ? di->port : 0;
	char host[INET6_ADDRSTRLEN] = "?";
	if (v6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
	else
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
	snprintf(r->listen, sizeof(r->listen), v6 ? "[%s]:%u" : "%s:%u", host, r->port);
	*out = r;
	return 0;
fail:
	dcr_relay_stop(r);
	return rc;
}

unsigned dcr_relay_port(const struct dcr_relay *r)
{
	return r->port;
}

/* Objects of a job queue that never ran, failed (under r->mu). */
static void fail_queue(struct dcr_relay *r, struct robj **q)
{
	while (*q) {
		struct robj *o = *q;
		*q = o->qnext;
		o->state = O_FAILED;
		dcr_err_set(&o->err, -ECANCELED, "the relay is stopping");
		obj_put(r, o);
	}
}

void dcr_relay_stop(struct dcr_relay *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stopping = 1;
	struct rreq *l = wake(r, NULL);
	pthread_cond_broadcast(&r->cv);
	pthread_cond_broadcast(&r->fcv);
	pthread_cond_broadcast(&r->mcv);
	pthread_mutex_unlock(&r->mu);
	resume_all(l);
	for (int i = 0; i < r->nworkers; i++)
		pthread_join(r->workers[i], NULL);
	/* the jobs never run: their requests answer 503 */
	pthread_mutex_lock(&r->mu);
	fail_queue(r, &r->fq);
	r->fq_tail = NULL;
	fail_queue(r, &r->mq);
	while (r->mreq) {
		struct rreq *q = r->mreq;
		r->mreq = q->tnext;
		q->trc = dcr_err_set(&q->terr, -ECANCELED, "the relay is stopping");
		q->kind = Q_DONE + q->kind;
	}
	r->mreq_tail = NULL;
	while (r->pulls)
		pthread_cond_wait(&r->cv, &r->mu);
	l = wake(r, NULL);
	pthread_mutex_unlock(&r->mu);
	resume_all(l);
	if (r->d)
		mh.stop_daemon(r->d);
	pthread_mutex_lock(&r->mu);
	for (size_t h = 0; r->tab && h < r->tab_size; h++)
		while (r->tab[h]) {
			struct robj *o = r->tab[h];
			if (r->spool_temp || o->state != O_DONE) {
				obj_drop(r, o);
			} else {
				tab_remove(r, o);
				obj_put(r, o);
			}
		}
	pthread_mutex_unlock(&r->mu);
	if (r->spool_temp && r->spool)
		remove_tree(r->spool);
	for (size_t i = 0; i < r->np; i++)
		dcr_store_close(r->parents[i].s);
	if (r->parents)
		for (size_t i = 0; i < r->o.nparents; i++)
			free(r->parents[i].url);
	free(r->parents);
	free(r->workers);
	free(r->tab);
	free(r->spool);
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	pthread_cond_destroy(&r->fcv);
	pthread_cond_destroy(&r->mcv);
	free(r);
}
