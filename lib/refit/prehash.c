/* prehash.c - tensor digests put together from an apply's items as they
 * are resolved (see prehash.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ntab.h"
#include "core/util.h"
#include "refit/prehash.h"

/* Bytes between items read and hashed here, on the thread that takes the
 * items, at most this much beyond the bytes the items cover: a tensor of
 * few touched ranges is left to the check, which hashes on every core. */
#define GAP_FREE ((uint64_t)16 << 20)
#define GAP_STEP ((size_t)4 << 20) /* read at once */
/* A hasher per stripe (about 2 KiB): tensors of wider rows are left to
 * the check */
#define PREHASH_MAX_STRIPES 4096

enum { LIVE, DONE, BAD };

static void drop_parts(struct dcr_parts **ps);

struct pre {
	char *name;
	const struct dcr_ckpt_tensor *ct;
	struct dcr_tacc *acc; /* LIVE */
	struct dcr_stripes st;
	uint64_t nitems;
	uint64_t covered, gaps; /* bytes the items cover, and between them */
	dcr_digest dg;	      /* DONE */
	int state;
};

struct ap_prehash {
	struct dcr_ntab tab; /* the struct pres, by name */
	struct pre *live[PREHASH_LIVE];
	size_t nlive;
	struct dcr_buf buf; /* bytes between items */
};

struct ap_prehash *ap_prehash_new(void)
{
	return dcr_calloc(1, sizeof(struct ap_prehash));
}

static void spoil(struct pre *p)
{
	dcr_tacc_free(p->acc);
	p->acc = NULL;
	p->state = BAD;
}

static void pre_free(void *v)
{
	struct pre *p = v;
	dcr_tacc_free(p->acc);
	free(p->name);
	free(p);
}

void ap_prehash_free(struct ap_prehash *h)
{
	if (!h)
		return;
	dcr_ntab_clear(&h->tab, pre_free);
	dcr_buf_free(&h->buf);
	free(h);
}

/* The bytes [pos, x1) of p's tensor that no item changes, from the
 * receiver, into its digest. */
static void take_gap(struct ap_prehash *h, struct pre *p, uint64_t x1)
{
	uint64_t pos = dcr_tacc_pos(p->acc);
	p->gaps += x1 - pos;
	if (!p->ct || p->gaps > p->covered + GAP_FREE) {
		spoil(p);
		return;
	}
	while (pos < x1) {
		size_t n = x1 - pos < GAP_STEP ? (size_t)(x1 - pos) : GAP_STEP;
		const uint8_t *b;
		struct dcr_parts ps = {0};
		struct dcr_err e;
		int r = dcr_ckpt_tensor_read(p->ct, pos, n, &h->buf, &b, &e);
		if (!r)
			r = dcr_stripes_range_parts(&p->st, b, pos, pos + n, &ps, &e);
		if (!r)
			r = dcr_tacc_add(p->acc, &ps, pos + n);
		dcr_parts_free(&ps);
		if (r) {
			spoil(p);
			return;
		}
		pos += n;
	}
}

/* p's last item came: the rest of its bytes, and its digest */
static void finish(struct ap_prehash *h, struct pre *p)
{
	for (size_t i = 0; i < h->nlive; i++)
		if (h->live[i] == p) {
			h->live[i] = h->live[--h->nlive];
			break;
		}
	if (p->state != LIVE)
		return;
	take_gap(h, p, p->st.nbytes);
	if (p->state == LIVE && dcr_tacc_final(p->acc, &p->dg) == 0)
		p->state = DONE;
	else
		p->state = BAD;
	dcr_tacc_free(p->acc);
	p->acc = NULL;
}

/* The tensor's entry, made LIVE when new; NULL without memory. */
static struct pre *entry(struct ap_prehash *h, const char *name, const struct dcr_ckpt_tensor *ct)
{
	struct pre *p = dcr_ntab_get(&h->tab, name);
	if (p)
		return p;
	if (!(p = dcr_calloc(1, sizeof(*p))) || !(p->name = dcr_strdup(name)) ||
	    dcr_ntab_put(&h->tab, p)) {
		if (p)
			free(p->name);
		free(p);
		return NULL;
	}
	p->ct = ct;
	p->state = BAD;
	if (ct) {
		const struct dcr_tensor_info *ti = ct->info;
		dcr_stripes_init(&p->st, ti->dtype, ti->ndim, ti->shape);
		if (p->st.nstripes <= PREHASH_MAX_STRIPES)
			p->acc = dcr_tacc_new(ti->dtype, ti->ndim, ti->shape);
	}
	if (!p->acc)
		return p;
	/* the oldest live one is done with (items come in tensor order) */
	if (h->nlive == PREHASH_LIVE)
		finish(h, h->live[0]);
	h->live[h->nlive++] = p;
	p->state = LIVE;
	return p;
}

struct dcr_parts *ap_prehash_parts(int dtype, unsigned ndim, const uint64_t *shape,
				   const struct dcr_item *it, uint8_t *bytes,
				   const struct dcr_changes *ch)
{
	unsigned unit = dcr_dtype_unit(dtype);
	struct dcr_stripes st;
	struct dcr_parts *ps = dcr_calloc(1, sizeof(*ps));
	struct dcr_err e;
	if (!ps)
		return NULL;
	dcr_scatter(bytes, unit, ch->pos, ch->val, ch->n, 0);
	dcr_stripes_init(&st, dtype, ndim, shape);
	uint64_t x0 = it->start * unit;
	if (dcr_stripes_range_parts(&st, bytes, x0, x0 + it->len * unit, ps, &e)) {
		dcr_parts_free(ps);
		free(ps);
		return NULL;
	}
	return ps;
}

void ap_prehash_take(struct ap_prehash *h, const char *name, const struct dcr_ckpt_tensor *ct,
		     const struct dcr_item *it, struct dcr_parts *parts)
{
	struct pre *p = entry(h, name, ct);
	if (p && p->state == LIVE) {
		unsigned unit = dcr_dtype_unit(p->ct->info->dtype);
		uint64_t x0 = it->start * unit, x1 = x0 + it->len * unit;
		p->nitems++;
		if (!parts || p->ct != ct || x0 < dcr_tacc_pos(p->acc) || x1 > p->st.nbytes)
			spoil(p);
		if (p->state == LIVE && x0 > dcr_tacc_pos(p->acc))
			take_gap(h, p, x0);
		if (p->state == LIVE && dcr_tacc_add(p->acc, parts, x1))
			spoil(p);
		p->covered += x1 - x0;
	} else if (p) {
		spoil(p); /* after its digest, or spoilt already */
	}
	if (p && p->state == BAD)
		finish(h, p); /* out of the live ones */
	drop_parts(&parts);
}

int ap_prehash_get(struct ap_prehash *h, const char *name, uint64_t nitems, dcr_digest *out)
{
	struct pre *p = dcr_ntab_get(&h->tab, name);
	if (!p)
		return 0;
	if (p->state == LIVE)
		finish(h, p);
	if (p->state != DONE || p->nitems != nitems)
		return 0;
	*out = p->dg;
	return 1;
}

static void drop_parts(struct dcr_parts **ps)
{
	if (*ps) {
		dcr_parts_free(*ps);
		free(*ps);
		*ps = NULL;
	}
}

struct ap_parts_cell *ap_ring_give(struct ap_parts_ring *r, const struct dcr_ckpt_tensor *base)
{
	struct ap_parts_cell *c = &r->cell[r->given++ % AP_PARTS_RING];
	drop_parts(&c->parts);
	c->base = base;
	return c;
}

struct ap_parts_cell *ap_ring_take(struct ap_parts_ring *r)
{
	return r->taken == r->given ? NULL : &r->cell[r->taken++ % AP_PARTS_RING];
}

void ap_ring_release(struct ap_parts_ring *r)
{
	for (size_t k = 0; k < AP_PARTS_RING; k++)
		drop_parts(&r->cell[k].parts);
	r->given = r->taken = 0;
}
