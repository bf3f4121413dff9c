/* journal.c - the receiver's redo journal: a delta of OVERWRITE items (and
 * the file renames and removals of rebuilt files), checked against every
 * touched tensor's target digest before it is committed by rename, then
 * replayed into the files; replaying it again after a crash is harmless.
 * See apply.c for the whole protocol. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/cuda.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/ipool.h"
#include "refit/journal.h"
#include "refit/prehash.h"

/* ---- checking the journal before it is committed ----
 * Every touched tensor's new bytes (its current bytes, or zeros for a new
 * tensor, with the journal's overwrites applied) must hash to the target
 * digest. Nothing has been written to the receiver yet. A tensor's items
 * are kept as they are written, and the tensor goes to the hashing threads
 * as soon as its last item is written (items come in tensor order), so
 * that its bytes are hashed while the next tensor's items are resolved and
 * written; the threads cut a large tensor into bands of rows, and the
 * thread that hashes its last rows lets its items go. So the items held
 * are those of the tensors being hashed, not the whole journal. An item
 * that comes after its tensor went to the threads (a pack's producers
 * need not keep tensor order) is not kept: the tensor is hashed again at
 * the end with all its items, read back from the journal file. */

struct jitem {
	struct dcr_item it; /* its data follows */
};

struct jtensor {
	struct jcheck *jc;
	uint32_t t;
	struct jitem **items; /* its items sorted by start, once queued */
	size_t n, cap;	      /* while the items come */
	dcr_digest got;
	int queued, late;     /* a late item came after it was queued */
	int restage;          /* direct, hashed again: its base is its staged file */
	int err;
	struct dcr_err e;
};

struct jcheck {
	struct plan *p;
	const char *sdir; /* the receiver's .dcr, for messages */
	struct dcr_hpool *pool;
	struct jtensor *jt;
	uint32_t last;
	int any;
	/* bytes of decoded items the threads hold (jc_hold) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t held;
	uint64_t kept; /* bytes of items kept (atomic: threads let go) */
};

/* Items kept for the tensors the threads hash: past this many bytes the
 * writer waits for the threads (and hashes with them) before it keeps
 * more. One tensor's own items are always kept whole. */
#define JC_KEEP_BUDGET ((uint64_t)64 << 20)

/* A band that holds no decoded item yet starts one only while the threads
 * hold at most AP_DECODE_BUDGET in all (or nothing), so that items that
 * claim the most are decoded one at a time, not one per thread. A band
 * that holds some goes on, so that it can finish and let go. */

static void jc_hold(struct jcheck *jc, uint64_t cost, uint64_t mine)
{
	pthread_mutex_lock(&jc->mu);
	while (!mine && jc->held && jc->held + cost > AP_DECODE_BUDGET)
		pthread_cond_wait(&jc->cv, &jc->mu);
	jc->held += cost;
	pthread_mutex_unlock(&jc->mu);
}

static void jc_release(struct jcheck *jc, uint64_t cost)
{
	pthread_mutex_lock(&jc->mu);
	jc->held -= cost;
	pthread_cond_broadcast(&jc->cv);
	pthread_mutex_unlock(&jc->mu);
}

/* n zero bytes (a new tensor's, before its items) */
static void hash_zeros(struct dcr_tdigest *h, uint64_t n)
{
	static const uint8_t zero[65536];
	while (n) {
		uint64_t k = n < sizeof(zero) ? n : sizeof(zero);
		dcr_tdigest_update(h, zero, k);
		n -= k;
	}
}

/* An item that meets the rows being hashed, decoded once: its changes
 * and the next one not yet put in place. */
struct jactive {
	size_t q;
	struct dcr_changes ch;
	size_t cc;
	struct dcr_buf bytes; /* a dense overwrite: its new bytes instead */
	uint64_t cost; /* held for ch or bytes (jc_hold) */
};

/* What decoding item it holds: 16 bytes a change, or for a dense
 * overwrite its bytes and their planes. */
static uint64_t jactive_cost(const struct dcr_item *it, unsigned unit)
{
	return dcr_item_is_dense_overwrite(it) ? 2 * (uint64_t)unit * it->len : ap_decode_bytes(it);
}

static void jactive_free(struct jactive *ja)
{
	dcr_changes_free(&ja->ch);
	dcr_buf_free(&ja->bytes);
}

/* Element u of a step (elem of tensor name) marked in seen; an error if
 * an item of the step marked it already. */
static int mark_once(struct dcr_buf *seen, uint64_t u, uint64_t elem, const char *name,
		     struct dcr_err *e)
{
	if (seen->p[u / 8] & (1u << (u % 8)))
		return dcr_err_set(e, DCR_EFORMAT, "delta has items that change element %llu of '%s' twice",
				   (unsigned long long)elem, name);
	seen->p[u / 8] |= (uint8_t)(1u << (u % 8));
	return 0;
}

/* The bytes [off, off + n) of tensor pt that the journal's items change,
 * in *out (read into tmp), or NULL for zeros (a new tensor's); a direct
 * tensor hashed again (late items) starts from what the first pass wrote
 * into its staged file. */
static int jt_base(const struct jtensor *jt, const struct ptensor *pt, uint64_t off, size_t n,
		   struct dcr_buf *tmp, const uint8_t **out, struct dcr_err *e)
{
	*out = NULL;
	if (pt->direct && jt->restage) {
		tmp->len = 0;
		if (dcr_buf_reserve(tmp, n + 1))
			return dcr_err_sys(e, ENOMEM, "journal");
		int r = dcr_pread_full(pt->dfd, tmp->p, n, pt->doff + off);
		if (r)
			return dcr_err_sys(e, r == -EPIPE ? EIO : -r,
					   "cannot read back the staged bytes of '%s'", pt->t.name);
		*out = tmp->p;
		return 0;
	}
	if ((pt->t.flags & DCR_TENSOR_NEW) || !pt->cur)
		return 0;
	return dcr_ckpt_tensor_read(pt->cur, off, n, tmp, out, e);
}

/* Bytes [off, off + n) of direct tensor pt, p, into its staged file. */
static int jt_stage_write(struct jtensor *jt, const struct ptensor *pt, const uint8_t *p,
			  uint64_t off, uint64_t n)
{
	int r = dcr_pwrite_full(pt->dfd, p, (size_t)n, pt->doff + off);
	return r ? dcr_err_sys(&jt->e, -r, "cannot write the staged bytes of '%s' in '%s'",
			       pt->t.name, jt->jc->sdir)
		 : 0;
}

/* Let a tensor's items go (its count stays, for the messages). */
static void jt_drop(struct jtensor *jt)
{
	uint64_t bytes = 0;
	for (size_t k = 0; jt->items && k < jt->n; k++) {
		bytes += sizeof(*jt->items[k]) + jt->items[k]->it.data_len;
		free(jt->items[k]);
	}
	__atomic_sub_fetch(&jt->jc->kept, bytes, __ATOMIC_RELAXED);
	free(jt->items);
	jt->items = NULL;
	jt->cap = 0;
}

/* The new bytes of rows [r0, r1) of a tensor: its current bytes (zeros for
 * a new tensor) with the overwrites of the items that meet those rows,
 * put together a step of the digest at a time (so that it copies nothing
 * more); a step no item meets is hashed where it lies. A direct tensor's
 * steps are all written into its staged file as they are hashed (those
 * of zeros are there already): the bytes hashed are the bytes the file
 * holds. Items may span
 * overlapping ranges (the producers of one pack each send their own
 * elements of a tensor) but never change one element twice: then the
 * order the replay writes them in cannot matter, and the bytes hashed
 * here are the bytes it writes (which is why it need not hash them). */
static int jt_feed(void *ctx, uint64_t r0, uint64_t r1, struct dcr_tdigest *td)
{
	struct jtensor *jt = ctx;
	const struct ptensor *pt = &jt->jc->p->t[jt->t];
	unsigned unit = dcr_dtype_unit(pt->t.dtype);
	struct dcr_stripes st;
	dcr_stripes_init(&st, pt->t.dtype, pt->t.ndim, pt->t.shape);
	uint64_t a = r0 * st.pitch, b = r1 * st.pitch, step = dcr_tdigest_step(td);
	struct dcr_buf tmp = {0}, seen = {0}, planes = {0};
	struct jactive *act = NULL;
	size_t k = 0, nact = 0, capact = 0;
	uint64_t mine = 0; /* held by this band */
	int r = 0;
#define IT_END(q) (jt->items[q]->it.start * unit + jt->items[q]->it.len * unit)
	while (k < jt->n && IT_END(k) <= a)
		k++;
	for (uint64_t x0 = a; x0 < b && !r; x0 += step) {
		uint64_t x1 = b - x0 < step ? b : x0 + step;
		/* the items that meet [x0, x1): from k on */
		size_t q = k, meet = 0;
		if (q >= jt->n || jt->items[q]->it.start * unit >= x1) {
			/* no item meets the step: its current bytes as they are */
			const uint8_t *cur;
			if ((r = jt_base(jt, pt, x0, (size_t)(x1 - x0), &tmp, &cur, &jt->e)))
				break;
			if (cur)
				dcr_tdigest_update(td, cur, (size_t)(x1 - x0));
			else
				hash_zeros(td, x1 - x0);
			/* a direct tensor's staged blocks hold zeros until written */
			if (cur && pt->direct && !jt->restage &&
			    (r = jt_stage_write(jt, pt, cur, x0, x1 - x0)))
				break;
			continue;
		}
		for (size_t z = q; z < jt->n && jt->items[z]->it.start * unit < x1 && meet < 2; z++)
			meet += IT_END(z) > x0;
		tmp.len = 0;
		seen.len = 0;
		size_t nbits = (size_t)((x1 - x0) / unit);
		if (dcr_buf_reserve(&tmp, (size_t)(x1 - x0)) ||
		    (meet > 1 && dcr_buf_reserve(&seen, nbits / 8 + 1))) {
			r = dcr_err_sys(&jt->e, ENOMEM, "journal");
			break;
		}
		if (meet > 1)
			memset(seen.p, 0, nbits / 8 + 1);
		/* read (not through the mapping: see dcr_ckpt_tensor_read) */
		const uint8_t *cur;
		if ((r = jt_base(jt, pt, x0, (size_t)(x1 - x0), &tmp, &cur, &jt->e)))
			break;
		if (!cur)
			memset(tmp.p, 0, (size_t)(x1 - x0));
		else if (cur != tmp.p)
			memcpy(tmp.p, cur, (size_t)(x1 - x0));
		for (; q < jt->n && jt->items[q]->it.start * unit < x1 && !r; q++) {
			const struct dcr_item *it = &jt->items[q]->it;
			uint64_t s0 = it->start * unit;
			if (IT_END(q) <= x0)
				continue; /* done with in an earlier step */
			struct jactive *ja = NULL;
			for (size_t z = 0; z < nact && !ja; z++)
				if (act[z].q == q)
					ja = &act[z];
			if (!ja) {
				if (nact == capact) {
					size_t nc = capact ? 2 * capact : 4;
					struct jactive *nv = realloc(act, nc * sizeof(*nv));
					if (!nv) {
						r = dcr_err_sys(&jt->e, ENOMEM, "journal");
						break;
					}
					act = nv;
					capact = nc;
				}
				ja = &act[nact++];
				*ja = (struct jactive){.q = q, .cost = jactive_cost(it, unit)};
				jc_hold(jt->jc, ja->cost, mine);
				mine += ja->cost;
				if (!dcr_item_is_dense_overwrite(it))
					r = dcr_item_decode(it, unit, &ja->ch, &jt->e);
				else if (dcr_buf_reserve(&ja->bytes, (size_t)(it->len * unit) + 1))
					r = dcr_err_sys(&jt->e, ENOMEM, "journal");
				else
					r = dcr_item_decode_dense(it, unit, ja->bytes.p, &planes, &jt->e);
				if (r)
					break;
			}
			if (ja->bytes.p) {
				/* a dense overwrite: every element of its range in the step */
				uint64_t lo = s0 > x0 ? s0 : x0, hi = IT_END(q) < x1 ? IT_END(q) : x1;
				for (uint64_t u = (lo - x0) / unit; meet > 1 && !r && u < (hi - x0) / unit; u++)
					r = mark_once(&seen, u, x0 / unit + u, pt->t.name, &jt->e);
				memcpy(tmp.p + (lo - x0), ja->bytes.p + (lo - s0), (size_t)(hi - lo));
				continue;
			}
			for (; ja->cc < ja->ch.n && s0 + ja->ch.pos[ja->cc] * unit < x1; ja->cc++) {
				uint64_t at = s0 + ja->ch.pos[ja->cc] * unit;
				if (at < x0)
					continue; /* in the band before */
				size_t u = (size_t)((at - x0) / unit);
				if (meet > 1 && (r = mark_once(&seen, u, at / unit, pt->t.name, &jt->e)))
					break;
				store_unit(tmp.p + (at - x0), unit, ja->ch.val[ja->cc]);
			}
		}
		if (r)
			break;
		dcr_tdigest_update(td, tmp.p, (size_t)(x1 - x0));
		if (pt->direct && (r = jt_stage_write(jt, pt, tmp.p, x0, x1 - x0)))
			break;
		/* items that end in this step are done with */
		for (size_t z = 0; z < nact;)
			if (IT_END(act[z].q) <= x1) {
				jactive_free(&act[z]);
				jc_release(jt->jc, act[z].cost);
				mine -= act[z].cost;
				act[z] = act[--nact];
			} else {
				z++;
			}
		while (k < jt->n && IT_END(k) <= x1)
			k++;
	}
#undef IT_END
	for (size_t z = 0; z < nact; z++) {
		jactive_free(&act[z]);
		jc_release(jt->jc, act[z].cost);
	}
	free(act);
	dcr_buf_free(&tmp);
	dcr_buf_free(&seen);
	dcr_buf_free(&planes);
	if (r)
		jt->err = r;
	return r;
}

/* the pool's word that the tensor is hashed: no band reads its items; a
 * direct tensor's staged bytes start their way to the disk */
static void jt_done(void *ctx)
{
	struct jtensor *jt = ctx;
	const struct ptensor *pt = &jt->jc->p->t[jt->t];
	if (pt->direct)
		sync_file_range(pt->dfd, (off_t)pt->doff,
				(off_t)(pt->t.nelem * dcr_dtype_bits(pt->t.dtype) / 8),
				SYNC_FILE_RANGE_WRITE);
	jt_drop(jt);
}

static int cmp_jitem(const void *a, const void *b)
{
	const struct jitem *x = *(const struct jitem *const *)a, *y = *(const struct jitem *const *)b;
	return x->it.start < y->it.start ? -1 : x->it.start > y->it.start;
}

/* Hand tensor t to the threads; or, when its items are known to be all
 * in (complete), take its digest as its items were resolved
 * (refit/prehash.h), when each of them was, in order, from the receiver's
 * bits, which leaves nothing to read (not for a direct tensor, whose
 * bytes go to its staged file, nor when it is hashed again for late
 * items). A tensor handed over before its items are known to be in (past
 * the budget, items out of tensor order) is not asked of the prehash: it
 * would finish the tensor there, reading and hashing the rest of its
 * bytes from the receiver for a digest that a later item makes void. */
static int jc_queue(struct jcheck *jc, uint32_t t, int complete)
{
	struct jtensor *jt = &jc->jt[t];
	const struct ptensor *pt = &jc->p->t[t];
	jt->queued = 1;
	jt->late = 0;
	if (complete && jc->p->pre && !pt->direct && !jt->restage && jt->n &&
	    !(pt->t.flags & DCR_TENSOR_NEW) &&
	    ap_prehash_get(jc->p->pre, pt->t.name, jt->n, &jt->got)) {
		jc->p->prehashed++;
		jt_drop(jt);
		return 0;
	}
	if (jt->n > 1)
		qsort(jt->items, jt->n, sizeof(*jt->items), cmp_jitem);
	return dcr_hpool_add(jc->pool, pt->t.dtype, pt->t.ndim, pt->t.shape, NULL, jt_feed, jt_done,
			     jt, 0, &jt->got);
}

static int jc_init(struct jcheck *jc, struct plan *p, const char *sdir, int threads)
{
	memset(jc, 0, sizeof(*jc));
	pthread_mutex_init(&jc->mu, NULL);
	pthread_cond_init(&jc->cv, NULL);
	jc->p = p;
	jc->sdir = sdir;
	jc->jt = dcr_calloc(p->n + 1, sizeof(*jc->jt));
	jc->pool = dcr_hpool_new(threads);
	if (!jc->jt || !jc->pool)
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++) {
		jc->jt[i].jc = jc;
		jc->jt[i].t = (uint32_t)i;
	}
	return 0;
}

/* Keep a copy of item it with tensor jt's. */
static int jt_keep(struct jtensor *jt, const struct dcr_item *it)
{
	struct jitem *ji = malloc(sizeof(*ji) + it->data_len + 1);
	if (!ji)
		return -ENOMEM;
	ji->it = *it;
	memcpy(ji + 1, it->data, it->data_len);
	ji->it.data = (const uint8_t *)(ji + 1);
	if (jt->n == jt->cap) {
		size_t nc = jt->cap ? 2 * jt->cap : 8;
		struct jitem **nv = realloc(jt->items, nc * sizeof(*nv));
		if (!nv) {
			free(ji);
			return -ENOMEM;
		}
		jt->items = nv;
		jt->cap = nc;
	}
	jt->items[jt->n++] = ji;
	__atomic_add_fetch(&jt->jc->kept, sizeof(*ji) + it->data_len, __ATOMIC_RELAXED);
	return 0;
}

/* One more item, as written: the tensors before its own are complete. */
static int jc_add(struct jcheck *jc, const struct dcr_item *it)
{
	struct jtensor *jt = &jc->jt[it->tensor];
	int r = 0;
	/* an item out of order, for a tensor the threads have: the tensor
	 * is hashed again at the end, its items read back from the file */
	if (jt->queued) {
		jt->late = 1;
	} else {
		/* past the budget: hash with the threads until they are done
		 * (their errors are the tensors' own, told by jc_finish), and
		 * first hand them the other tensors whose items are kept (items
		 * out of tensor order; those that come later make them late) */
		if (__atomic_load_n(&jc->kept, __ATOMIC_RELAXED) > JC_KEEP_BUDGET) {
			for (uint32_t i = 0; i < jc->p->n && !r; i++)
				if (i != it->tensor && !jc->jt[i].queued && jc->jt[i].n)
					r = jc_queue(jc, i, jc->any && i == jc->last &&
								it->tensor > jc->last);
			(void)dcr_hpool_wait(jc->pool);
			if (r)
				return r;
		}
		if ((r = jt_keep(jt, it)))
			return r;
	}
	if (jc->any && it->tensor > jc->last && !jc->jt[jc->last].queued)
		r = jc_queue(jc, jc->last, 1);
	if (!jc->any || it->tensor > jc->last)
		jc->last = it->tensor;
	jc->any = 1;
	return r;
}

/* Where a late tensor's item lies in the journal file. */
struct jloc {
	uint64_t off, len; /* the ITEM record's body */
	uint32_t t;
};

static int cmp_jloc(const void *a, const void *b)
{
	const struct jloc *x = a, *y = b;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Load the items at loc[0..n) from the journal file (fd). */
static int jc_load(struct jcheck *jc, int fd, const struct jloc *loc, size_t n,
		   struct dcr_buf *body, struct dcr_err *e)
{
	for (size_t k = 0; k < n; k++) {
		struct dcr_item it;
		int r = dcr_delta_item_at(fd, loc[k].off, loc[k].len, body, &it, "the journal", e);
		if (r)
			return r;
		if (it.tensor != loc[k].t)
			return dcr_err_set(e, DCR_EFORMAT, "the journal changed while it was read back");
		if (jt_keep(&jc->jt[it.tensor], &it))
			return dcr_err_sys(e, ENOMEM, "journal");
	}
	return 0;
}

/* Hash again the tensors that had late items, each with all its items
 * read back from the journal written so far (path): first where each
 * item lies, then tensors a group at a time, a group's items within
 * JC_KEEP_BUDGET (a tensor's own always whole). Returns an error, or
 * the pool's answer in *q. */
static int jc_reload(struct jcheck *jc, const char *path, int *q, struct dcr_err *e)
{
	struct plan *p = jc->p;
	struct jloc *loc = NULL;
	size_t nloc = 0, cap = 0;
	uint64_t *bytes = dcr_calloc(p->n + 1, sizeof(*bytes));
	struct dcr_buf body = {0};
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;
	if (fd < 0 || !bytes) {
		r = fd < 0 ? dcr_err_sys(e, errno, "cannot read back '%s'", path)
			   : dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	for (size_t i = 0; i < p->n; i++)
		if (jc->jt[i].late) {
			jt_drop(&jc->jt[i]);
			jc->jt[i].n = 0;
			/* a direct tensor's items before the late ones are in its
			 * staged file, not in the journal */
			jc->jt[i].restage = 1;
		}
	struct dcr_delta_reader rd;
	struct dcr_delta_rec rec;
	struct dcr_fdbuf in; /* rd's source; jc_load reads at offsets */
	if (dcr_fdbuf_init(&in, fd, DCR_FDBUF_SIZE)) {
		dcr_fdbuf_release(&in);
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	if ((r = dcr_delta_reader_init(&rd, (struct dcr_source){dcr_source_fdbuf_read, &in},
				       "journal", e))) {
		dcr_fdbuf_release(&in);
		goto out;
	}
	rd.journal = 1;
	while ((r = dcr_delta_next(&rd, &rec, e)) == 1) {
		struct dcr_item it;
		if (rec.type != DCR_REC_ITEM)
			continue;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			break;
		if (it.tensor >= p->n) {
			r = dcr_err_set(e, DCR_EFORMAT, "journal item of tensor %u of %zu",
					(unsigned)it.tensor, p->n);
			break;
		}
		if (!jc->jt[it.tensor].late)
			continue;
		if (nloc == cap) {
			size_t nc = cap ? 2 * cap : 64;
			struct jloc *nv = realloc(loc, nc * sizeof(*nv));
			if (!nv) {
				r = dcr_err_sys(e, ENOMEM, "journal");
				break;
			}
			loc = nv;
			cap = nc;
		}
		loc[nloc++] = (struct jloc){rd.offset - rec.len, rec.len, it.tensor};
		bytes[it.tensor] += sizeof(struct jitem) + it.data_len;
	}
	dcr_delta_reader_release(&rd);
	dcr_fdbuf_release(&in);
	if (r)
		goto out;
	/* tensor by tensor, each in file order: a group's items are a run */
	if (nloc > 1)
		qsort(loc, nloc, sizeof(*loc), cmp_jloc);
	size_t k0 = 0;
	for (uint32_t t0 = 0; t0 < p->n && !r && !*q;) {
		uint32_t t1 = t0;
		uint64_t sum = 0;
		for (; t1 < p->n; t1++) {
			if (!jc->jt[t1].late)
				continue;
			if (sum && sum + bytes[t1] > JC_KEEP_BUDGET)
				break;
			sum += bytes[t1];
		}
		size_t k1 = k0;
		while (k1 < nloc && loc[k1].t < t1)
			k1++;
		if ((r = jc_load(jc, fd, loc + k0, k1 - k0, &body, e)))
			break;
		k0 = k1;
		for (uint32_t t = t0; t < t1 && !r; t++)
			if (jc->jt[t].late && (r = jc_queue(jc, t, 1)))
				r = dcr_err_sys(e, -r, "journal");
		*q = dcr_hpool_wait(jc->pool);
		t0 = t1;
	}
out:
	if (fd >= 0)
		close(fd);
	free(loc);
	free(bytes);
	dcr_buf_free(&body);
	return r;
}

/* Hash what is left, wait, and check every digest; path: the journal
 * written so far, for tensors with late items. */
static int jc_finish(struct jcheck *jc, const char *path, struct dcr_err *e)
{
	struct plan *p = jc->p;
	int r = 0, late = 0;
	for (size_t i = 0; i < p->n && !r; i++) {
		struct jtensor *jt = &jc->jt[i];
		if (!jt->queued && (jt->n || (p->t[i].t.flags & DCR_TENSOR_NEW)))
			r = jc_queue(jc, (uint32_t)i, 1);
		late |= jt->late;
	}
	int q = dcr_hpool_wait(jc->pool);
	if (r)
		return dcr_err_sys(e, -r, "journal");
	if (late && !q && (r = jc_reload(jc, path, &q, e)))
		return r;
	for (size_t i = 0; i < p->n; i++) {
		struct jtensor *jt = &jc->jt[i];
		struct ptensor *pt = &p->t[i];
		if (!jt->queued)
			continue;
		if (jt->err) {
			*e = jt->e;
			return jt->err;
		}
		if (memcmp(jt->got.b, pt->t.digest.b, 32))
			return jt->n ? dcr_err_set(e, DCR_EDIGEST,
						   "tensor '%s' would not match its target digest: the delta does not fit this receiver's bits (nothing was written)",
						   pt->t.name)
				     : dcr_err_set(e, DCR_EDIGEST,
						   "new tensor '%s' has no data but a non-zero digest",
						   pt->t.name);
		pt->verified = 1;
	}
	return q ? dcr_err_sys(e, -q, "cannot hash the journal's tensors") : 0;
}

static void jc_free(struct jcheck *jc)
{
	dcr_hpool_free(jc->pool); /* waits for what is still hashing */
	for (size_t i = 0; jc->jt && i < jc->p->n; i++)
		jt_drop(&jc->jt[i]);
	free(jc->jt);
	pthread_cond_destroy(&jc->cv);
	pthread_mutex_destroy(&jc->mu);
}

int ap_write_journal(struct ctx *x, struct plan *p, struct item_src src, struct dcr_err *e)
{
	char *tmp = dcr_receiver_path(x->rc, "journal.tmp");
	char *fin = dcr_receiver_path(x->rc, "journal");
	struct dcr_delta_writer w = {0};
	struct jcheck jc;
	int fd = -1, r = jc_init(&jc, p, x->rc->sdir, x->rc->threads);
	if (r || !tmp || !fin) {
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", tmp);
		goto out;
	}
	if ((r = dcr_delta_writer_init(&w, (struct dcr_sink){dcr_sink_fd_write, &fd}, &p->base,
				       p->attempt, "journal", e)))
		goto out;
	for (size_t i = 0; i < p->n && !r; i++)
		r = dcr_delta_write_tensor(&w, &p->t[i].t, e);
	for (size_t i = 0; i < p->nrenames && !r; i++)
		r = dcr_delta_write_name(&w, DCR_REC_JRENAME, p->renames[i], e);
	for (size_t i = 0; i < p->nunlinks && !r; i++)
		r = dcr_delta_write_name(&w, DCR_REC_JUNLINK, p->unlinks[i], e);
	if (r)
		goto out;
	struct dcr_item it;
	uint64_t done = 0;
	while ((r = src.next(src.ctx, p, &it, e)) == 1) {
		/* a direct tensor's items are written into its staged file by
		 * the check, unless they come after it was hashed (jc_add):
		 * then it is hashed again at the end, from that file and the
		 * items read back from the journal, which the replay writes
		 * again (the same bytes) */
		if ((!p->t[it.tensor].direct || jc.jt[it.tensor].queued) &&
		    (r = dcr_delta_write_item(&w, &it, e)))
			break;
		if ((r = jc_add(&jc, &it))) {
			r = dcr_err_sys(e, -r, "journal");
			break;
		}
		done++;
		if (x->o && x->o->progress)
			x->o->progress(x->o->progress_ctx, done, p->nitems * 2);
	}
	if (r < 0)
		goto out;
	for (size_t i = 0; i < p->n && !r; i++)
		r = dcr_delta_write_done(&w, (uint32_t)i, &p->t[i].t.digest, e);
	if (!r)
		r = dcr_delta_write_end(&w, &p->target, e);
	if (r)
		goto out;
	if ((r = jc_finish(&jc, tmp, e)))
		goto out;
	for (size_t i = 0; i < p->ndfds; i++) {
		ap_step(x);
		if (fsync(p->dfds[i])) {
			r = dcr_err_sys(e, errno, "cannot fsync a staged file in '%s'", x->rc->sdir);
			goto out;
		}
	}
	ap_step(x);
	if (fsync(fd)) {
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", tmp);
		goto out;
	}
	close(fd);
	fd = -1;
	/* the cache no longer describes the files once replay starts */
	dcr_receiver_drop_state(x->rc);
	ap_step(x);
	if (rename(tmp, fin)) {
		r = dcr_err_sys(e, errno, "cannot commit the journal '%s'", fin);
		goto out;
	}
	ap_step(x);
	if ((r = dcr_fsync_dir(x->rc->sdir)))
		r = dcr_err_sys(e, r, "cannot fsync '%s'", x->rc->sdir);
out:
	jc_free(&jc);
	if (fd >= 0)
		close(fd);
	if (r && tmp)
		unlink(tmp);
	dcr_delta_writer_release(&w);
	free(tmp);
	free(fin);
	return r;
}

/* ---- replaying the journal ---- */

struct wfile {
	int fd;
	uint8_t *map;
	uint64_t size;
};

/* What the replay's steps share: the journal (its plan and its reader),
 * the receiver's checkpoint, the files being written, the digests. */
struct replay {
	struct ctx *x;
	int fd;			/* the journal */
	struct plan p;
	const struct plan *checked; /* the plan checked before the commit, or NULL */
	struct dcr_ckpt *c;
	struct wfile *wf;	/* per file of c, opened when first written */
	struct dcr_delta_reader rd;
	struct dcr_fdbuf in;	/* rd's source */
	dcr_digest *dg;		/* per tensor, after the overwrites */
	struct dcr_cuda_ctx *gpu; /* --device cuda: overwrites scattered there */
	uint8_t *sel;		/* tensors to check: touched, or in a rebuilt file */
	uint8_t *queued, *late;	/* handed to the threads; written to after that */
	struct dcr_hpool *pool;	/* hashes them while the files are written */
	/* the byte ranges being written (rp_item): an item waits while
	 * another overlaps its own, since a range is read, changed and
	 * written back whole */
	pthread_mutex_t wmu;
	pthread_cond_t wcv;
	struct wrange { size_t file; uint64_t a, b; } busy[66];
	size_t nbusy;
};

/* 1. staged files into place, removed files gone, the directory synced */
static int rp_move_files(struct replay *rp, struct dcr_err *e)
{
	struct ctx *x = rp->x;
	const struct plan *p = &rp->p;
	int r = 0;
	for (size_t i = 0; i < p->nrenames; i++) {
		char *from = dcr_asprintf("%s/stage/%s", x->rc->sdir, p->renames[i]);
		char *to = dcr_path_join(x->rc->dir, p->renames[i]);
		if (!from || !to)
			r = dcr_err_sys(e, ENOMEM, "journal");
		else if (access(from, F_OK) == 0) {
			ap_step(x);
			if (rename(from, to))
				r = dcr_err_sys(e, errno, "cannot rename '%s' to '%s'", from, to);
		}
		free(from);
		free(to);
		if (r)
			return r;
	}
	for (size_t i = 0; i < p->nunlinks; i++) {
		char *f = dcr_path_join(x->rc->dir, p->unlinks[i]);
		if (f && unlink(f) && errno != ENOENT)
			r = dcr_err_sys(e, errno, "cannot remove '%s'", f);
		free(f);
		if (r)
			return r;
	}
	if (p->nrenames || p->nunlinks) {
		ap_step(x);
		if ((r = dcr_fsync_dir(x->rc->dir)))
			return dcr_err_sys(e, r, "cannot fsync '%s'", x->rc->dir);
	}
	return 0;
}

/* The receiver's checkpoint, opened; each of its tensors must be the
 * journal's, in the same order, with the same dtype, shape and file. */
static int rp_open_ckpt(struct replay *rp, struct dcr_err *e)
{
	struct ctx *x = rp->x;
	struct plan *p = &rp->p;
	int r;
	if ((r = dcr_ckpt_open(x->rc->dir, &rp->c, e)))
		return r;
	const struct dcr_ckpt *c = rp->c;
	if (c->ntensors != p->n)
		return dcr_err_set(e, DCR_EFORMAT, "receiver '%s' holds %zu tensors, the journal %zu",
				   x->rc->dir, c->ntensors, p->n);
	for (size_t i = 0; i < p->n; i++) {
		const struct dcr_ckpt_tensor *ct = &c->tensors[i];
		const struct dcr_delta_tensor *t = &p->t[i].t;
		if (strcmp(ct->info->name, t->name) ||
		    !dcr_ckpt_tensor_is(ct, t->dtype, t->ndim, t->shape) ||
		    strcmp(c->file_names[ct->file], t->file))
			return dcr_err_set(e, DCR_EFORMAT,
					   "receiver '%s': tensor '%s' does not have the layout the journal expects",
					   x->rc->dir, t->name);
		p->t[i].cur = ct;
	}
	return 0;
}

/* The file of tensor ct opened and mapped for writing, once. */
static int rp_open_file(struct replay *rp, const struct dcr_ckpt_tensor *ct,
			struct wfile **pf, struct dcr_err *e)
{
	const struct dcr_ckpt *c = rp->c;
	struct wfile *f = &rp->wf[ct->file];
	int r = 0;
	*pf = f;
	if (f->fd >= 0)
		return 0;
	char *path = dcr_path_join(rp->x->rc->dir, c->file_names[ct->file]);
	f->fd = path ? open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC) : -1;
	f->size = c->files[ct->file]->size;
	/* the last line of defence (links are rebuilt before, stage.c): never
	 * write in place through a symbolic link or into a file other names
	 * share, which may be outside the receiver */
	struct stat sb;
	if ((f->fd < 0 && errno == ELOOP) ||
	    (f->fd >= 0 && !fstat(f->fd, &sb) && (!S_ISREG(sb.st_mode) || sb.st_nlink != 1))) {
		r = dcr_err_set(e, DCR_EFORMAT,
				"refusing to write through '%s': it is %s (a file outside the receiver would change); replace it with a copy, then rerun",
				path, f->fd < 0 ? "a symbolic link" : !S_ISREG(sb.st_mode) ? "not a regular file"
										 : "a hard link with other names");
		if (f->fd >= 0)
			close(f->fd);
		f->fd = -1;
		free(path);
		return r;
	}
	if (f->fd >= 0) {
		void *m = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
		f->map = m == MAP_FAILED ? NULL : m;
	}
	if (f->fd < 0 || !f->map)
		r = dcr_err_sys(e, errno, "cannot open '%s' for writing", path);
	free(path);
	return r;
}

/* Tensor i's new bytes were written whole into its staged file by the
 * check before the commit, by this process (ptensor.direct). */
static int rp_direct(const struct replay *rp, size_t i)
{
	const struct plan *c = rp->checked;
	return c && i < c->n && c->t[i].direct;
}

/* Tensor i's new bytes were hashed to its target digest before the
 * commit, by this process, from the journal being replayed. */
static int rp_prechecked(const struct replay *rp, size_t i)
{
	const struct plan *c = rp->checked;
	return c && i < c->n && c->t[i].verified && !strcmp(c->t[i].t.name, rp->p.t[i].t.name) &&
	       !memcmp(c->t[i].t.digest.b, rp->p.t[i].t.digest.b, 32);
}

/* What to hash after the write, and room for every tensor's digest (the
 * others' taken from the journal: untouched ones were checked against
 * the base before the commit, touched ones were hashed with their
 * overwrites applied before the commit, by this process, and a rebuilt
 * file's touched and new ones written as hashed). A recovery, or
 * o->recheck, hashes every touched tensor again; the tensors a rebuilt
 * file copied (stage.c) are always hashed. */
static int rp_select(struct replay *rp, struct dcr_err *e)
{
	const struct plan *p = &rp->p;
	int recheck = !rp->checked || (rp->x->o && rp->x->o->recheck);
	size_t nsel = 0;
	rp->dg = dcr_calloc(p->n + 1, sizeof(*rp->dg));
	rp->sel = dcr_calloc(p->n + 1, 1);
	rp->queued = dcr_calloc(p->n + 1, 1);
	rp->late = dcr_calloc(p->n + 1, 1);
	if (!rp->dg || !rp->sel || !rp->queued || !rp->late)
		return dcr_err_sys(e, ENOMEM, "journal");
	for (size_t i = 0; i < p->n; i++) {
		int rebuilt = 0;
		for (size_t k = 0; k < p->nrenames; k++)
			rebuilt |= !strcmp(p->renames[k], p->t[i].t.file);
		/* a touched tensor of a file left in place, or a direct one:
		 * its bytes are the ones hashed (a rebuilt file's others are a
		 * copy made by stage.c) */
		int done = ((p->t[i].touched && !rebuilt) || rp_direct(rp, i)) && !recheck &&
			   rp_prechecked(rp, i);
		rp->sel[i] = (uint8_t)((rebuilt || p->t[i].touched) && !done);
		nsel += rp->sel[i];
		if (!rp->sel[i])
			rp->dg[i] = p->t[i].t.digest;
	}
	/* one thread more than cores: the writer mostly waits for the disk;
	 * none when nothing is hashed (threads that touch the mapping make
	 * every page written back cost a TLB shootdown on their cores) */
	int threads = rp->x->rc->threads > 0 ? rp->x->rc->threads : dcr_ncpu();
	rp->pool = dcr_hpool_new(nsel ? threads + 1 : 1);
	return rp->pool ? 0 : dcr_err_sys(e, ENOMEM, "journal");
}

/* Tensor i is written: start writing its pages back, and hash it while
 * the rest is written. */
static int rp_written(struct replay *rp, size_t i)
{
	const struct dcr_ckpt_tensor *ct = rp->p.t[i].cur;
	const struct dcr_tensor_info *ti = ct->info;
	struct wfile *f = &rp->wf[ct->file];
	if (f->fd >= 0)
		sync_file_range(f->fd, (off_t)ct->file_off, (off_t)dcr_tensor_bytes(ti),
				SYNC_FILE_RANGE_WRITE);
	rp->queued[i] = 1;
	if (!rp->sel[i])
		return 0;
	return dcr_hpool_add_tensor(rp->pool, ct, &rp->dg[i]);
}

/* Wait until no range being written meets [a, b) of the file, then claim
 * it (the item pool runs at most 64 threads and the caller). */
static void rp_claim(struct replay *rp, size_t file, uint64_t a, uint64_t b)
{
	pthread_mutex_lock(&rp->wmu);
	for (;;) {
		size_t k = 0;
		while (k < rp->nbusy && (rp->busy[k].file != file || rp->busy[k].b <= a ||
					 rp->busy[k].a >= b))
			k++;
		if (k == rp->nbusy && rp->nbusy < sizeof(rp->busy) / sizeof(rp->busy[0]))
			break;
		pthread_cond_wait(&rp->wcv, &rp->wmu);
	}
	rp->busy[rp->nbusy++] = (struct wrange){file, a, b};
	pthread_mutex_unlock(&rp->wmu);
}

static void rp_unclaim(struct replay *rp, size_t file, uint64_t a)
{
	pthread_mutex_lock(&rp->wmu);
	for (size_t k = 0; k < rp->nbusy; k++)
		if (rp->busy[k].file == file && rp->busy[k].a == a) {
			rp->busy[k] = rp->busy[--rp->nbusy];
			break;
		}
	pthread_cond_broadcast(&rp->wcv);
	pthread_mutex_unlock(&rp->wmu);
}

/* One of the journal's overwrites decoded and written into its file
 * (arg: its place in the file's mapping). The range is read into the
 * thread's scratch 256 KiB at a time (RP_PIECE: what pread brought into
 * the core's cache is still there when pwrite copies it out; 1 GB at 1%
 * in 2 MiB items on /dev/shm took 0.17-0.20 s so against 0.19-0.24 whole),
 * changed there and written back (pwrite) wherever the
 * changes touch more than a few of its pages: the first write to each page
 * of a shared file mapping takes a fault (on the virtual machines measured
 * here 15-20 us a page, the apply's largest cost), a copy through the page
 * cache none. Sparse items are scattered into the mapping. On the device
 * with --device cuda, on the caller's thread only, through the mapping.
 * Items never change one element twice (the check before the commit), so
 * they may be written in any order, side by side; overlapping ranges (the
 * producers of one pack each send their own elements of a tensor) take
 * turns (rp_claim). */
#define RP_PIECE ((uint64_t)256 << 10) /* a multiple of every unit */

static int rp_item(void *ctx, const struct dcr_item *it, void *arg, struct dcr_changes *ch,
		   struct dcr_buf *scratch, struct dcr_buf *enc, struct dcr_item *out,
		   struct dcr_err *e)
{
	struct replay *rp = ctx;
	const struct ctx *x = rp->x;
	const struct dcr_ckpt_tensor *ct = rp->p.t[it->tensor].cur;
	unsigned unit = dcr_dtype_unit(ct->info->dtype);
	const struct wfile *f = &rp->wf[ct->file];
	uint64_t a = ct->file_off + it->start * unit, bytes = it->len * unit;
	uint8_t *dst = arg;
	int cuda = x->o && x->o->device == DCR_DEVICE_CUDA, r;
	(void)out;
	if (!cuda && dcr_item_is_dense_overwrite(it)) {
		/* a dense overwrite: its bytes decoded where they are written
		 * from, nothing read (enc: the planes) */
		rp_claim(rp, ct->file, a, a + bytes);
		if (dcr_buf_reserve(scratch, (size_t)bytes + 1))
			r = dcr_err_sys(e, ENOMEM, "journal");
		else if (!(r = dcr_item_decode_dense(it, unit, scratch->p, enc, e)) &&
			 (r = dcr_pwrite_full(f->fd, scratch->p, (size_t)bytes, a)))
			r = dcr_err_sys(e, -r, "cannot write '%s'", rp->c->file_names[ct->file]);
		rp_unclaim(rp, ct->file, a);
		return r;
	}
	if ((r = dcr_item_decode(it, unit, ch, e)))
		return r;
	if (cuda)
		/* the same overwrites, scattered on the device */
		return (!rp->gpu && (r = dcr_cuda_ctx_new(&rp->gpu, e))) ? r
			: dcr_cuda_scatter_host(rp->gpu, dst, (size_t)(it->len * unit), unit, ch->pos,
						ch->val, ch->n, 0, e);
	rp_claim(rp, ct->file, a, a + bytes);
	if (ch->n < bytes / 65536) {
		/* about one change per 64 KiB or fewer: a few pages faulted in */
		dcr_scatter_populate(dst, unit, ch->pos, ch->n);
		dcr_scatter(dst, unit, ch->pos, ch->val, ch->n, 0);
	} else if (ch->n == it->len) {
		/* every element overwritten (a dense item): nothing read */
		if (dcr_buf_reserve(scratch, (size_t)bytes))
			r = dcr_err_sys(e, ENOMEM, "journal");
		else {
			dcr_scatter(scratch->p, unit, ch->pos, ch->val, ch->n, 0);
			if ((r = dcr_pwrite_full(f->fd, scratch->p, (size_t)bytes, a)))
				r = dcr_err_sys(e, -r, "cannot write '%s'",
						rp->c->file_names[ct->file]);
		}
	} else {
		/* RP_PIECE bytes at a time, so that what pread put in the
		 * scratch is still in the core's cache when pwrite copies
		 * it out */
		size_t k = 0;
		if (dcr_buf_reserve(scratch, (size_t)(bytes < RP_PIECE ? bytes : RP_PIECE)))
			r = dcr_err_sys(e, ENOMEM, "journal");
		for (uint64_t o = 0; o < bytes && !r; o += RP_PIECE) {
			size_t m = (size_t)(bytes - o < RP_PIECE ? bytes - o : RP_PIECE);
			uint64_t end = (o + m) / unit, e0 = o / unit;
			const uint8_t *cur;
			size_t k0 = k;
			while (k < ch->n && ch->pos[k] < end)
				k++;
			if ((r = dcr_ckpt_tensor_read(ct, it->start * unit + o, m, scratch, &cur, e)))
				break;
			if (cur != scratch->p)
				memcpy(scratch->p, cur, m); /* a tensor without a file */
			dcr_scatter_at(scratch->p, unit, e0, ch->pos + k0, ch->val + k0, k - k0);
			if ((r = dcr_pwrite_full(f->fd, scratch->p, m, a + o)))
				r = dcr_err_sys(e, -r, "cannot write '%s'",
						rp->c->file_names[ct->file]);
		}
	}
	rp_unclaim(rp, ct->file, a);
	return r;
}

/* The next item written, in the journal's order (1), or 0 at the end: the
 * tensor before it, once all of its items are written, starts its way to
 * the disk (and to the hash threads, rp_written). */
static int rp_take(struct replay *rp, struct ap_ipool *ip, size_t *cur, uint64_t *nitems,
		   struct dcr_err *e)
{
	struct ctx *x = rp->x;
	struct dcr_item it;
	int r = ap_ipool_get(ip, &it, NULL, e);
	if (r != 1)
		return r;
	if (it.tensor != *cur) {
		if (*cur != SIZE_MAX && !rp->queued[*cur] && (r = rp_written(rp, *cur)))
			return dcr_err_sys(e, -r, "journal");
		*cur = it.tensor;
		rp->late[*cur] |= rp->queued[*cur]; /* out of order: hashed again */
	}
	rp->p.t[it.tensor].touched = 1;
	++*nitems;
	if (x->o && x->o->progress)
		x->o->progress(x->o->progress_ctx, rp->p.nitems + *nitems, rp->p.nitems * 2);
	return 1;
}

/* 2. overwrites: the journal read again, its items decoded and scattered
 * into their files' mappings on every core, each tensor hashed (step 3)
 * once its items are written, then every written file synced */
static int rp_overwrite(struct replay *rp, struct dcr_err *e)
{
	struct ctx *x = rp->x;
	struct plan *p = &rp->p;
	const struct dcr_ckpt *c = rp->c;
	int r;
	rp->wf = dcr_calloc(c->nfiles, sizeof(*rp->wf));
	if (!rp->wf)
		return dcr_err_sys(e, ENOMEM, "journal");
	for (size_t i = 0; i < c->nfiles; i++)
		rp->wf[i].fd = -1;
	if ((r = rp_select(rp, e)))
		return r;
	if ((r = dcr_fdbuf_rewind(&rp->in)))
		return dcr_err_sys(e, -r, "cannot rewind the journal");
	if ((r = dcr_delta_reader_init(&rp->rd, (struct dcr_source){dcr_source_fdbuf_read, &rp->in},
				       "journal", e)))
		return r;
	rp->rd.journal = 1;
	int cuda = x->o && x->o->device == DCR_DEVICE_CUDA;
	struct ap_ipool *ip = ap_ipool_new(cuda ? 1 : x->rc->threads, rp_item, rp);
	if (!ip)
		return dcr_err_sys(e, ENOMEM, "journal");
	struct dcr_delta_rec rec;
	uint64_t nitems = 0;
	size_t cur = SIZE_MAX; /* the tensor being written */
	while ((r = dcr_delta_next(&rp->rd, &rec, e)) == 1) {
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			break;
		if (it.enc != DCR_ENC_OVERWRITE) {
			r = dcr_err_set(e, DCR_EFORMAT, "journal holds a non-overwrite item");
			break;
		}
		const struct dcr_ckpt_tensor *ct = p->t[it.tensor].cur;
		unsigned unit = dcr_dtype_unit(ct->info->dtype);
		struct wfile *f;
		if ((r = rp_open_file(rp, ct, &f, e)))
			break;
		while (!ap_ipool_room(ip) && (r = rp_take(rp, ip, &cur, &nitems, e)) == 1)
			;
		if (r < 0)
			break;
		if (ap_ipool_put(ip, &it, f->map + ct->file_off + it.start * unit)) {
			r = dcr_err_sys(e, ENOMEM, "journal");
			break;
		}
		r = 1;
	}
	while (r == 0 && (r = rp_take(rp, ip, &cur, &nitems, e)) == 1)
		r = 0;
	ap_ipool_free(ip); /* waits for the item being written, if any */
	if (r == -ENOMEM)
		return dcr_err_sys(e, ENOMEM, "journal");
	if (r < 0)
		return r;
	for (size_t i = 0; i < p->n && !r; i++)
		if (rp->sel[i] && !rp->queued[i] && !rp->late[i])
			r = rp_written(rp, i); /* the last one, and rebuilt files */
	if (r)
		return dcr_err_sys(e, -r, "journal");
	for (size_t i = 0; i < c->nfiles; i++) {
		if (rp->wf[i].fd < 0)
			continue;
		ap_step(x);
		if (msync(rp->wf[i].map, rp->wf[i].size, MS_SYNC) || fsync(rp->wf[i].fd))
			return dcr_err_sys(e, errno, "cannot sync '%s'", c->file_names[i]);
	}
	return 0;
}

/* 3. check touched tensors and those in rebuilt files (rp->dg: every
 * tensor's digest) */
static int rp_check(struct replay *rp, struct dcr_apply_result *res, struct dcr_err *e)
{
	const struct plan *p = &rp->p;
	int r = dcr_hpool_wait(rp->pool);
	for (size_t i = 0; i < p->n && !r; i++)
		if (rp->late[i])
			r = rp_written(rp, i);
	if (!r)
		r = dcr_hpool_wait(rp->pool);
	if (r)
		return dcr_err_sys(e, -r, "cannot hash '%s'", rp->x->rc->dir);
	if (res && rp->checked)
		res->tensors_prehashed = rp->checked->prehashed;
	for (size_t i = 0; i < p->n; i++) {
		if (!rp->sel[i]) {
			if (res && (p->t[i].touched || rp_direct(rp, i)))
				res->tensors_checked++; /* before the commit */
			continue;
		}
		if (memcmp(rp->dg[i].b, p->t[i].t.digest.b, 32))
			return dcr_err_set(e, DCR_EDIGEST,
					   "receiver '%s': tensor '%s' does not match its target digest after apply",
					   rp->x->rc->dir, p->t[i].t.name);
		if (res)
			res->tensors_checked++;
	}
	return 0;
}

/* 4. done: cache the new state, drop the journal and the staging area */
static int rp_done(struct replay *rp, const char *jp, struct dcr_apply_result *res,
		   struct dcr_err *e)
{
	struct ctx *x = rp->x;
	const struct plan *p = &rp->p;
	int r;
	ap_step(x);
	if ((r = dcr_receiver_save_state(x->rc, rp->c, &p->target, rp->dg, e)))
		return r;
	ap_step(x);
	if (unlink(jp))
		return dcr_err_sys(e, errno, "cannot remove '%s'", jp);
	dcr_fsync_dir(x->rc->sdir);
	/* what the delta held: a direct tensor's items are not in the journal */
	const struct plan *d = rp->checked ? rp->checked : p;
	char hex[65];
	dcr_digest_hex(&p->target, hex);
	dcr_receiver_log(x->rc, "applied %llu items, state %s", (unsigned long long)d->nitems, hex);
	if (res) {
		res->base = p->base; /* the state the journal was made against */
		memcpy(res->attempt, p->attempt, 16);
		res->target = p->target;
		res->items = d->nitems;
		res->changes = d->nchanges;
	}
	return 0;
}

int ap_replay(struct ctx *x, const struct plan *checked, struct dcr_apply_result *res,
	      struct dcr_err *e)
{
	char *jp = dcr_receiver_path(x->rc, "journal");
	struct replay rp = {.x = x, .checked = checked, .fd = -1};
	int r;
	if (!jp)
		return dcr_err_sys(e, ENOMEM, "journal");
	pthread_mutex_init(&rp.wmu, NULL);
	pthread_cond_init(&rp.wcv, NULL);
	rp.fd = open(jp, O_RDONLY | O_CLOEXEC);
	if (rp.fd < 0) {
		r = dcr_err_sys(e, errno, "cannot open '%s'", jp);
		goto out;
	}
	if (dcr_fdbuf_init(&rp.in, rp.fd, DCR_FDBUF_SIZE)) {
		r = dcr_err_sys(e, ENOMEM, "journal");
		goto out;
	}
	/* read twice: its plan, then its items (rp_overwrite) */
	if ((r = ap_read_plan((struct dcr_source){dcr_source_fdbuf_read, &rp.in}, NULL, 0, -1, 1,
			      "journal", &rp.p, e)) ||
	    (r = rp_move_files(&rp, e)) ||
	    (r = rp_open_ckpt(&rp, e)) ||
	    (r = rp_overwrite(&rp, e)) ||
	    (r = rp_check(&rp, res, e)))
		goto out;
	r = rp_done(&rp, jp, res, e);
out:
	dcr_hpool_free(rp.pool); /* its threads read the checkpoint */
	if (rp.wf)
		for (size_t i = 0; rp.c && i < rp.c->nfiles; i++) {
			if (rp.wf[i].map)
				munmap(rp.wf[i].map, rp.wf[i].size);
			if (rp.wf[i].fd >= 0)
				close(rp.wf[i].fd);
		}
	free(rp.wf);
	free(rp.dg);
	free(rp.sel);
	free(rp.queued);
	free(rp.late);
	dcr_delta_reader_release(&rp.rd);
	dcr_fdbuf_release(&rp.in);
	dcr_cuda_ctx_free(rp.gpu);
	dcr_ckpt_close(rp.c);
	ap_plan_free(&rp.p);
	if (rp.fd >= 0)
		close(rp.fd);
	pthread_mutex_destroy(&rp.wmu);
	pthread_cond_destroy(&rp.wcv);
	free(jp);
	return r;
}

int ap_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
		      struct dcr_err *e)
{
	/* a device that is not there is said before anything is touched */
	if (o && o->device == DCR_DEVICE_CUDA) {
		int r = dcr_cuda_probe(e);
		if (r)
			return r;
	}
	char *jp = dcr_receiver_path(rc, "journal");
	int have = jp && access(jp, F_OK) == 0;
	char *tmp = dcr_receiver_path(rc, "journal.tmp");
	if (tmp)
		unlink(tmp); /* an uncommitted journal: nothing was written */
	free(tmp);
	if (!have) {
		free(jp);
		return 0;
	}
	struct ctx x = {.rc = rc, .o = o};
	int r = ap_replay(&x, NULL, NULL, e);
	if (r == DCR_EFORMAT || r == DCR_EDIGEST) {
		/* a journal that cannot be read, or files that did not come out
		 * as it says: every apply would stop here again, so name the
		 * way out */
		char why[512];
		size_t n = strnlen(e->msg, sizeof(why) - 1);
		memcpy(why, e->msg, n);
		why[n] = 0;
		r = dcr_err_set(e, r,
				"receiver '%s': cannot finish the apply a crash interrupted (%s); its files may hold part of it: move '%s' aside, then restore them from a dense copy (dcr-pull --dense STORE/NAME | dcr-apply '%s')",
				rc->dir, why, jp, rc->dir);
	}
	free(jp);
	if (r)
		return r;
	dcr_receiver_log(rc, "recovered an interrupted apply");
	return 1;
}

/* What every apply does first: clear the result, and finish an interrupted
 * apply (its journal) before looking at anything new. */
int ap_begin(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
	     struct dcr_apply_result *res, struct dcr_err *e)
{
	if (res)
		memset(res, 0, sizeof(*res));
	int r = ap_recover(rc, o, e);
	if (r < 0)
		return r;
	if (res)
		res->recovered = r;
	return 0;
}
