/* diff.c - compare two checkpoints on stored bits and write a delta.
 *
 * Tensors are visited in name order. A tensor whose name, dtype and shape
 * are unchanged is compared chunk by chunk and its changes go out as XOR
 * items; any other target tensor goes out whole as OVERWRITE items. Target
 * digests are computed by a second thread while the first compares, and
 * follow the items as DONE records. Memory is bounded by the chunk size.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "checkpoint.h"
#include "diff.h"

struct hasher {
	const struct dcr_ckpt *c;
	dcr_digest *dg;
	pthread_t th;
	int started;
};

static void *hash_new(void *arg)
{
	struct hasher *h = arg;
	dcr_ckpt_digests(h->c, h->dg, 1);
	return NULL;
}

/* Collect the changed units of one chunk. */
static size_t scan_chunk(const uint8_t *a, const uint8_t *b, uint64_t nunits, unsigned unit,
			 struct dcr_changes *ch)
{
	size_t n = 0;
	uint64_t nbytes = nunits * unit, i = 0;
	while (i < nbytes) {
		/* skip equal 32-byte blocks quickly */
		if (i + 32 <= nbytes && !memcmp(a + i, b + i, 32)) {
			i += 32;
			continue;
		}
		uint64_t stop = i + 32 < nbytes ? i + 32 : nbytes;
		for (; i < stop; i += unit) {
			uint64_t x = load_unit(a + i, unit), y = load_unit(b + i, unit);
			if (x != y) {
				ch->pos[n] = i / unit;
				ch->val[n] = x ^ y;
				n++;
			}
		}
	}
	ch->n = n;
	return n;
}

static int emit_item(struct dcr_delta_writer *w, uint32_t tidx, uint8_t enc, uint64_t start,
		     uint64_t len, int dense, const struct dcr_changes *ch, unsigned unit,
		     struct dcr_buf *tmp, struct dcr_err *e)
{
	tmp->len = 0;
	struct dcr_item it = {.tensor = tidx, .enc = enc, .start = start, .len = len,
			      .n = ch->n, .flags = dense ? DCR_ITEM_DENSE : 0};
	int r = dcr_item_encode(ch, unit, len, dense, &it.codec, tmp, e);
	if (r)
		return r;
	it.data = tmp->p;
	it.data_len = tmp->len;
	return dcr_delta_write_item(w, &it, e);
}

int dcr_diff(const struct dcr_diff_opts *o, struct dcr_sink sink, struct dcr_diff_stats *st,
	     struct dcr_err *e)
{
	struct dcr_ckpt *a = NULL, *b = NULL;
	struct dcr_delta_writer w = {0};
	struct dcr_changes ch = {0};
	struct dcr_buf tmp = {0};
	struct hasher h = {0};
	int r;
	uint64_t chunk = o->chunk_elems ? o->chunk_elems : (1u << 20);
	if (chunk > DCR_ITEM_MAX_ELEMS)
		chunk = DCR_ITEM_MAX_ELEMS;

	if ((r = dcr_ckpt_open(o->base, &a, e)) || (r = dcr_ckpt_open(o->target, &b, e)))
		goto out;
	dcr_digest base_id;
	if (o->base_id)
		base_id = *o->base_id;
	else if ((r = dcr_ckpt_state_id(a, &base_id, NULL, e)))
		goto out;
	uint8_t attempt[16];
	if (o->attempt)
		memcpy(attempt, o->attempt, 16);
	else if (getrandom(attempt, 16, 0) != 16) {
		r = dcr_err_sys(e, errno, "getrandom");
		goto out;
	}
	if (dcr_changes_reserve(&ch, chunk)) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	h.c = b;
	h.dg = dcr_calloc(b->ntensors, sizeof(dcr_digest));
	if (!h.dg) {
		r = dcr_err_sys(e, ENOMEM, "diff");
		goto out;
	}
	if (pthread_create(&h.th, NULL, hash_new, &h)) {
		r = dcr_err_sys(e, EAGAIN, "cannot start a thread");
		goto out;
	}
	h.started = 1;
	if ((r = dcr_delta_writer_init(&w, sink, &base_id, attempt, o->what, e)))
		goto out;

	/* removed tensors */
	for (size_t i = 0; i < a->ntensors; i++)
		if (!dcr_ckpt_find(b, a->tensors[i].info->name) &&
		    (r = dcr_delta_write_remove(&w, a->tensors[i].info->name, e)))
			goto out;

	uint64_t done_bytes = 0, total_bytes = 0;
	for (size_t i = 0; i < b->ntensors; i++)
		total_bytes += dcr_tensor_bytes(b->tensors[i].info);
	for (size_t i = 0; i < b->ntensors; i++) {
		const struct dcr_ckpt_tensor *nt = &b->tensors[i];
		const struct dcr_tensor_info *ni = nt->info;
		const struct dcr_ckpt_tensor *bt = dcr_ckpt_find(a, ni->name);
		int same = bt && bt->info->dtype == ni->dtype && bt->info->ndim == ni->ndim &&
			   !memcmp(bt->info->shape, ni->shape, ni->ndim * sizeof(uint64_t));
		struct dcr_delta_tensor dt = {.name = ni->name, .file = b->file_names[nt->file],
					      .flags = same ? 0 : DCR_TENSOR_NEW,
					      .dtype = ni->dtype, .ndim = ni->ndim};
		memcpy(dt.shape, ni->shape, sizeof(dt.shape));
		if ((r = dcr_delta_write_tensor(&w, &dt, e)))
			goto out;
		unsigned unit = dcr_dtype_unit(ni->dtype);
		uint64_t nunits = dcr_tensor_bytes(ni) / unit;
		for (uint64_t s = 0; s < nunits; s += chunk) {
			uint64_t len = nunits - s < chunk ? nunits - s : chunk;
			const uint8_t *pb = nt->data + s * unit;
			if (same) {
				const uint8_t *pa = bt->data + s * unit;
				if (!memcmp(pa, pb, len * unit) || !scan_chunk(pa, pb, len, unit, &ch))
					continue;
				if (st)
					st->changed += ch.n;
				r = emit_item(&w, (uint32_t)i, DCR_ENC_XOR, s, len, 0, &ch, unit,
					      &tmp, e);
			} else {
				for (uint64_t k = 0; k < len; k++) {
					ch.pos[k] = k;
					ch.val[k] = load_unit(pb + k * unit, unit);
				}
				ch.n = len;
				if (st)
					st->changed += len;
				r = emit_item(&w, (uint32_t)i, DCR_ENC_OVERWRITE, s, len, 1, &ch,
					      unit, &tmp, e);
			}
			if (r)
				goto out;
			if (o->progress)
				o->progress(o->progress_ctx, done_bytes + (s + len) * unit, total_bytes);
		}
		done_bytes += dcr_tensor_bytes(ni);
		if (o->progress)
			o->progress(o->progress_ctx, done_bytes, total_bytes);
	}
	pthread_join(h.th, NULL);
	h.started = 0;
	for (size_t i = 0; i < b->ntensors; i++)
		if ((r = dcr_delta_write_done(&w, (uint32_t)i, &h.dg[i], e)))
			goto out;
	dcr_digest target;
	dcr_ckpt_state_from(b, h.dg, &target);
	if ((r = dcr_delta_write_end(&w, &target, e)))
		goto out;
	if (st) {
		st->base = base_id;
		st->target = target;
		st->bytes_out = w.bytes;
		st->dense_bytes = total_bytes;
		st->items = w.nitems;
		st->tensors = b->ntensors;
	}
out:
	if (h.started)
		pthread_join(h.th, NULL);
	free(h.dg);
	dcr_delta_writer_release(&w);
	dcr_changes_free(&ch);
	dcr_buf_free(&tmp);
	dcr_ckpt_close(a);
	dcr_ckpt_close(b);
	return r;
}
