/* transfer.c - dcr-push and dcr-pull over any store. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transfer.h"

int dcr_split_store_url(const char *arg, char **store, char **name, struct dcr_err *e)
{
	const char *slash = strrchr(arg, '/');
	const char *scheme = strstr(arg, "://");
	if (!slash || !slash[1] || (scheme && slash < scheme + 3) ||
	    (scheme && !strchr(scheme + 3, '/')))
		return dcr_err_set(e, DCR_EFORMAT,
				   "'%s' is not STORE/NAME (e.g. /srv/store/v42 or s3://bucket/prefix/v42)",
				   arg);
	*store = slash == arg ? dcr_strdup("/") : strndup(arg, (size_t)(slash - arg));
	*name = dcr_strdup(slash + 1);
	if (!*store || !*name)
		return dcr_err_sys(e, ENOMEM, "%s", arg);
	return dcr_store_check_name(*name, e);
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

int dcr_push(struct dcr_store *s, const char *name, struct dcr_pack_in *in,
	     const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e)
{
	int par = o && o->parallel > 0 ? o->parallel : 4;
	struct slot *slots = dcr_calloc((size_t)par, sizeof(*slots));
	dcr_digest *dig = NULL;
	uint64_t *sizes = NULL;
	size_t cap = 0;
	uint8_t *man = NULL;
	size_t man_len = 0;
	int next = 0, r = 0;
	uint64_t bytes = 0;
	uint32_t count = 0;
	if (!slots)
		return dcr_err_sys(e, ENOMEM, "push");
	const char *ename;
	const uint8_t *buf;
	size_t len;
	while ((r = dcr_pack_in_next(in, &ename, &buf, &len, e)) == 1) {
		if (man) {
			r = dcr_err_set(e, DCR_EFORMAT, "pack: entry '%s' after the manifest", ename);
			break;
		}
		if (!strcmp(ename, DCR_MANIFEST_NAME)) {
			man = malloc(len ? len : 1);
			if (!man) {
				r = dcr_err_sys(e, ENOMEM, "push");
				break;
			}
			memcpy(man, buf, len);
			man_len = len;
			continue;
		}
		uint32_t idx;
		struct dcr_payload pl;
		if (!dcr_payload_name_parse(ename, &idx)) {
			r = dcr_err_set(e, DCR_EFORMAT, "pack: unexpected entry '%s'", ename);
			break;
		}
		if ((r = dcr_payload_check(buf, len, ename, &pl, e)))
			break;
		dcr_payload_release(&pl);
		if (pl.index != idx) {
			r = dcr_err_set(e, DCR_EFORMAT, "%s holds payload %u", ename, pl.index);
			break;
		}
		if (idx >= cap) {
			size_t ncap = idx + 64;
			dcr_digest *d = realloc(dig, ncap * sizeof(*d));
			if (d)
				dig = d;
			uint64_t *z = realloc(sizes, ncap * sizeof(*z));
			if (z)
				sizes = z;
			if (!d || !z || ncap > (1u << 24)) {
				r = dcr_err_sys(e, ENOMEM, "push");
				break;
			}
			for (size_t i = cap; i < ncap; i++)
				sizes[i] = UINT64_MAX;
			cap = ncap;
		}
		if (sizes[idx] != UINT64_MAX) {
			/* a duplicate: the same bytes are already going up (as
			 * dcr-apply skips them); other bytes are an error */
			if (sizes[idx] != len || memcmp(dig[idx].b, pl.digest.b, 32)) {
				r = dcr_err_set(e, DCR_EFORMAT, "%s arrived twice with different contents",
						ename);
				break;
			}
			continue;
		}
		dig[idx] = pl.digest;
		sizes[idx] = len;
		/* wait for a free slot, then upload this payload in the background */
		struct slot *sl = &slots[next];
		next = (next + 1) % par;
		if ((r = finish_slot(s, sl, e)))
			break;
		sl->oname = obj(name, ename);
		if (!sl->oname) {
			r = dcr_err_sys(e, ENOMEM, "push");
			break;
		}
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
			break;
		}
		sl->busy = 1;
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
	if (!man) {
		r = dcr_err_set(e, DCR_EFORMAT, "pack has no manifest; the manifest was not pushed");
		goto out;
	}
	struct dcr_manifest m;
	if ((r = dcr_manifest_parse(man, man_len, DCR_MANIFEST_NAME, &m, e)))
		goto out;
	for (uint32_t i = 0; i < m.npayloads && !r; i++) {
		if (i >= cap || sizes[i] == UINT64_MAX)
			r = dcr_err_set(e, DCR_EFORMAT, "pack lacks payload %u named by its manifest", i);
		else if (memcmp(dig[i].b, m.pdigest[i].b, 32) || sizes[i] != m.psize[i])
			r = dcr_err_set(e, DCR_EDIGEST, "payload %u does not match the manifest", i);
	}
	if (!r && count != m.npayloads)
		r = dcr_err_set(e, DCR_EFORMAT, "pack holds %u payloads, its manifest %u", count,
				m.npayloads);
	dcr_manifest_release(&m);
	if (r)
		goto out;
	char *mo = obj(name, DCR_MANIFEST_NAME);
	r = mo ? dcr_store_put(s, mo, man, man_len, e) : dcr_err_sys(e, ENOMEM, "push");
	free(mo);
	bytes += man_len;
	if (st) {
		st->payloads = count;
		st->bytes = bytes;
	}
out:
	free(slots);
	free(dig);
	free(sizes);
	free(man);
	return r;
}

/* ---- pull ---- */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

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

/* Fetchers: par threads each take the next index of [lo, hi) within a
 * window of par ahead of the one being handed on, GET it and check it, so
 * downloads and digests run in parallel; the caller hands them on in order. */
struct slot_res {
	struct dcr_blob b;
	int state; /* 0 empty, 1 fetching, 2 ready, 3 on hand (skipped) */
	int rc;
	struct dcr_err err;
};

struct fetch {
	struct dcr_store *s;
	const char *name;
	const struct dcr_manifest *m; /* or NULL while waiting for it */
	int (*have)(void *ctx, uint32_t index, dcr_digest *digest);
	void *have_ctx;
	uint32_t lo, hi, next_take, emitted;
	unsigned par;
	struct slot_res *slots; /* par, index % par */
	struct dcr_blob *pool;	/* heap buffers handed on, for reuse */
	unsigned npool;
	int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void fetch_one(struct fetch *f, uint32_t idx, struct slot_res *sr)
{
	dcr_digest d, sum;
	const dcr_digest *want = f->m ? &f->m->pdigest[idx] : NULL;
	if (f->have && f->have(f->have_ctx, idx, &d) && (!want || !memcmp(d.b, want->b, 32))) {
		sr->state = 3;
		return;
	}
	char *en = dcr_payload_name(idx);
	char *on = en ? obj(f->name, en) : NULL;
	char *url = on ? dcr_asprintf("%s/%s", dcr_store_url(f->s), on) : NULL;
	struct dcr_payload_hash ph;
	struct dcr_hasher h = {dcr_payload_hash_update, &ph};
	dcr_payload_hash_init(&ph);
	if (!url)
		sr->rc = dcr_err_sys(&sr->err, ENOMEM, "pull");
	else if (!(sr->rc = dcr_store_get_blob_hashed(f->s, on, &sr->b, 32, &h, &sr->err)))
		sr->rc = dcr_payload_hash_final(&ph, &sum)
				 ? dcr_err_sys(&sr->err, ENOMEM, "%s", url)
				 : check_payload(url, sr->b.p, sr->b.len, idx, &sum, want, &sr->err);
	else
		dcr_payload_hash_final(&ph, &sum); /* frees it */
	free(en);
	free(on);
	free(url);
	sr->state = 2;
}

static void *fetcher(void *arg)
{
	struct fetch *f = arg;
	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->stop && f->next_take < f->hi && f->next_take >= f->emitted + f->par)
			pthread_cond_wait(&f->cv, &f->mu);
		if (f->stop || f->next_take >= f->hi)
			break;
		uint32_t idx = f->next_take++;
		struct slot_res *sr = &f->slots[idx % f->par];
		sr->state = 1;
		struct slot_res tmp = {0};
		if (f->npool)
			tmp.b = f->pool[--f->npool];
		pthread_mutex_unlock(&f->mu);
		fetch_one(f, idx, &tmp);
		pthread_mutex_lock(&f->mu);
		*sr = tmp;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* Fetch [lo, hi) and hand each payload on in order. */
static int fetch_range(struct dcr_store *s, const char *name, const struct dcr_manifest *m,
		       int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
		       unsigned par, uint32_t lo, uint32_t hi, struct dcr_pack_out out,
		       const struct dcr_xfer_opts *o, uint64_t *bytes, int *skipped,
		       struct dcr_err *e)
{
	if (lo >= hi)
		return 0;
	struct fetch f = {.s = s, .name = name, .m = m, .have = have, .have_ctx = have_ctx,
			  .lo = lo, .hi = hi, .next_take = lo, .emitted = lo, .par = par};
	f.slots = dcr_calloc(par, sizeof(*f.slots));
	f.pool = dcr_calloc(par, sizeof(*f.pool));
	if (!f.slots || !f.pool) {
		free(f.slots);
		free(f.pool);
		return dcr_err_sys(e, ENOMEM, "pull");
	}
	pthread_mutex_init(&f.mu, NULL);
	pthread_cond_init(&f.cv, NULL);
	pthread_t th[256];
	unsigned nth = 0;
	int r = 0;
	for (unsigned i = 0; i < par && i < hi - lo; i++)
		if (!pthread_create(&th[nth], NULL, fetcher, &f))
			nth++;
	if (!nth)
		r = dcr_err_sys(e, EAGAIN, "cannot start a thread");
	for (uint32_t idx = lo; !r && idx < hi; idx++) {
		struct slot_res *sr = &f.slots[idx % par];
		pthread_mutex_lock(&f.mu);
		while (sr->state < 2)
			pthread_cond_wait(&f.cv, &f.mu);
		struct slot_res got = *sr;
		memset(sr, 0, sizeof(*sr));
		pthread_mutex_unlock(&f.mu);
		if (got.state == 3) {
			(*skipped)++;
		} else if (got.rc) {
			*e = got.err;
			r = got.rc;
		} else {
			char *en = dcr_payload_name(idx);
			r = en ? out.entry(out.ctx, en, got.b.p, got.b.len, e)
			       : dcr_err_sys(e, ENOMEM, "pull");
			free(en);
			*bytes += got.b.len;
			if (!r && o && o->progress)
				o->progress(o->progress_ctx, *bytes, idx + 1 - (uint64_t)*skipped);
		}
		pthread_mutex_lock(&f.mu);
		if (!got.b.map && got.b.cap && f.npool < par)
			f.pool[f.npool++] = got.b;
		else
			dcr_blob_free(&got.b);
		f.emitted = idx + 1;
		pthread_cond_broadcast(&f.cv);
		pthread_mutex_unlock(&f.mu);
	}
	pthread_mutex_lock(&f.mu);
	f.stop = 1;
	pthread_cond_broadcast(&f.cv);
	pthread_mutex_unlock(&f.mu);
	for (unsigned i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < par; i++)
		dcr_blob_free(&f.slots[i].b);
	for (unsigned i = 0; i < f.npool; i++)
		dcr_blob_free(&f.pool[i]);
	free(f.slots);
	free(f.pool);
	pthread_mutex_destroy(&f.mu);
	pthread_cond_destroy(&f.cv);
	return r;
}

int dcr_pull(struct dcr_store *s, const char *name, struct dcr_pack_out out,
	     int (*have)(void *ctx, uint32_t index, dcr_digest *digest), void *have_ctx,
	     const struct dcr_xfer_opts *o, struct dcr_xfer_stats *st, struct dcr_err *e)
{
	int par = o && o->parallel > 0 ? o->parallel : 4;
	double deadline = now_s() + (o ? o->wait_s : 0);
	char *mo = obj(name, DCR_MANIFEST_NAME);
	uint8_t *man = NULL;
	size_t man_len = 0;
	struct dcr_manifest m = {0};
	int have_m = 0, r = 0;
	uint32_t next = 0; /* next payload index to hand on */
	uint64_t bytes = 0;
	if (par > 256)
		par = 256;
	if (!mo) {
		r = dcr_err_sys(e, ENOMEM, "pull");
		goto out;
	}
	for (;;) {
		if (!have_m) {
			r = dcr_store_get(s, mo, &man, &man_len, e);
			if (!r) {
				char *url = dcr_asprintf("%s/%s", dcr_store_url(s), mo);
				r = url ? dcr_manifest_parse(man, man_len, url, &m, e)
					: dcr_err_sys(e, ENOMEM, "pull");
				if (!r && o && o->dense && !m.dense)
					r = dcr_err_set(e, DCR_EFORMAT,
							"'%s' is not a dense copy (dcr-diff --dense makes one)",
							url);
				free(url);
				if (r)
					goto out;
				have_m = 1;
			} else if (r != DCR_ENOTFOUND) {
				goto out;
			} else if (!o || o->wait_s <= 0) {
				r = dcr_err_set(e, DCR_ENOTFOUND,
						"no pack '%s' in '%s' (no manifest; --wait follows a push in progress)",
						name, dcr_store_url(s));
				goto out;
			}
			r = 0;
		}
		/* which payloads may we fetch now? all up to npayloads, or those listed */
		uint32_t limit = next;
		if (have_m) {
			limit = m.npayloads;
		} else {
			char **names = NULL;
			size_t n = 0;
			char *pfx = dcr_asprintf("%s/payload-", name);
			r = pfx ? dcr_store_list(s, pfx, &names, &n, e) : dcr_err_sys(e, ENOMEM, "pull");
			free(pfx);
			if (r)
				goto out;
			/* contiguous run from next */
			for (int more = 1; more;) {
				more = 0;
				char *want = dcr_payload_name(limit);
				for (size_t i = 0; want && i < n; i++) {
					const char *b = strrchr(names[i], '/');
					if (b && !strcmp(b + 1, want)) {
						limit++;
						more = 1;
						break;
					}
				}
				free(want);
			}
			dcr_store_names_free(names, n);
		}
		/* fetch [next, limit) with par in flight, hand on in order */
		int skipped = 0;
		r = fetch_range(s, name, have_m ? &m : NULL, have, have_ctx, (unsigned)par, next,
				limit, out, o, &bytes, &skipped, e);
		if (st)
			st->skipped += skipped;
		if (r)
			goto out;
		next = limit;
		if (have_m)
			break;
		if (now_s() > deadline) {
			r = dcr_err_set(e, DCR_ENOTFOUND,
					"no manifest for '%s' in '%s' after waiting %.0f s (%u payloads seen)",
					name, dcr_store_url(s), o ? o->wait_s : 0, next);
			goto out;
		}
		usleep(200 * 1000);
	}
	r = out.entry(out.ctx, DCR_MANIFEST_NAME, man, man_len, e);
	bytes += man_len;
	if (st) {
		st->payloads = m.npayloads;
		st->bytes = bytes;
	}
out:
	free(mo);
	free(man);
	dcr_manifest_release(&m);
	return r;
}
