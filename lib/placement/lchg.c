/* lchg.c - canonical changes collected per tensor, and the items they
 * become (what rankdiff.c and merge.c share). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "placement/lchg.h"

int lchg_cmp(const void *a, const void *b)
{
	const struct lchg *x = a, *y = b;
	if (x->c != y->c)
		return x->c < y->c ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

int lvec_push(struct lvec *l, const struct lchg *c)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		struct lchg *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = *c;
	return 0;
}

void lvec_free(struct lvec *l)
{
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* Framed ITEM records for sorted, distinct changes of tensor tidx: an item
 * spans at most `chunk` elements and holds changes of one encoding. */
int lchg_emit_items(struct dcr_buf *recs, uint32_t tidx, const struct lchg *v, size_t n,
		      unsigned unit, uint64_t chunk, uint64_t *nitems, struct dcr_err *e)
{
	struct dcr_changes ch = {0};
	struct dcr_buf enc = {0};
	int r = 0;
	for (size_t i = 0; i < n && !r;) {
		uint64_t start = v[i].c;
		size_t j = i;
		while (j < n && v[j].enc == v[i].enc && v[j].c - start < chunk)
			j++;
		if (dcr_changes_reserve(&ch, j - i)) {
			r = dcr_err_sys(e, ENOMEM, "layout delta");
			break;
		}
		for (size_t k = i; k < j; k++) {
			ch.pos[k - i] = v[k].c - start;
			ch.val[k - i] = v[k].val;
		}
		ch.n = j - i;
		struct dcr_item it = {.tensor = tidx, .enc = v[i].enc, .start = start,
				      .len = v[j - 1].c - start + 1, .n = j - i};
		enc.len = 0;
		if ((r = dcr_item_encode(&ch, unit, it.len, 0, &it.codec, &enc, e)))
			break;
		it.data = enc.p;
		it.data_len = enc.len;
		if (dcr_delta_item_record(recs, &it))
			r = dcr_err_sys(e, ENOMEM, "layout delta");
		(*nitems)++;
		i = j;
	}
	dcr_changes_free(&ch);
	dcr_buf_free(&enc);
	return r;
}

