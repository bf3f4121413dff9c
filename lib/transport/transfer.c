/* transfer.c - dcr-push and dcr-pull over any store. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/manifest.h"
#include "core/packio.h"
#include "core/pset.h"
#include "core/sign.h"
#include "core/summary.h"
#include "core/trust.h"
#include "core/util.h"
#include "transport/transfer.h"

int dcr_store_manifest_head(struct dcr_store *s, const char *name, struct dcr_manifest *m,
			    struct dcr_err *e)
{
	uint8_t head[DCR_MANIFEST_HEAD_LEN];
	char *mn = dcr_asprintf("%s/%s", name, DCR_MANIFEST_NAME);
	int r = mn ? dcr_store_get_range(s, mn, 0, sizeof(head), head, e)
		   : dcr_err_sys(e, ENOMEM, "manifest");
	if (!r)
		r = dcr_manifest_head(head, sizeof(head), mn, m, e);
	free(mn);
	return r;
}

int dcr_split_store_url(const char *arg, char **store, char **name, struct dcr_err *e)
{
	/* trailing slashes go (a shell completes a directory store's pack
	 * directory with one) */
	size_t n = strlen(arg);
	while (n > 1 && arg[n - 1] == '/')
		n--;
	char *a = strndup(arg, n);
	if (!a)
		return dcr_err_sys(e, ENOMEM, "%s", arg);
	const char *slash = strrchr(a, '/');
	const char *scheme = strstr(a, "://");
	int r = 0;
	*store = *name = NULL;
	if (!slash || !slash[1] || (scheme && slash < scheme + 3) ||
	    (scheme && !strchr(scheme + 3, '/'))) {
		char *shown = dcr_url_redact(arg);
		r = dcr_err_set(e, DCR_EFORMAT,
				"'%s' is not STORE/NAME (e.g. /srv/store/v42 or s3://bucket/prefix/v42)",
				shown ? shown : "the argument");
		free(shown);
	} else {
		*store = slash == a ? dcr_strdup("/") : strndup(a, (size_t)(slash - a));
		*name = dcr_strdup(slash + 1);
		r = !*store || !*name ? dcr_err_sys(e, ENOMEM, "%s", arg)
				      : dcr_store_check_name(*name, e);
	}
	free(a);
	return r;
}

static char *obj(const char *name, const char *entry)
{
	return dcr_asprintf("%s/%s", name, entry);
}

/* ---- push ---- */

struct slot {
	struct dcr_store_job job;
	struct dcr_blob data; /* taken from the pack input: no copy */
	char *oname;
	int busy;
};

static int finish_slot(struct dcr_store *s, struct slot *sl, struct dcr_err *e)
{
	if (!sl->busy)
		return 0;
	int r = dcr_store_wait(s, &sl->job);
	if (r)
		*e = sl->job.err;
	dcr_blob_free(&sl->data);
	free(sl->oname);
	sl->oname = NULL;
	sl->busy = 0;
	return r;
}

/* The manifest (and its signature, when the pack is signed) of a pack
 * being pushed, kept until every payload is up. */
struct push_tail {
	uint8_t *man, *sig;
	size_t man_len, sig_len;
	int summary;   /* man is a producer's summary (dcr-pack --producer) */
	uint32_t prod; /* its producer */
};

/* Keep a copy of entry buf as *dst. */
static int keep(uint8_t **dst, size_t *dlen, const uint8_t *buf, size_t len, struct dcr_err *e)
{
	if (!(*dst = malloc(len ? len : 1)))
		return dcr_err_sys(e, ENOMEM, "push");
	memcpy(*dst, buf, len);
	*dlen = len;
	return 0;
}

/* The manifest against the payloads that went up: each one it lists, with
 * its size and digest, and no other; with o->dense a dense copy's, and
 * its target o->want_target (where set), before it goes up. */
static int push_check(const struct push_tail *t, const struct pset *up,
		      const struct dcr_xfer_opts *o, struct dcr_err *e)
{
	struct dcr_manifest m;
	const dcr_digest *want = o ? o->want_target : NULL;
	int r = dcr_manifest_parse(t->man, t->man_len, DCR_MANIFEST_NAME, &m, e);
	if (r)
		return r;
	if (o && o->dense && !m.dense) {
		dcr_manifest_release(&m);
		return dcr_err_set(e, DCR_EFORMAT,
				   "the pack is not a dense copy (dcr-diff --dense makes one): its manifest was not written (its payloads were)");
	}
	if (want && memcmp(&m.target, want, sizeof(*want))) {
		char a[65], b[65];
		dcr_digest_hex(&m.target, a);
		dcr_digest_hex(want, b);
		dcr_manifest_release(&m);
		return dcr_err_set(e, DCR_ECONFLICT,
				   "the pack reaches state %.12s, not %.12s: its manifest was not written (its payloads were)",
				   a, b);
	}
	for (uint32_t i = 0; i < m.npayloads && !r; i++) {
		uint32_t idx = dcr_manifest_index(&m, i);
		const struct pset_ent *pe = pset_find(up, idx);
		if (!pe)
			r = dcr_err_set(e, DCR_EFORMAT, "pack lacks payload %u named by its manifest", idx);
		else if (memcmp(pe->digest.b, m.pdigest[i].b, 32) || pe->size != m.psize[i])
			r = dcr_err_set(e, DCR_EDIGEST, "payload %u does not match the manifest", idx);
	}
	/* each one the manifest lists is there, none twice: no others */
	if (!r && up->n != m.npayloads)
		r = dcr_err_set(e, DCR_EFORMAT, "pack holds %zu payloads, its manifest %u", up->n,
				m.npayloads);
	dcr_manifest_release(&m);
	return r;
}

/* The manifest or its signature, kept until the payloads are up: 1 when
 * ename was one of them, 0 when it is something else. */
static int push_tail_entry(struct push_tail *t, const char *ename, const uint8_t *buf,
			   size_t len, struct dcr_err *e)
{
	int r;
	uint32_t prod;
	if (!strcmp(ename, DCR_MANIFEST_NAME)) {
		r = keep(&t->man, &t->man_len, buf, len, e);
	} else if (dcr_summary_name_parse(ename, &prod)) {
		t->summary = 1;
		t->prod = prod;
		r = keep(&t->man, &t->man_len, buf, len, e);
	} else if (!strcmp(ename, DCR_MANIFEST_SIG_NAME)) {
		/* the signature goes up after the payloads, before the manifest:
		 * whoever sees the manifest finds it */
		if (t->sig)
			r = dcr_err_set(e, DCR_EFORMAT, "pack: two '%s' entries", ename);
		else if (len > DCR_SIG_MAX)
			r = dcr_err_set(e, DCR_EFORMAT, "pack: '%s' is %zu bytes, not a signature",
					ename, len);
		else
			r = keep(&t->sig, &t->sig_len, buf, len, e);
	} else {
		return 0;
	}
	return r ? r : 1;
}

/* A payload entry checked and noted in up: 1 to upload it, 0 when the
 * same bytes are already going up (as dcr-apply skips them). */
static int push_payload_entry(struct pset *up, const char *ename, const uint8_t *buf,
			      size_t len, struct dcr_err *e)
{
	uint32_t idx;
	struct dcr_payload pl;
	if (!dcr_payload_name_parse(ename, &idx))
		return dcr_err_set(e, DCR_EFORMAT, "pack: unexpected entry '%s'", ename);
	int r = dcr_payload_check(buf, len, ename, &pl, e);
	if (r)
		return r;
	if (pl.index != idx)
		return dcr_err_set(e, DCR_EFORMAT, "%s holds payload %u", ename, pl.index);
	if (idx >= DCR_PAYLOADS_MAX)
		return dcr_err_set(e, DCR_EFORMAT, "%s: payload index %u is too large (at most %u)",
				   ename, idx, DCR_PAYLOADS_MAX - 1);
	if ((r = pset_add(up, idx, len, &pl.digest)) == -EEXIST)
		return dcr_err_set(e, DCR_EFORMAT, "%s arrived twice with different contents", ename);
	return r < 0 ? dcr_err_sys(e, -r, "push") : r;
}

/* Upload the entry in hand (len bytes) from slot sl, in the background. */
static int push_submit(struct dcr_store *s, struct slot *sl, const char *name, const char *ename,
		       struct dcr_pack_in *in, size_t len, struct dcr_err *e)
{
	int r = finish_slot(s, sl, e); /* wait for the slot to be free */
	if (r)
		return r;
	if (!(sl->oname = obj(name, ename)))
		return dcr_err_sys(e, ENOMEM, "push");
	dcr_pack_in_take(in, &sl->data);
	memset(&sl->job, 0, sizeof(sl->job));
	sl->job.op = DCR_STORE_PUT;
	sl->job.name = sl->oname;
	sl->job.data = sl->data.p;
	sl->job.len = len;
	if ((r = dcr_store_submit(s, &sl->job, e))) {
		dcr_blob_free(&sl->data);
		free(sl->oname);
		sl->oname = NULL;
		return r;
	}
	sl->busy = 1;
	return 0;
}

/* What an earlier push of the name left there: its objects, listed once,
 * before this push writes (rc: how the listing went, err: why it failed). */
struct left {
	char **v;
	size_t n;
	int rc;
	struct dcr_err err;
};

/* The entry name of object o when o is name/ENTRY (a listing may hold
 * other names, whatever the store answers), else NULL. */
static const char *in_pack(const char *o, const char *name)
{
	size_t n = strlen(name);
	return !strncmp(o, name, n) && o[n] == '/' && !strchr(o + n + 1, '/') ? o + n + 1 : NULL;
}

/* A producer's pack (dcr-pack --producer): its summary checked against the
 * payloads that went up (each one it lists, and no other), the producer's
 * payloads of an earlier try that this one no longer makes removed, and
 * the summary put last. */
static int push_summary(struct dcr_store *s, const char *name, const struct push_tail *t,
			const struct pset *up, const struct left *lf, uint64_t *bytes,
			struct dcr_err *e)
{
	struct dcr_summary sm;
	char *sn = dcr_summary_name(t->prod);
	int r = sn ? dcr_summary_parse(t->man, t->man_len, sn, &sm, e)
		   : dcr_err_sys(e, ENOMEM, "push");
	if (r) {
		free(sn);
		return r;
	}
	if (sm.producer != t->prod)
		r = dcr_err_set(e, DCR_EFORMAT, "%s is producer %u's summary", sn, sm.producer);
	else if (t->sig)
		r = dcr_err_set(e, DCR_EFORMAT, "pack: a producer's pack has no signature (dcr-push --finalize --sign signs the manifest)");
	for (uint32_t i = 0; i < sm.npayloads && !r; i++) {
		const struct pset_ent *pe = pset_find(up, sm.pindex[i]);
		if (!pe)
			r = dcr_err_set(e, DCR_EFORMAT, "pack lacks payload %u named by its summary",
					sm.pindex[i]);
		else if (memcmp(pe->digest.b, sm.pdigest[i].b, 32) || pe->size != sm.psize[i])
			r = dcr_err_set(e, DCR_EDIGEST, "payload %u does not match the summary",
					sm.pindex[i]);
	}
	if (!r && up->n != sm.npayloads)
		r = dcr_err_set(e, DCR_EFORMAT, "pack holds %zu payloads, its summary %u", up->n,
				sm.npayloads);
	/* an earlier try of this producer may have made more payloads: they
	 * must go, so a listing that failed fails the push */
	if (!r && lf->rc) {
		r = lf->rc;
		*e = lf->err;
	}
	for (size_t i = 0; i < lf->n && !r; i++) {
		const char *b = in_pack(lf->v[i], name);
		uint32_t idx;
		if (b && dcr_payload_name_parse(b, &idx) && idx / DCR_PRODUCER_STRIDE == t->prod &&
		    idx % DCR_PRODUCER_STRIDE >= sm.npayloads) {
			r = dcr_store_delete(s, lf->v[i], e);
			if (r == DCR_ENOTFOUND)
				r = 0;
		}
	}
	char *so = r ? NULL : obj(name, sn);
	if (!r)
		r = so ? dcr_store_put(s, so, t->man, t->man_len, e) : dcr_err_sys(e, ENOMEM, "push");
	free(so);
	free(sn);
	dcr_summary_release(&sm);
	*bytes += t->man_len;
	return r;
}

/* Once every payload is up: what an earlier push of the name left (lf) is
 * deleted where this pack lacks it
 * (payloads it does not have; the signature when it has none, which a
 * reader with a key would take for this manifest's, changed): a directory
 * store's pack directory is read as a pack directory too, and a payload
 * its manifest does not list makes it a refused one. Best effort, as the
 * listing is: a store that refuses a DELETE (an S3 key without
 * s3:DeleteObject) keeps them, and readers that go by the manifest ignore
 * them. Then the signature, then the manifest, last. */
static int push_tail_put(struct dcr_store *s, const char *name, const struct push_tail *t,
			 const struct pset *up, const struct left *lf, uint64_t *bytes,
			 struct dcr_err *e)
{
	int r = 0;
	for (size_t i = 0; i < lf->n; i++) {
		const char *b = in_pack(lf->v[i], name);
		uint32_t idx;
		struct dcr_err de;
		if (b && (dcr_payload_name_parse(b, &idx) ? !pset_find(up, idx)
							  : !t->sig && !strcmp(b, DCR_MANIFEST_SIG_NAME)))
			(void)dcr_store_delete(s, lf->v[i], &de);
	}
	if (t->sig) {
		char *so = obj(name, DCR_MANIFEST_SIG_NAME);
		r = so ? dcr_store_put(s, so, t->sig, t->sig_len, e) : dcr_err_sys(e, ENOMEM, "push");
		free(so);
		*bytes += t->sig_len;
		if (r)
			return r;
	}
	char *mo = obj(name, DCR_MANIFEST_NAME);
	r = mo ? dcr_store_put(s, mo, t->man, t->man_len, e) : dcr_err_sys(e, ENOMEM, "push");
	free(mo);
	*bytes += t->man_len;
	return r;
}

int dcr_push(struct dcr_store *s, const char *name, struct dcr_pack_in *in,
	     const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e)
{
	int par = o && o->parallel > 0 ? o->parallel : 4;
	struct slot *slots = dcr_calloc((size_t)par, sizeof(*slots));
	struct pset up = {0}; /* payloads going up, by index: no room by index */
	struct push_tail t = {0};
	int next = 0, r = 0;
	uint64_t bytes = 0;
	uint32_t count = 0;
	if (!slots)
		return dcr_err_sys(e, ENOMEM, "push");
	/* what an earlier push of this name left there, listed before this one
	 * writes (on a new name nothing, and nothing to delete at the end); a
	 * pack's push goes on when the store does not list (a plain HTTP
	 * server may not), a producer's does not (push_summary) */
	struct left lf = {0};
	char *pfx = dcr_asprintf("%s/", name);
	lf.rc = pfx ? dcr_store_list(s, pfx, &lf.v, &lf.n, &lf.err)
		    : dcr_err_sys(&lf.err, ENOMEM, "push");
	free(pfx);
	const char *ename;
	const uint8_t *buf;
	size_t len;
	while ((r = dcr_pack_in_next(in, &ename, &buf, &len, e)) == 1) {
		if (t.man) {
			r = dcr_err_set(e, DCR_EFORMAT, "pack: entry '%s' after the manifest", ename);
			break;
		}
		if ((r = push_tail_entry(&t, ename, buf, len, e)) < 0)
			break;
		if (r) /* the manifest or its signature, kept */
			continue;
		if ((r = push_payload_entry(&up, ename, buf, len, e)) < 0)
			break;
		if (!r) /* a duplicate */
			continue;
		struct slot *sl = &slots[next];
		next = (next + 1) % par;
		if ((r = push_submit(s, sl, name, ename, in, len, e)))
			break;
		bytes += len;
		count++;
		if (o && o->progress)
			o->progress(o->progress_ctx, bytes, count);
	}
	for (int i = 0; i < par; i++) {
		struct dcr_err e2;
		int q = finish_slot(s, &slots[i], &e2);
		if (q && r >= 0 && !r) {
			r = q;
			*e = e2;
		}
	}
	if (r < 0)
		goto out;
	if (!t.man) {
		r = dcr_err_set(e, DCR_EFORMAT, "pack has no manifest; the manifest was not pushed");
		goto out;
	}
	if (t.summary)
		r = push_summary(s, name, &t, &up, &lf, &bytes, e);
	else
		r = (r = push_check(&t, &up, o, e))
			    ? r
			    : push_tail_put(s, name, &t, &up, &lf, &bytes, e);
	if (r)
		goto out;
	if (st) {
		st->payloads = count;
		st->bytes = bytes;
	}
out:
	dcr_store_names_free(lf.v, lf.n);
	free(slots);
	pset_free(&up);
	free(t.man);
	free(t.sig);
	return r;
}

/* ---- pull ---- */

/* Fetch one payload, check it (and its manifest digest when known). */
static int check_payload(const char *oname, const uint8_t *buf, size_t len, uint32_t idx,
			 const dcr_digest *sum, const dcr_digest *want, struct dcr_err *e)
{
	struct dcr_payload pl;
	int r = dcr_payload_check_digest(buf, len, oname, sum, &pl, e);
	if (r)
		return r;
	dcr_payload_release(&pl);
	if (pl.index != idx)
		return dcr_err_set(e, DCR_EFORMAT, "'%s' holds payload %u", oname, pl.index);
	if (want && memcmp(pl.digest.b, want->b, 32))
		return dcr_err_set(e, DCR_EDIGEST, "'%s' does not match the manifest's digest", oname);
	return 0;
}

/* An ordered pipeline: par threads each take the next job of [0, n)
 * within a window of par ahead of the one being handed on, and do it (a
 * GET and its checks), so downloads and digests run in parallel; the
 * caller's thread hands the results on in order. Buffers handed on are
 * kept for the next jobs: fresh memory costs more than a copy. */
struct slot_res {
	struct dcr_blob b;
	int state; /* 0 empty, 1 working, 2 ready, 3 on hand (skipped) */
	int held;  /* not taken: it waits for the manifest (fetch_one) */
	int rc;
	struct dcr_err err;
	void *tok; /* staged output (dcr_pack_out.stage), or NULL */
};

struct ordered {
	void (*work)(void *ctx, uint64_t job, struct slot_res *sr);
	int (*emit)(void *ctx, uint64_t job, struct slot_res *sr, struct dcr_err *e);
	void (*discard)(void *ctx, struct slot_res *sr); /* a result never emitted */
	void *ctx;
	uint64_t n, next_take, emitted;
	unsigned par;
	struct slot_res *slots; /* par, job % par */
	struct dcr_blob *pool;	/* heap buffers handed on, for reuse */
	unsigned npool;
	int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void *ordered_worker(void *arg)
{
	struct ordered *f = arg;
	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->stop && f->next_take < f->n && f->next_take >= f->emitted + f->par)
			pthread_cond_wait(&f->cv, &f->mu);
		if (f->stop || f->next_take >= f->n)
			break;
		uint64_t job = f->next_take++;
		struct slot_res *sr = &f->slots[job % f->par];
		sr->state = 1;
		struct slot_res tmp = {0};
		if (f->npool)
			tmp.b = f->pool[--f->npool];
		pthread_mutex_unlock(&f->mu);
		f->work(f->ctx, job, &tmp);
		if (tmp.state != 3)
			tmp.state = 2;
		pthread_mutex_lock(&f->mu);
		*sr = tmp;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

static int run_ordered(struct ordered *f, struct dcr_err *e)
{
	unsigned par = f->par;
	f->slots = dcr_calloc(par, sizeof(*f->slots));
	f->pool = dcr_calloc(par, sizeof(*f->pool));
	if (!f->slots || !f->pool) {
		free(f->slots);
		free(f->pool);
		return dcr_err_sys(e, ENOMEM, "pull");
	}
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	pthread_t th[256];
	unsigned nth = 0;
	int r = 0;
	for (unsigned i = 0; i < par && i < f->n; i++)
		if (!pthread_create(&th[nth], NULL, ordered_worker, f))
			nth++;
	if (!nth && f->n)
		r = dcr_err_sys(e, EAGAIN, "cannot start a thread");
	for (uint64_t job = 0; !r && job < f->n; job++) {
		struct slot_res *sr = &f->slots[job % par];
		pthread_mutex_lock(&f->mu);
		while (sr->state < 2)
			pthread_cond_wait(&f->cv, &f->mu);
		struct slot_res got = *sr;
		memset(sr, 0, sizeof(*sr));
		pthread_mutex_unlock(&f->mu);
		if (got.rc && got.state != 3) {
			*e = got.err;
			r = got.rc;
		} else {
			r = f->emit(f->ctx, job, &got, e);
		}
		if (got.tok && f->discard)
			f->discard(f->ctx, &got);
		pthread_mutex_lock(&f->mu);
		if (!got.b.map && got.b.cap && f->npool < par)
			f->pool[f->npool++] = got.b;
		else
			dcr_blob_free(&got.b);
		f->emitted = job + 1;
		pthread_cond_broadcast(&f->cv);
		pthread_mutex_unlock(&f->mu);
	}
	pthread_mutex_lock(&f->mu);
	f->stop = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	for (unsigned i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < par; i++) {
		if (f->slots[i].tok && f->discard)
			f->discard(f->ctx, &f->slots[i]);
		dcr_blob_free(&f->slots[i].b);
	}
	for (unsigned i = 0; i < f->npool; i++)
		dcr_blob_free(&f->pool[i]);
	free(f->slots);
	free(f->pool);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	return r;
}

/* The sources of one pack (dcr_pull_from) and the one in use: a source
 * that fails hands over to the next, for every fetch after it. */
struct sources {
	const struct dcr_pull_source *v;
	size_t n;
	size_t cur;	 /* read and moved atomically */
	uint8_t *nolist; /* nolist[i]: source i answered that it does not list */
};

static size_t src_cur(struct sources *ss)
{
	return __atomic_load_n(&ss->cur, __ATOMIC_RELAXED);
}

/* Source i failed: the next one is current (if nobody moved on already). */
static void src_failed(struct sources *ss, size_t i)
{
	size_t want = i;
	__atomic_compare_exchange_n(&ss->cur, &want, (i + 1) % ss->n, 0, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
}

/* Payload idx of the pack at source i: its entry name, object name and
 * URL (for messages); url is NULL when memory ran out. */
struct pnames {
	char *en, *on, *url;
};

static void pnames_get(const struct sources *ss, size_t i, uint32_t idx, struct pnames *n)
{
	n->en = dcr_payload_name(idx);
	n->on = n->en ? obj(ss->v[i].name, n->en) : NULL;
	n->url = n->on ? dcr_asprintf("%s/%s", dcr_store_url(ss->v[i].s), n->on) : NULL;
}

static void pnames_free(struct pnames *n)
{
	free(n->en);
	free(n->on);
	free(n->url);
}

/* ---- whole payloads: fetched, checked, handed on ---- */

struct fetch {
	struct sources *src;
	const struct dcr_manifest *m; /* or NULL while waiting for it */
	int (*have)(void *ctx, uint32_t index, dcr_digest *digest);
	void *have_ctx;
	uint32_t lo;
	struct dcr_pack_out out;
	const struct dcr_xfer_opts *o;
	uint64_t *bytes;
	int *skipped;
	double deadline; /* waiting for the manifest: the end of the wait */
	uint32_t held;	 /* the first payload held back (see held_back), or none */
};

/* What emit_one answers for a payload held back: the ordered fetch stops
 * there, no error. */
#define HELD 1

/* Before the manifest, a payload is taken whole into memory up to
 * DCR_PULL_AHEAD_MAX bytes, no more (a server may send a body without
 * end, and nothing yet says how large it is): when a server's GET
 * stopped there (DCR_EFORMAT) and the server gives the object's size as
 * larger, the payload waits for the manifest, which lists its size. */
static int held_back(const struct fetch *f, struct dcr_store *s, const char *on, int rc)
{
	uint64_t size;
	struct dcr_err se;
	return !f->m && rc == DCR_EFORMAT && !dcr_store_is_local(s) &&
	       !dcr_store_stat(s, on, &size, &se) && size > DCR_PULL_AHEAD_MAX;
}

/* While the manifest has not come, a payload listed but not checking out
 * may still be being written by a store whose PUT is not atomic (s3rver
 * shows an object's file as it fills; a directory served over HTTP that
 * some other tool writes): it is fetched again after 0.2 s, doubled each
 * time up to 2 s, FETCH_AGAIN times at most and never past the wait, so
 * that a store serving bad bytes costs a few copies, not one every 0.2 s
 * for the whole wait. *tries counts the fetches again. */
#define FETCH_AGAIN 8
static int fetch_again(const struct fetch *f, int rc, int *tries)
{
	double d = *tries < 4 ? 0.2 * (1 << *tries) : 2.0;
	if (f->m || (rc != DCR_EFORMAT && rc != DCR_EDIGEST) || *tries >= FETCH_AGAIN ||
	    dcr_now_s() + d > f->deadline)
		return 0;
	usleep((useconds_t)(d * 1e6));
	(*tries)++;
	return 1;
}

static void fetch_one(void *ctx, uint64_t job, struct slot_res *sr)
{
	struct fetch *f = ctx;
	uint32_t pos = f->lo + (uint32_t)job, idx = f->m ? dcr_manifest_index(f->m, pos) : pos;
	dcr_digest d, sum;
	const dcr_digest *want = f->m ? &f->m->pdigest[pos] : NULL;
	if (f->have && f->have(f->have_ctx, idx, &d) && (!want || !memcmp(d.b, want->b, 32))) {
		sr->state = 3;
		return;
	}
	/* from the current source; a failure tries the others, each once; a
	 * server's bytes that do not check out are asked for once more, fresh:
	 * a relay between checks its cached copy again (a disk's damage under
	 * it would otherwise fail every child it serves) */
	int tries = 0;
again:;
	size_t first = src_cur(f->src);
	for (size_t t = 0; t < f->src->n; t++) {
		size_t i = (first + t) % f->src->n;
		int fresh = 0, bad_bytes = 0;
		struct pnames pn;
	fetch_fresh:
		pnames_get(f->src, i, idx, &pn);
		struct dcr_payload_hash ph;
		struct dcr_hasher h = {dcr_payload_hash_update, &ph};
		dcr_payload_hash_init(&ph);
		if (sr->b.map)
			dcr_blob_free(&sr->b);
		/* a server sending more than the manifest lists is stopped there */
		sr->b.max = f->m ? f->m->psize[pos] : DCR_PULL_AHEAD_MAX;
		sr->b.fresh = fresh;
		if (!pn.url)
			sr->rc = dcr_err_sys(&sr->err, ENOMEM, "pull");
		else if (!(sr->rc = dcr_store_get_blob_hashed(f->src->v[i].s, pn.on, &sr->b, 32, &h,
							       &sr->err))) {
			sr->rc = dcr_payload_hash_final(&ph, &sum)
					 ? dcr_err_sys(&sr->err, ENOMEM, "%s", pn.url)
					 : check_payload(pn.url, sr->b.p, sr->b.len, idx, &sum, want,
							 &sr->err);
			bad_bytes = sr->rc == DCR_EDIGEST || sr->rc == DCR_EFORMAT;
		} else {
			dcr_payload_hash_final(&ph, &sum); /* frees it */
			if (held_back(f, f->src->v[i].s, pn.on, sr->rc)) {
				sr->rc = 0;
				sr->held = 1;
				sr->b.len = 0;
				pnames_free(&pn);
				return;
			}
		}
		/* checked: write it out (and flush it) here, in parallel, where
		 * the output can; the caller makes it visible in order */
		int out_rc = 0;
		if (!sr->rc && f->out.stage)
			out_rc = sr->rc = f->out.stage(f->out.ctx, pn.en, sr->b.p, sr->b.len, &sr->tok,
						       &sr->err);
		pnames_free(&pn);
		if (!sr->rc || out_rc || !pn.url)
			return;
		if (bad_bytes && !fresh && f->m && !dcr_store_is_local(f->src->v[i].s)) {
			fresh = 1;
			goto fetch_fresh;
		}
		src_failed(f->src, i);
	}
	if (fetch_again(f, sr->rc, &tries))
		goto again;
}

static int emit_one(void *ctx, uint64_t job, struct slot_res *sr, struct dcr_err *e)
{
	struct fetch *f = ctx;
	uint32_t pos = f->lo + (uint32_t)job, idx = f->m ? dcr_manifest_index(f->m, pos) : pos;
	if (sr->state == 3) {
		(*f->skipped)++;
		return 0;
	}
	if (sr->held) {
		f->held = pos;
		return HELD;
	}
	int r;
	if (sr->tok) {
		r = f->out.commit(f->out.ctx, sr->tok, e);
		sr->tok = NULL;
	} else {
		char *en = dcr_payload_name(idx);
		dcr_fault_point(f->o ? f->o->fault : NULL);
		r = en ? f->out.entry(f->out.ctx, en, sr->b.p, sr->b.len, e)
		       : dcr_err_sys(e, ENOMEM, "pull");
		free(en);
	}
	*f->bytes += sr->b.len;
	if (!r && f->o && f->o->progress)
		f->o->progress(f->o->progress_ctx, *f->bytes, pos + 1 - (uint64_t)*f->skipped);
	return r;
}

static void drop_one(void *ctx, struct slot_res *sr)
{
	struct fetch *f = ctx;
	f->out.drop(f->out.ctx, sr->tok);
	sr->tok = NULL;
}

/* Fetch payloads [lo, hi) and hand each on in order; *upto: where that
 * stopped, hi or the first payload held back for the manifest. */
static int fetch_range(struct sources *src, const struct dcr_manifest *m,
		       int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
		       unsigned par, uint32_t lo, uint32_t hi, struct dcr_pack_out out,
		       const struct dcr_xfer_opts *o, double deadline, uint64_t *bytes,
		       int *skipped, uint32_t *upto, struct dcr_err *e)
{
	*upto = hi;
	if (lo >= hi)
		return 0;
	struct fetch f = {.src = src, .m = m, .have = have, .have_ctx = have_ctx,
			  .lo = lo, .out = out, .o = o, .bytes = bytes, .skipped = skipped,
			  .deadline = deadline, .held = hi};
	struct ordered q = {.work = fetch_one, .emit = emit_one, .discard = drop_one, .ctx = &f,
			    .n = hi - lo, .par = par};
	int r = run_ordered(&q, e);
	if (r == HELD) {
		*upto = f.held;
		r = 0;
	}
	return r;
}

/* ---- verified streaming: parts of payloads, checked piece by piece ----
 *
 * With the manifest's piece CVs (BLAKE3, 1 MiB pieces) every part of a
 * payload can be checked on its own, so payloads go out in parts (16 MiB
 * by default: object stores want ranges of 8-16 MB to amortize a
 * request) as they arrive, ranged GETs run in parallel within a payload,
 * and memory stays at par parts, reused: nothing unchecked is passed on,
 * and no whole payload is held. */
struct part {
	uint32_t idx;  /* payload */
	uint64_t off;  /* bytes into it */
	size_t len;
};

struct stream {
	struct sources *src;
	const struct dcr_manifest *m;
	struct part *parts;
	size_t part_cap; /* bytes of the largest part */
	struct dcr_pack_out out;
	const struct dcr_xfer_opts *o;
	uint64_t *bytes;
};

/* A dcr_hasher that checks the pieces of a part as its bytes arrive
 * (dcr_piece_check; a single piece: the root); the trailer is not
 * hashed. */
struct piece_check {
	struct dcr_piece_check pc;
	long bad; /* first piece that differs, or -1 */
};

static void piece_check_update(void *ctx, const void *p, size_t n)
{
	struct piece_check *c = ctx;
	const uint8_t *q = p;
	while (n && c->pc.pos < c->pc.end) {
		int ok;
		long k = dcr_piece_check_feed(&c->pc, &q, &n, &ok);
		if (k >= 0 && !ok && c->bad < 0)
			c->bad = k;
	}
}

static int check_part(const struct stream *f, const struct part *pt, const uint8_t *buf,
		      const struct piece_check *c, const char *url, struct dcr_err *e)
{
	const struct dcr_manifest *m = f->m;
	uint64_t size = m->psize[pt->idx];
	if (pt->off == 0) {
		/* another payload under this name says so first */
		struct dcr_payload pl;
		if (pt->len >= DCR_PAYLOAD_HDR_LEN && !memcmp(buf, DCR_PAYLOAD_MAGIC, 8) &&
		    get_le32(buf + 64) != dcr_manifest_index(m, pt->idx))
			return dcr_err_set(e, DCR_EFORMAT, "'%s' holds payload %u", url,
					   get_le32(buf + 64));
		int r = dcr_payload_check_head(buf, pt->len, size, url, &pl, e);
		if (r)
			return r;
	}
	if (c->bad >= 0)
		return dcr_err_set(e, DCR_EDIGEST,
				   "'%s' does not match the manifest's digest (piece %ld)", url, c->bad);
	const struct dcr_piece_check *pc = &c->pc;
	if (pc->open || pc->pos != (pt->off + pt->len < pc->end ? pt->off + pt->len : pc->end))
		return dcr_err_set(e, -EIO, "'%s': the part at %llu was not hashed whole", url,
				   (unsigned long long)pt->off);
	/* the trailer, in the last part */
	if (pt->off + pt->len == size &&
	    DCR_CHECKSUM_DIFFERS(m->pdigest[pt->idx].b, buf + pt->len - 32))
		return dcr_err_set(e, DCR_EDIGEST, "'%s' is corrupt: checksum mismatch", url);
	return 0;
}

/* Where a part fetched (or failed) from one source may go on from
 * another: past the pieces that checked out. */
static uint64_t part_resume(const struct dcr_manifest *m, const struct part *pt,
			    const struct piece_check *c)
{
	uint64_t at = c->pc.pos >= c->pc.end ? c->pc.end : c->pc.pos >> m->piece_log2 << m->piece_log2;
	if (c->bad >= 0 && ((uint64_t)c->bad << m->piece_log2) < at)
		at = (uint64_t)c->bad << m->piece_log2;
	return at < pt->off ? pt->off : at;
}

static void fetch_part(void *ctx, uint64_t job, struct slot_res *sr)
{
	struct stream *f = ctx;
	const struct part *pt = &f->parts[job];
	if (sr->b.cap < pt->len) {
		dcr_blob_free(&sr->b);
		if (!(sr->b.p = malloc(f->part_cap))) {
			sr->rc = dcr_err_sys(&sr->err, ENOMEM, "pull");
			return;
		}
		sr->b.cap = f->part_cap;
	}
	sr->b.len = pt->len;
	/* from the current source; when it fails, from the next, resuming
	 * after the pieces that checked out; bytes that do not check out are
	 * asked for again from the same server once, fresh (as fetch_one) */
	uint64_t at = pt->off;
	size_t first = src_cur(f->src);
	for (size_t t = 0; t < f->src->n; t++) {
		size_t i = (first + t) % f->src->n;
		int fresh = 0;
		struct pnames pn;
	part_fresh:
		pnames_get(f->src, i, dcr_manifest_index(f->m, pt->idx), &pn);
		const char *url = pn.url;
		struct piece_check c = {.bad = -1};
		dcr_piece_check_init(&c.pc, f->m, pt->idx, at);
		if (!url) {
			sr->rc = dcr_err_sys(&sr->err, ENOMEM, "pull");
			pnames_free(&pn);
			return;
		}
		if (at < pt->off + pt->len) {
			struct dcr_hasher h = {piece_check_update, &c};
			sr->rc = dcr_store_get_range_hashed(f->src->v[i].s, pn.on, at,
							    (size_t)(pt->off + pt->len - at),
							    sr->b.p + (at - pt->off), &h, fresh,
							    &sr->err);
		} else {
			sr->rc = 0;
		}
		if (sr->rc == DCR_EFORMAT) /* shorter than the manifest says */
			sr->rc = dcr_err_set(&sr->err, DCR_EFORMAT,
					     "%s: body is shorter than the manifest's %llu bytes (truncated)",
					     url, (unsigned long long)f->m->psize[pt->idx]);
		else if (!sr->rc) /* the part is whole in the buffer, wherever it came from */
			sr->rc = check_part(f, pt, sr->b.p, &c, url, &sr->err);
		pnames_free(&pn);
		if (!sr->rc)
			return;
		at = part_resume(f->m, pt, &c);
		if (sr->rc == DCR_EDIGEST && !fresh && !dcr_store_is_local(f->src->v[i].s)) {
			fresh = 1;
			goto part_fresh;
		}
		src_failed(f->src, i);
	}
}

static int emit_part(void *ctx, uint64_t job, struct slot_res *sr, struct dcr_err *e)
{
	struct stream *f = ctx;
	const struct part *pt = &f->parts[job];
	uint64_t size = f->m->psize[pt->idx];
	int r = 0;
	if (pt->off == 0) {
		char *en = dcr_payload_name(dcr_manifest_index(f->m, pt->idx));
		r = en ? f->out.begin(f->out.ctx, en, size, e) : dcr_err_sys(e, ENOMEM, "pull");
		free(en);
	}
	r = r ? r : f->out.data(f->out.ctx, sr->b.p, pt->len, e);
	*f->bytes += pt->len;
	if (!r && pt->off + pt->len == size) {
		r = f->out.end(f->out.ctx, e);
		if (!r && f->o && f->o->progress)
			f->o->progress(f->o->progress_ctx, *f->bytes, pt->idx + 1);
	}
	return r;
}

static int stream_range(struct sources *src, const struct dcr_manifest *m,
			unsigned par, uint32_t lo, uint32_t hi, struct dcr_pack_out out,
			const struct dcr_xfer_opts *o, uint64_t *bytes, struct dcr_err *e)
{
	uint64_t piece = (uint64_t)1 << m->piece_log2, n = 0;
	uint64_t want = o && o->part_size ? o->part_size : DCR_PART_SIZE;
	uint64_t step = want < piece ? piece : want / piece * piece;
	for (uint32_t i = lo; i < hi; i++) /* sizes are bounded: dcr_manifest_parse */
		n += m->psize[i] / step + (m->psize[i] % step != 0);
	struct part *parts = n < SIZE_MAX / sizeof(*parts) ? dcr_calloc(n ? n : 1, sizeof(*parts))
							    : NULL;
	if (!parts)
		return dcr_err_sys(e, ENOMEM, "pull");
	struct stream f = {.src = src, .m = m, .parts = parts, .part_cap = 1, .out = out,
			   .o = o, .bytes = bytes};
	n = 0;
	for (uint32_t i = lo; i < hi; i++)
		for (uint64_t off = 0, len; off < m->psize[i]; off += len) {
			len = m->psize[i] - off < step ? m->psize[i] - off : step;
			/* no part lies wholly in the 32-byte trailer, which no piece
			 * covers (its check would start past the hashed end): a tail
			 * that short goes with the part before it */
			if (m->psize[i] - off - len <= 32)
				len = m->psize[i] - off;
			parts[n++] = (struct part){i, off, (size_t)len};
			if (len > f.part_cap)
				f.part_cap = (size_t)len;
		}
	struct ordered q = {.work = fetch_part, .emit = emit_part, .ctx = &f, .n = n, .par = par};
	int r = run_ordered(&q, e);
	free(parts);
	return r;
}

int dcr_pull(struct dcr_store *s, const char *name, struct dcr_pack_out out,
	     int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
	     const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e)
{
	struct dcr_pull_source src = {s, name};
	return dcr_pull_from(&src, 1, out, have, have_ctx, o, st, e);
}

/* The manifest's signature beside it in source i (NULL and 0 when the
 * pack is unsigned): no more than DCR_SIG_MAX bytes of it taken, however
 * much a server would send (dcr_store_get_small). */
static int get_signature(struct sources *ss, size_t i, uint8_t **sig, size_t *sig_len,
			 struct dcr_err *e)
{
	char *so = obj(ss->v[i].name, DCR_MANIFEST_SIG_NAME);
	if (!so)
		return dcr_err_sys(e, ENOMEM, "pull");
	free(*sig);
	int r = dcr_store_get_small(ss->v[i].s, so, DCR_SIG_MAX, "a signature", sig, sig_len, e);
	free(so);
	return r;
}

/* The manifest (and its signature) from the first source that has one
 * that parses and, when o->trust asks for it, is signed by a trusted key:
 * 0, or DCR_ENOTFOUND when none has one, or the last source's error. A
 * source that serves a manifest the trust refuses is passed over like one
 * that serves a broken one. */
static int get_manifest(struct sources *ss, uint8_t **man, size_t *man_len, uint8_t **sig,
			size_t *sig_len, struct dcr_manifest *m, const struct dcr_xfer_opts *o,
			struct dcr_err *e)
{
	int r = DCR_ENOTFOUND, absent = 0;
	size_t first = src_cur(ss);
	for (size_t t = 0; t < ss->n; t++) {
		size_t i = (first + t) % ss->n;
		struct dcr_store *s = ss->v[i].s;
		char *mo = obj(ss->v[i].name, DCR_MANIFEST_NAME);
		char *url = mo ? dcr_asprintf("%s/%s", dcr_store_url(s), mo) : NULL;
		if (!url) {
			free(mo);
			return dcr_err_sys(e, ENOMEM, "pull");
		}
		/* a server's manifest that does not check out is asked for once
		 * more, fresh: a relay between checks its cached copy again */
		int fresh = 0, bad_bytes;
	man_fresh:
		bad_bytes = 0;
		free(*man);
		*man = NULL;
		r = fresh ? dcr_store_get_fresh(s, mo, man, man_len, e)
			  : dcr_store_get(s, mo, man, man_len, e);
		if (!r) {
			r = dcr_manifest_parse(*man, *man_len, url, m, e);
			bad_bytes = r == DCR_EDIGEST || r == DCR_EFORMAT;
			if (!r && o && o->dense && !m->dense) {
				dcr_manifest_release(m);
				r = dcr_err_set(e, DCR_EFORMAT,
						"'%s' is not a dense copy (dcr-diff --dense makes one)", url);
			}
			if (!r && o && o->want_target &&
			    memcmp(&m->target, o->want_target, sizeof(m->target))) {
				char a[65], b[65];
				dcr_digest_hex(&m->target, a);
				dcr_digest_hex(o->want_target, b);
				dcr_manifest_release(m);
				r = dcr_err_set(e, DCR_ECONFLICT,
						"'%s' reaches state %.12s, and its version is committed as %.12s: not the pack of that version (a step pushed again after its commit, or a dense copy of another checkpoint)",
						url, a, b);
			}
			/* the signature: checked before anything of the pack goes
			 * on; a pack that names no version is never signed
			 * (dcr-pack --sign needs --version), so none is asked
			 * for unless a key wants one */
			int want_sig = m->have_version || (o && o->trust && o->trust->nkeys);
			if (!r && ((want_sig && (r = get_signature(ss, i, sig, sig_len, e))) ||
				   (r = dcr_trust_check(o ? o->trust : NULL, *man, *man_len, m, *sig,
							*sig_len, url, e))))
				dcr_manifest_release(m);
		}
		if (bad_bytes && !fresh && !dcr_store_is_local(s)) {
			fresh = 1;
			goto man_fresh;
		}
		free(mo);
		free(url);
		if (!r) {
			if (t)
				__atomic_store_n(&ss->cur, i, __ATOMIC_RELAXED);
			return 0;
		}
		absent += r == DCR_ENOTFOUND;
		if (ss->n == 1 && r != DCR_ENOTFOUND)
			return r;
	}
	if (absent == (int)ss->n)
		return DCR_ENOTFOUND;
	return r == DCR_ENOTFOUND ? dcr_err_set(e, -EIO, "no source of the pack answered") : r;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* Of the n names a listing of pack name gave, the payloads from next on
 * that follow on without a gap: *limit is the first one missing. Their
 * indexes are sorted once (a listing may name millions, in any order). */
static int listed_from(char **names, size_t n, const char *name, uint32_t next, uint32_t *limit,
		       struct dcr_err *e)
{
	uint32_t *v = dcr_calloc(n ? n : 1, sizeof(*v));
	size_t k = 0;
	if (!v)
		return dcr_err_sys(e, ENOMEM, "pull");
	for (size_t j = 0; j < n; j++) {
		const char *en = in_pack(names[j], name);
		uint32_t idx;
		/* spelled as dcr_payload_name spells it: six digits, or more
		 * without a leading zero ("payload-" is 8 bytes, ".dcrp" 5) */
		if (en && dcr_payload_name_parse(en, &idx) && (strlen(en) == 19 || en[8] != '0') &&
		    idx >= next && idx < DCR_PAYLOADS_MAX)
			v[k++] = idx;
	}
	qsort(v, k, sizeof(*v), cmp_u32);
	*limit = next;
	for (size_t j = 0; j < k && v[j] <= *limit; j++)
		if (v[j] == *limit)
			(*limit)++;
	free(v);
	return 0;
}

/* The payloads the current source lists (a push in progress): how many
 * follow on from next without a gap. A server that answers that it does
 * not list (nginx or Apache without directory indexes answer 403, a
 * store whose base directory is not there yet 404, S3 without the right
 * to list 403) is not asked again: the pull waits for the manifest
 * alone, as it would from a store that listed nothing. */
static int listed_run(struct sources *ss, uint32_t next, uint32_t *limit, struct dcr_err *e)
{
	int r = 0;
	size_t first = src_cur(ss);
	*limit = next;
	for (size_t t = 0; t < ss->n; t++) {
		size_t i = (first + t) % ss->n;
		if (ss->nolist[i])
			continue;
		char **names = NULL;
		size_t n = 0;
		char *pfx = dcr_asprintf("%s/payload-", ss->v[i].name);
		struct dcr_err le = {0};
		int lr = pfx ? dcr_store_list(ss->v[i].s, pfx, &names, &n, &le)
			     : dcr_err_sys(&le, ENOMEM, "pull");
		free(pfx);
		if (lr == DCR_EREMOTE) {
			ss->nolist[i] = 1;
			continue;
		}
		if (lr) {
			r = lr;
			if (e)
				*e = le;
			continue;
		}
		r = listed_from(names, n, ss->v[i].name, next, limit, e);
		dcr_store_names_free(names, n);
		return r;
	}
	return r;
}

/* How long a manifest that does not check out is asked for again while
 * the pull waits (torn as fetch_again's payloads can be). */
#define TORN_MANIFEST_S 10.0

int dcr_pull_from(const struct dcr_pull_source *v, size_t nsrc, struct dcr_pack_out out,
		  int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
		  const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e)
{
	int par = o && o->parallel > 0 ? o->parallel : 4;
	double deadline = dcr_now_s() + (o ? o->wait_s : 0);
	struct sources ss = {v, nsrc, 0, NULL};
	uint8_t *man = NULL, *sig = NULL;
	size_t man_len = 0, sig_len = 0;
	struct dcr_manifest m = {0};
	int have_m = 0, r = 0, remote = 1;
	double torn_since = 0; /* when a manifest that does not parse was first seen */
	uint32_t next = 0; /* next payload index to hand on */
	int held = 0;	   /* payload next waits for the manifest (fetch_range) */
	unsigned nap_ms = 200; /* between rounds that found nothing new */
	uint64_t bytes = 0;
	if (!nsrc)
		return dcr_err_set(e, -EINVAL, "pull: no source");
	if (!(ss.nolist = dcr_calloc(nsrc, 1)))
		return dcr_err_sys(e, ENOMEM, "pull");
	for (size_t i = 0; i < nsrc; i++)
		remote &= !dcr_store_is_local(v[i].s);
	if (par > 256)
		par = 256;
	if (o && o->fault && o->fault->at) {
		out.stage = NULL; /* whole entries, in order: see dcr_xfer_opts.fault */
		out.begin = NULL;
	}
	for (;;) {
		if (!have_m) {
			r = get_manifest(&ss, &man, &man_len, &sig, &sig_len, &m, o, e);
			if (!r) {
				have_m = 1;
			} else if ((r == DCR_EFORMAT || r == DCR_EDIGEST) && o && o->wait_s > 0 &&
				   dcr_now_s() < deadline &&
				   (torn_since == 0 || dcr_now_s() < torn_since + TORN_MANIFEST_S)) {
				/* a manifest that does not parse while we wait may be
				 * one being written (see fetch_again): asked again
				 * next round, for TORN_MANIFEST_S at most */
				if (torn_since == 0)
					torn_since = dcr_now_s();
			} else if (r != DCR_ENOTFOUND) {
				goto out;
			} else if (!o || o->wait_s <= 0) {
				if (nsrc == 1 && dcr_store_dir_missing(v[0].s))
					r = dcr_err_set(e, DCR_ENOTFOUND,
							"no pack '%s': the store '%s' is not a directory that exists (--wait follows a push that creates it)",
							v[0].name, dcr_store_url(v[0].s));
				else if (nsrc == 1)
					r = dcr_err_set(e, DCR_ENOTFOUND,
							"no pack '%s' in '%s' (no manifest; --wait follows a push in progress)",
							v[0].name, dcr_store_url(v[0].s));
				else
					r = dcr_err_set(e, DCR_ENOTFOUND,
							"no pack '%s' in any of its %zu sources (no manifest; --wait follows a push in progress)",
							v[0].name, nsrc);
				goto out;
			}
			r = 0;
		}
		/* which payloads may we fetch now? all up to npayloads, or those listed */
		uint32_t limit = next;
		if (have_m) {
			limit = m.npayloads;
			/* those passed on while waiting (the first producer's, in
			 * order) must be the manifest's first */
			for (uint32_t i = 0; i < next && !r; i++)
				if (i >= m.npayloads || dcr_manifest_index(&m, i) != i)
					r = dcr_err_set(e, DCR_EFORMAT,
							"pack '%s': its manifest does not list payload %u, which was passed on before it came",
							v[0].name, i);
			if (r)
				goto out;
		} else if (!held && (r = listed_run(&ss, next, &limit, e))) {
			goto out;
		}
		/* fetch [next, limit) with par in flight, hand on in order:
		 * piece by piece from a server when the manifest allows */
		int skipped = 0;
		uint32_t upto = limit;
		if (have_m && m.pieces && out.begin && !have && remote)
			r = stream_range(&ss, &m, (unsigned)par, next, limit, out, o, &bytes, e);
		else
			r = fetch_range(&ss, have_m ? &m : NULL, have, have_ctx, (unsigned)par, next,
					limit, out, o, deadline, &bytes, &skipped, &upto, e);
		if (st)
			st->skipped += skipped;
		if (r)
			goto out;
		if (upto < limit) { /* held back: nothing more before the manifest */
			held = 1;
			limit = upto;
		}
		int fetched = limit > next;
		next = limit;
		if (have_m)
			break;
		if (dcr_now_s() > deadline) {
			size_t i = src_cur(&ss);
			char then[64] = "";
			if (held)
				snprintf(then, sizeof(then), ", then one over %llu MiB that waits for it",
					 DCR_PULL_AHEAD_MAX >> 20);
			r = dcr_err_set(e, DCR_ENOTFOUND,
					"no manifest for '%s' in '%s' after waiting %.0f s (%u payloads seen%s)",
					v[i].name, dcr_store_url(v[i].s), o ? o->wait_s : 0, next, then);
			goto out;
		}
		/* a round that fetched payloads lists again at once (more may
		 * have come while they crossed the link), and the rounds after
		 * it nap 25 ms, doubling to 200 ms: a push in progress is
		 * followed closely, a store that stays still is listed five
		 * times a second (a 200 ms nap after each round left a slow
		 * link idle between payloads, and the last payload waiting) */
		if (fetched) {
			nap_ms = 25;
		} else {
			usleep((useconds_t)nap_ms * 1000);
			nap_ms = nap_ms * 2 > 200 ? 200 : nap_ms * 2;
		}
	}
	if (sig) { /* the signature, then the manifest: as pack directories list them */
		dcr_fault_point(o ? o->fault : NULL);
		if ((r = out.entry(out.ctx, DCR_MANIFEST_SIG_NAME, sig, sig_len, e)))
			goto out;
		bytes += sig_len;
	}
	dcr_fault_point(o ? o->fault : NULL);
	r = out.entry(out.ctx, DCR_MANIFEST_NAME, man, man_len, e);
	bytes += man_len;
	if (st) {
		st->payloads = m.npayloads;
		st->bytes = bytes;
	}
out:
	free(man);
	free(sig);
	free(ss.nolist);
	if (have_m)
		dcr_manifest_release(&m);
	return r;
}

int dcr_pull_source_open(const char *arg, int dense, const struct dcr_store_opts *so,
			 struct dcr_pull_source *src, struct dcr_err *e)
{
	char *surl, *name;
	memset(src, 0, sizeof(*src));
	int r = dcr_split_store_url(arg, &surl, &name, e);
	if (r)
		return DCR_EFORMAT; /* e says what is wrong with it */
	if (dense) {
		char *dn = dcr_asprintf("%s.dense", name);
		free(name);
		if (!(name = dn)) {
			free(surl);
			return dcr_err_sys(e, ENOMEM, "%s", arg);
		}
	}
	if ((r = dcr_store_open(surl, so, &src->s, e))) {
		free(name);
		if (r == DCR_EFORMAT)
			r = -EINVAL; /* DCR_EFORMAT says the argument's form is wrong */
	} else {
		src->name = name;
	}
	free(surl);
	return r;
}

void dcr_pull_source_close(struct dcr_pull_source *src)
{
	dcr_store_close(src->s);
	free((char *)src->name);
	memset(src, 0, sizeof(*src));
}
