/* squash.c - compose a chain of deltas v1->v2->...->vk into one v1->vk.
 *
 * Pass 1 reads every delta whole (trailers checked) for its tensors,
 * removals, digests and base/target ids, and checks the chain. Pass 2 walks
 * the last delta's tensors in name order; each input is read item by item,
 * in step (items must come tensor by tensor in name order and by rising
 * start, as dcr-diff writes them). A tensor is swept in cells of up to 1Mi
 * elements: each input's changes in the cell are composed in chain order,
 *   nothing + XOR m = XOR m       XOR a + XOR b = XOR a^b
 *   anything + OVERWRITE v = OVERWRITE v       OVERWRITE v + XOR m = OVERWRITE v^m
 * and written as one item per run of one kind (XOR masks of 0 dropped). A
 * tensor created (NEW) somewhere in the chain starts from zeros at its last
 * creation, so its composed XORs become overwrites there. Memory: one
 * decoded item per input and one cell.
 *
 * Items coded against the receiver's bits (XOR items of codecs delta and
 * classed, what dcr-diff writes by default) decode only against the bits
 * of the tensor at that step. With the chain's base checkpoint
 * (dcr_squash_base) the squash has them: each tensor is rebuilt in memory
 * from the base, delta by delta, each item resolved against the bits the
 * steps before left, checked against the last delta's digest, and written
 * as its changes from the base (XOR, coded as dcr-diff codes them: the
 * receiver holds the base) or, for a tensor the chain creates, as
 * overwrites of every element the chain touched. Memory: one tensor.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/checkpoint.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/squash.h"

#define CELL_MAX (1u << 20)

struct sq_in {
	const char *path;
	int fd;
	dcr_digest base, target;
	struct dcr_delta_tensor *t; /* in record order (sorted by name) */
	size_t nt;
	char **removed;
	size_t nremoved;
	/* pass 2 */
	struct dcr_delta_reader rd;
	int have_rd, valid, ended;
	uint32_t tensor;     /* of the current item */
	uint64_t start, len; /* of the current item */
	uint8_t enc;
	struct dcr_changes ch;
	int raw;             /* keep items as read (it), do not decode them */
	struct dcr_item it;  /* the current item when raw; data valid until the next fetch */
	size_t idx;          /* next change of the current item */
	int64_t last_tensor;
	uint64_t last_end;
};

static void in_free(struct sq_in *in)
{
	for (size_t i = 0; i < in->nt; i++)
		dcr_delta_tensor_clear(&in->t[i]);
	free(in->t);
	for (size_t i = 0; i < in->nremoved; i++)
		free(in->removed[i]);
	free(in->removed);
	if (in->have_rd)
		dcr_delta_reader_release(&in->rd);
	dcr_changes_free(&in->ch);
	if (in->fd >= 0)
		close(in->fd);
}

static const struct dcr_delta_tensor *find(const struct sq_in *in, const char *name, size_t *at)
{
	size_t lo = 0, hi = in->nt;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int k = strcmp(in->t[mid].name, name);
		if (!k) {
			if (at)
				*at = mid;
			return &in->t[mid];
		}
		if (k < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int refuse_needs_base(const char *path, const struct dcr_item *it, struct dcr_err *e)
{
	return dcr_err_set(e, DCR_EFORMAT,
			   "'%s' codes XOR items against the receiver's bits (codec %s): squash it with --base CKPT, the chain's first base checkpoint, or make the chain with dcr-diff --codec plain",
			   path, dcr_codec_name(it->codec));
}

static int pass1(struct sq_in *in, uint64_t *maxlen, struct dcr_err *e)
{
	struct dcr_delta_reader rd;
	int r = dcr_delta_reader_init(&rd, (struct dcr_source){dcr_source_fd_read, &in->fd},
				      in->path, e);
	struct dcr_delta_rec rec;
	size_t cap = 0;
	uint64_t items = 0, changes = 0;
	while (!r && (r = dcr_delta_next(&rd, &rec, e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_TENSOR) {
			if (in->nt == cap) {
				cap = cap ? 2 * cap : 64;
				struct dcr_delta_tensor *v = realloc(in->t, cap * sizeof(*v));
				if (!v) {
					r = dcr_err_sys(e, ENOMEM, "squash");
					break;
				}
				in->t = v;
			}
			if ((r = dcr_delta_parse_tensor(&rec, &in->t[in->nt], e)))
				break;
			in->nt++;
			if (in->nt > 1 && strcmp(in->t[in->nt - 2].name, in->t[in->nt - 1].name) >= 0)
				r = dcr_err_set(e, DCR_EFORMAT, "%s: tensors out of order", in->path);
		} else if (rec.type == DCR_REC_ITEM) {
			struct dcr_item it;
			if ((r = dcr_delta_parse_item(&rec, &it, e)))
				break;
			items++;
			changes += it.n;
			if (it.tensor >= in->nt)
				r = dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor", in->path);
			else if (!in->raw && dcr_item_needs_base(&it))
				r = refuse_needs_base(in->path, &it, e);
			else if (it.len > *maxlen)
				*maxlen = it.len;
		} else if (rec.type == DCR_REC_REMOVE) {
			char *name, **v = realloc(in->removed, (in->nremoved + 1) * sizeof(char *));
			if (!v) {
				r = dcr_err_sys(e, ENOMEM, "squash");
				break;
			}
			in->removed = v;
			if (!(r = dcr_delta_parse_name(&rec, &name, e)))
				in->removed[in->nremoved++] = name;
		} else if (rec.type == DCR_REC_DONE) {
			uint32_t ti;
			dcr_digest d;
			if (!(r = dcr_delta_parse_done(&rec, &ti, &d, e))) {
				if (ti >= in->nt)
					r = dcr_err_set(e, DCR_EFORMAT, "%s: bad DONE record", in->path);
				else {
					in->t[ti].digest = d;
					in->t[ti].have_digest = 1;
				}
			}
		}
	}
	if (!r)
		r = dcr_delta_check_end(&rd, in->nt, items, changes, e);
	if (!r) {
		in->base = rd.base;
		in->target = rd.target;
		for (size_t i = 0; i < in->nt && !r; i++)
			if (!in->t[i].have_digest)
				r = dcr_err_set(e, DCR_EFORMAT, "%s: no digest for '%s'", in->path,
						in->t[i].name);
	}
	dcr_delta_reader_release(&rd);
	return r;
}

/* Load the next item of in (skipping other records); in->valid = 0 at END. */
static int fetch(struct sq_in *in, struct dcr_err *e)
{
	struct dcr_delta_rec rec;
	int r;
	in->valid = 0;
	while (!in->ended && (r = dcr_delta_next(&in->rd, &rec, e)) == 1) {
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			return r;
		if (it.tensor >= in->nt)
			return dcr_err_set(e, DCR_EFORMAT, "%s: item for undeclared tensor", in->path);
		if ((int64_t)it.tensor < in->last_tensor ||
		    ((int64_t)it.tensor == in->last_tensor && it.start < in->last_end))
			return dcr_err_set(e, DCR_EFORMAT,
					   "%s: items are not in tensor and position order (squash needs dcr-diff's order)",
					   in->path);
		const struct dcr_delta_tensor *t = &in->t[it.tensor];
		unsigned unit = dcr_dtype_unit(t->dtype);
		uint64_t units = dcr_delta_tensor_units(t);
		if ((r = dcr_item_check_range(&it, units, in->path, t->name, e)))
			return r;
		if (in->raw)
			in->it = it;
		else if (dcr_item_needs_base(&it))
			return refuse_needs_base(in->path, &it, e);
		else if ((r = dcr_item_decode(&it, unit, &in->ch, e)))
			return r;
		in->last_tensor = it.tensor;
		in->last_end = it.start + it.len;
		in->tensor = it.tensor;
		in->start = it.start;
		in->len = it.len;
		in->enc = it.enc;
		in->idx = 0;
		in->valid = 1;
		return 0;
	}
	if (!in->ended && r < 0)
		return r;
	in->ended = 1;
	return 0;
}

/* Skip items of tensors named before `name` (and of `name` itself if skip_eq). */
static int skip_to(struct sq_in *in, const char *name, int skip_eq, struct dcr_err *e)
{
	int r = 0;
	while (!r && in->valid) {
		int k = strcmp(in->t[in->tensor].name, name);
		if (k > 0 || (k == 0 && !skip_eq))
			break;
		r = fetch(in, e);
	}
	return r;
}

struct cell {
	uint8_t *kind; /* 0 none, 1 XOR, 2 OVERWRITE */
	uint64_t *val;
	uint32_t *touched;
	size_t ntouched;
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int emit_run(struct dcr_delta_writer *w, uint32_t ti, uint8_t enc, uint64_t start,
		    uint64_t len, struct dcr_changes *ch, unsigned unit, struct dcr_buf *tmp,
		    struct dcr_err *e)
{
	tmp->len = 0;
	int dense = ch->n == len;
	struct dcr_item it = {.tensor = ti, .enc = enc, .start = start, .len = len, .n = ch->n,
			      .flags = dense ? DCR_ITEM_DENSE : 0};
	int r = dcr_item_encode(ch, unit, len, dense, &it.codec, tmp, e);
	if (r)
		return r;
	it.data = tmp->p;
	it.data_len = tmp->len;
	return dcr_delta_write_item(w, &it, e);
}

/* What the squash's steps share: the chain's inputs, the writer, the cell
 * and the buffers reused from run to run. */
struct squash {
	struct sq_in *in;
	size_t n;
	struct dcr_delta_writer w;
	struct cell cl;
	struct dcr_changes out;	/* one run's changes */
	struct dcr_buf tmp;	/* one run's encoded item */
	size_t C;		/* elements per cell */
	uint64_t maxlen, bytes_in;
	struct dcr_ckpt *base;	/* dcr_squash_base: the chain's base checkpoint */
	uint8_t *work;		/* one tensor rebuilt through the chain */
	uint8_t *touched;	/* its elements the chain touches (created tensors) */
	size_t work_cap;
	struct dcr_changes rch;	/* one item resolved */
	uint64_t *oldv;		/* one output item's old values */
};

/* Pass 1 over every input (opened here), and the chain check: each
 * delta's base is the target of the one before. */
static int sq_pass1(struct squash *sq, const char *const *paths, struct dcr_err *e)
{
	struct sq_in *in = sq->in;
	int r = 0;
	for (size_t i = 0; i < sq->n && !r; i++) {
		in[i].path = paths[i];
		in[i].fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		struct stat sb;
		if (in[i].fd < 0 || fstat(in[i].fd, &sb))
			return dcr_err_sys(e, errno, "cannot open '%s'", paths[i]);
		uint64_t len = (uint64_t)sb.st_size;
		if (!S_ISREG(sb.st_mode)) { /* a pipe: kept on disk for pass 2 */
			int t;
			if ((r = dcr_spool_fd(in[i].fd, paths[i], &t, &len, e)))
				return r;
			close(in[i].fd);
			in[i].fd = t;
		}
		sq->bytes_in += len;
		if ((r = pass1(&in[i], &sq->maxlen, e)))
			return r;
		if (i && memcmp(in[i].base.b, in[i - 1].target.b, 32)) {
			char a[65], b[65];
			dcr_digest_hex(&in[i - 1].target, a);
			dcr_digest_hex(&in[i].base, b);
			r = dcr_err_set(e, DCR_EBASE,
					"'%s' does not follow '%s': its base %.12s is not the target %.12s",
					paths[i], paths[i - 1], b, a);
		}
	}
	return r;
}

/* The cell (as long as the longest item, at most CELL_MAX) and a run's
 * worth of changes. */
static int sq_cells(struct squash *sq, struct dcr_err *e)
{
	struct cell *cl = &sq->cl;
	sq->C = sq->maxlen < CELL_MAX ? (size_t)sq->maxlen : CELL_MAX;
	cl->kind = dcr_calloc(sq->C, 1);
	cl->val = dcr_calloc(sq->C, sizeof(uint64_t));
	cl->touched = dcr_calloc(sq->C, sizeof(uint32_t));
	if (!cl->kind || !cl->val || !cl->touched || dcr_changes_reserve(&sq->out, sq->C))
		return dcr_err_sys(e, ENOMEM, "squash");
	return 0;
}

/* Pass 2's start: every input rewound, read again, at its first item. */
static int sq_rewind(struct squash *sq, const char *const *paths, struct dcr_err *e)
{
	struct sq_in *in = sq->in;
	int r = 0;
	for (size_t i = 0; i < sq->n && !r; i++) {
		if (lseek(in[i].fd, 0, SEEK_SET))
			return dcr_err_sys(e, errno, "cannot rewind '%s'", paths[i]);
		if ((r = dcr_delta_reader_init(&in[i].rd,
					       (struct dcr_source){dcr_source_fd_read, &in[i].fd},
					       paths[i], e)))
			return r;
		in[i].have_rd = 1;
		in[i].last_tensor = -1;
		r = fetch(&in[i], e);
	}
	return r;
}

/* Removals: tensors of v1 that vk lacks (removed by v1, or in v1 and not
 * new there). */
static int sq_removals(struct squash *sq, struct dcr_err *e)
{
	const struct sq_in *first = &sq->in[0], *last = &sq->in[sq->n - 1];
	int r = 0;
	for (size_t i = 0; i < first->nremoved && !r; i++)
		if (!find(last, first->removed[i], NULL))
			r = dcr_delta_write_remove(&sq->w, first->removed[i], e);
	for (size_t i = 0; i < first->nt && !r; i++)
		if (!(first->t[i].flags & DCR_TENSOR_NEW) && !find(last, first->t[i].name, NULL))
			r = dcr_delta_write_remove(&sq->w, first->t[i].name, e);
	return r;
}

/* The next position any input from j0 on changes in tensor name
 * (UINT64_MAX when none does), fetching past used-up items. */
static int sq_next_change(struct squash *sq, const char *name, size_t j0, uint64_t *pnext,
			  struct dcr_err *e)
{
	uint64_t next = UINT64_MAX;
	int r = 0;
	for (size_t i = j0; i < sq->n && !r; i++) {
		struct sq_in *x = &sq->in[i];
		while (!r && x->valid && !strcmp(x->t[x->tensor].name, name) &&
		       x->idx >= x->ch.n)
			r = fetch(x, e);
		if (!r && x->valid && !strcmp(x->t[x->tensor].name, name)) {
			uint64_t p = x->start + x->ch.pos[x->idx];
			if (p < next)
				next = p;
		}
	}
	*pnext = next;
	return r;
}

/* Compose into the cell [g, cend) every input's changes there, in chain
 * order from j0; the cells touched are listed in cl.touched. */
static int sq_gather_cell(struct squash *sq, const char *name, size_t j0, uint64_t g,
			  uint64_t cend, struct dcr_err *e)
{
	struct cell *cl = &sq->cl;
	int r = 0;
	cl->ntouched = 0;
	for (size_t i = j0; i < sq->n && !r; i++) {
		struct sq_in *x = &sq->in[i];
		while (!r && x->valid && !strcmp(x->t[x->tensor].name, name)) {
			if (x->idx >= x->ch.n) {
				r = fetch(x, e);
				continue;
			}
			uint64_t p = x->start + x->ch.pos[x->idx];
			if (p >= cend)
				break;
			size_t c = (size_t)(p - g);
			uint64_t v = x->ch.val[x->idx++];
			if (!cl->kind[c])
				cl->touched[cl->ntouched++] = (uint32_t)c;
			if (x->enc == DCR_ENC_OVERWRITE) {
				cl->kind[c] = 2;
				cl->val[c] = v;
			} else if (cl->kind[c]) {
				cl->val[c] ^= v;
			} else {
				cl->kind[c] = 1;
				cl->val[c] = v;
			}
		}
	}
	return r;
}

/* Write the cell [g, cend) of tensor ti as one item per run of one kind
 * (all overwrites when isnew), then clear the cells it touched. */
static int sq_emit_cell(struct squash *sq, uint32_t ti, int isnew, uint64_t g, uint64_t cend,
			unsigned unit, struct dcr_err *e)
{
	struct cell *cl = &sq->cl;
	struct dcr_changes *out = &sq->out;
	int r = 0;
	qsort(cl->touched, cl->ntouched, sizeof(uint32_t), cmp_u32);
	/* runs of one kind; each run's range reaches the next run */
	size_t k = 0;
	uint64_t run_start = g;
	while (k < cl->ntouched && !r) {
		uint8_t kind = 0;
		out->n = 0;
		size_t q = k;
		for (; q < cl->ntouched; q++) {
			uint32_t c = cl->touched[q];
			uint8_t kd = isnew ? 2 : cl->kind[c];
			if (kd == 1 && !cl->val[c])
				continue; /* masks that cancelled */
			if (kind && kd != kind)
				break;
			kind = kd;
			out->pos[out->n] = g + c - run_start;
			out->val[out->n++] = cl->val[c];
		}
		uint64_t run_end = q < cl->ntouched ? g + cl->touched[q] : cend;
		if (out->n)
			r = emit_run(&sq->w, ti, kind == 2 ? DCR_ENC_OVERWRITE : DCR_ENC_XOR,
				     run_start, run_end - run_start, out, unit, &sq->tmp, e);
		run_start = run_end;
		k = q;
	}
	for (size_t q = 0; q < cl->ntouched; q++)
		cl->kind[cl->touched[q]] = 0;
	return r;
}

/* What both ways of squashing do first for tensor T of the last delta:
 * find the last delta that creates it (*j0, *isnew; 0 and 0 when none
 * does: it comes from the base), check the base holds it (bt: given in
 * the --base way), write its TENSOR record, and move every input to it. */
static int sq_tensor_start(struct squash *sq, const struct dcr_delta_tensor *T,
			   const struct dcr_ckpt_tensor **bt, size_t *j0, int *isnew,
			   struct dcr_err *e)
{
	long j = -1;
	for (size_t i = 0; i < sq->n; i++) {
		const struct dcr_delta_tensor *x = find(&sq->in[i], T->name, NULL);
		if (!x) {
			j = -2;
			continue;
		}
		if (x->flags & DCR_TENSOR_NEW)
			j = (long)i;
	}
	if (j == -2) /* absent from some step yet never created after it */
		return dcr_err_set(e, DCR_EFORMAT, "tensor '%s' disappears in the chain without being recreated",
				   T->name);
	*j0 = j < 0 ? 0 : (size_t)j;
	*isnew = j >= 0;
	if (bt && !*isnew) {
		*bt = dcr_ckpt_find(sq->base, T->name);
		if (!dcr_ckpt_tensor_is(*bt, T->dtype, T->ndim, T->shape))
			return dcr_err_set(e, DCR_EBASE,
					   "base checkpoint '%s' does not hold '%s' as the chain's first delta does",
					   sq->base->path, T->name);
	}
	struct dcr_delta_tensor ot = *T;
	ot.flags = *isnew ? DCR_TENSOR_NEW : 0;
	int r = dcr_delta_write_tensor(&sq->w, &ot, e);
	for (size_t i = 0; i < sq->n && !r; i++)
		r = skip_to(&sq->in[i], T->name, i < *j0, e);
	return r;
}

/* Tensor ti of the last delta: its TENSOR record (NEW when the chain
 * creates it), then its changes composed from its last creation on, cell
 * by cell. */
static int sq_tensor(struct squash *sq, size_t ti, struct dcr_err *e)
{
	const struct dcr_delta_tensor *T = &sq->in[sq->n - 1].t[ti];
	size_t j0;
	int isnew;
	int r = sq_tensor_start(sq, T, NULL, &j0, &isnew, e);
	if (r)
		return r;
	unsigned unit = dcr_dtype_unit(T->dtype);
	uint64_t units = dcr_delta_tensor_units(T);
	for (;;) {
		uint64_t next;
		if ((r = sq_next_change(sq, T->name, j0, &next, e)) || next == UINT64_MAX)
			return r;
		if (next >= units)
			return dcr_err_set(e, DCR_EFORMAT, "item for '%s' runs past its end", T->name);
		uint64_t g = next / sq->C * sq->C, cend = g + sq->C < units ? g + sq->C : units;
		if ((r = sq_gather_cell(sq, T->name, j0, g, cend, e)) ||
		    (r = sq_emit_cell(sq, (uint32_t)ti, isnew, g, cend, unit, e)))
			return r;
	}
}

/* With the base: tensor T's items of input x, applied in order to work
 * (the tensor's bits at x's base), each resolved against what the steps
 * before left there. */
static int sq_apply_input(struct squash *sq, struct sq_in *x, const struct dcr_delta_tensor *T,
			  unsigned unit, uint64_t units, struct dcr_err *e)
{
	int r = 0;
	while (!r && x->valid && !strcmp(x->t[x->tensor].name, T->name)) {
		const struct dcr_item *it = &x->it;
		if ((r = dcr_item_check_range(it, units, x->path, T->name, e)))
			return r;
		uint8_t *at = sq->work + it->start * unit;
		if ((r = dcr_item_resolve(it, unit, at, &sq->rch, e)))
			return r;
		dcr_scatter(at, unit, sq->rch.pos, sq->rch.val, sq->rch.n, 0); /* new bits */
		if (sq->touched)
			for (size_t k = 0; k < sq->rch.n; k++)
				sq->touched[it->start + sq->rch.pos[k]] = 1;
		r = fetch(x, e);
	}
	return r;
}

/* With the base: write tensor T (index ti of the last delta) rebuilt in
 * work as items of at most CELL_MAX elements: its changes from the base
 * tensor bt (XOR), or, for a created tensor (!bt), overwrites of the
 * elements the chain touched. */
static int sq_emit_work(struct squash *sq, uint32_t ti, const struct dcr_delta_tensor *T,
			const struct dcr_ckpt_tensor *bt, unsigned unit, uint64_t units,
			struct dcr_err *e)
{
	struct dcr_changes *out = &sq->out;
	int r = 0;
	for (uint64_t g = 0; g < units && !r; g += CELL_MAX) {
		uint64_t len = units - g < CELL_MAX ? units - g : CELL_MAX;
		const uint8_t *w = sq->work + g * unit, *b = bt ? bt->data + g * unit : NULL;
		out->n = 0;
		for (uint64_t i = 0; i < len; i++) {
			uint64_t nv = load_unit(w + i * unit, unit);
			if (b) {
				uint64_t ov = load_unit(b + i * unit, unit);
				if (ov == nv)
					continue;
				sq->oldv[out->n] = ov;
			} else if (!sq->touched[g + i]) {
				continue;
			}
			out->pos[out->n] = i;
			out->val[out->n++] = nv;
		}
		if (!out->n)
			continue;
		if (!b) {
			r = emit_run(&sq->w, ti, DCR_ENC_OVERWRITE, g, len, out, unit, &sq->tmp, e);
			continue;
		}
		struct dcr_item it = {.tensor = ti, .enc = DCR_ENC_XOR, .start = g, .len = len,
				      .n = out->n};
		sq->tmp.len = 0;
		if ((r = dcr_item_encode_xor(out->n, out->pos, sq->oldv, out->val, b, unit, T->dtype,
					     len, DCR_CODEC_AUTO, &it.codec, &sq->tmp, e)))
			break;
		it.data = sq->tmp.p;
		it.data_len = sq->tmp.len;
		r = dcr_delta_write_item(&sq->w, &it, e);
	}
	return r;
}

/* With the base: tensor ti of the last delta rebuilt from the base (or
 * from zeros at its last creation) through the chain, checked against the
 * last delta's digest, and written. */
static int sq_tensor_base(struct squash *sq, size_t ti, struct dcr_err *e)
{
	const struct dcr_delta_tensor *T = &sq->in[sq->n - 1].t[ti];
	const struct dcr_ckpt_tensor *bt = NULL;
	size_t j0;
	int isnew;
	int r = sq_tensor_start(sq, T, &bt, &j0, &isnew, e);
	if (r)
		return r;
	unsigned unit = dcr_dtype_unit(T->dtype);
	uint64_t units = dcr_delta_tensor_units(T);
	size_t nbytes = (size_t)(units * unit);
	if (nbytes > sq->work_cap) {
		uint8_t *w = realloc(sq->work, nbytes);
		if (!w)
			return dcr_err_sys(e, ENOMEM, "squash: tensor '%s'", T->name);
		sq->work = w;
		sq->work_cap = nbytes;
	}
	free(sq->touched);
	sq->touched = NULL;
	if (isnew) {
		memset(sq->work, 0, nbytes);
		if (!(sq->touched = dcr_calloc(units ? units : 1, 1)))
			return dcr_err_sys(e, ENOMEM, "squash");
	} else if (nbytes) {
		memcpy(sq->work, bt->data, nbytes);
	}
	for (size_t i = j0; i < sq->n && !r; i++)
		r = sq_apply_input(sq, &sq->in[i], T, unit, units, e);
	if (r)
		return r;
	/* the rebuilt bits must be the chain's target */
	struct dcr_tensor_info info = {.dtype = T->dtype, .ndim = T->ndim, .nelem = T->nelem,
				       .begin = 0, .end = nbytes};
	memcpy(info.shape, T->shape, sizeof(info.shape));
	struct dcr_ckpt_tensor wt = {.info = &info, .data = sq->work, .fd = -1};
	dcr_digest dg;
	dcr_tensor_digest(&wt, &dg);
	if (memcmp(dg.b, T->digest.b, sizeof(dg.b)))
		return dcr_err_set(e, DCR_EBASE,
				   "'%s' rebuilt from the base through the chain does not match the last delta's digest (is '%s' the chain's base?)",
				   T->name, sq->base->path);
	return sq_emit_work(sq, (uint32_t)ti, T, bt, unit, units, e);
}

/* Every input read to its end (its trailer checked), then the last
 * delta's digests, the END record and the totals. */
static int sq_finish(struct squash *sq, struct dcr_squash_stats *st, struct dcr_err *e)
{
	const struct sq_in *last = &sq->in[sq->n - 1];
	int r = 0;
	for (size_t i = 0; i < sq->n && !r; i++)
		while (!r && sq->in[i].valid)
			r = fetch(&sq->in[i], e);
	for (size_t i = 0; i < last->nt && !r; i++)
		r = dcr_delta_write_done(&sq->w, (uint32_t)i, &last->t[i].digest, e);
	if (!r)
		r = dcr_delta_write_end(&sq->w, &last->target, e);
	if (!r && st) {
		st->base = sq->in[0].base;
		st->target = last->target;
		st->items = sq->w.nitems;
		st->changes = sq->w.nchanges;
		st->bytes_in = sq->bytes_in;
		st->bytes_out = sq->w.bytes;
	}
	return r;
}

/* The base checkpoint, whose state id must be the first delta's base. */
static int sq_open_base(struct squash *sq, const char *base_dir, struct dcr_err *e)
{
	int r = dcr_ckpt_open(base_dir, &sq->base, e);
	if (r)
		return r;
	dcr_digest id;
	if ((r = dcr_ckpt_state_id(sq->base, &id, NULL, e)))
		return r;
	if (memcmp(id.b, sq->in[0].base.b, sizeof(id.b))) {
		char a[65], b[65];
		dcr_digest_hex(&id, a);
		dcr_digest_hex(&sq->in[0].base, b);
		return dcr_err_set(e, DCR_EBASE,
				   "base checkpoint '%s' is state %.12s, the chain starts from %.12s",
				   base_dir, a, b);
	}
	if (!(sq->oldv = dcr_calloc(CELL_MAX, sizeof(uint64_t))) ||
	    dcr_changes_reserve(&sq->out, CELL_MAX))
		return dcr_err_sys(e, ENOMEM, "squash");
	return 0;
}

static int squash(const char *const *paths, size_t n, const char *base_dir,
		  const uint8_t *attempt_in, struct dcr_sink sink, const char *what,
		  struct dcr_squash_stats *st, struct dcr_err *e)
{
	struct squash sq = {.n = n, .maxlen = 1};
	int r = 0;
	sq.in = dcr_calloc(n ? n : 1, sizeof(*sq.in));
	if (!sq.in)
		return dcr_err_sys(e, ENOMEM, "squash");
	for (size_t i = 0; i < n; i++) {
		sq.in[i].fd = -1;
		sq.in[i].raw = base_dir != NULL;
	}
	if (n < 1) {
		r = dcr_err_set(e, DCR_EFORMAT, "squash needs at least one delta");
		goto out;
	}
	if ((r = sq_pass1(&sq, paths, e)) || (r = sq_cells(&sq, e)) ||
	    (base_dir && (r = sq_open_base(&sq, base_dir, e))) || (r = sq_rewind(&sq, paths, e)))
		goto out;
	uint8_t attempt[16];
	if ((r = dcr_attempt_id(attempt_in, attempt, e)) ||
	    (r = dcr_delta_writer_init(&sq.w, sink, &sq.in[0].base, attempt, what, e)) ||
	    (r = sq_removals(&sq, e)))
		goto out;
	for (size_t ti = 0; ti < sq.in[n - 1].nt; ti++)
		if ((r = base_dir ? sq_tensor_base(&sq, ti, e) : sq_tensor(&sq, ti, e)))
			goto out;
	r = sq_finish(&sq, st, e);
out:
	for (size_t i = 0; i < n; i++)
		in_free(&sq.in[i]);
	free(sq.in);
	free(sq.cl.kind);
	free(sq.cl.val);
	free(sq.cl.touched);
	dcr_changes_free(&sq.out);
	dcr_changes_free(&sq.rch);
	dcr_buf_free(&sq.tmp);
	dcr_delta_writer_release(&sq.w);
	dcr_ckpt_close(sq.base);
	free(sq.work);
	free(sq.touched);
	free(sq.oldv);
	return r;
}

int dcr_squash(const char *const *paths, size_t n, const uint8_t *attempt,
	       struct dcr_sink sink, const char *what, struct dcr_squash_stats *st,
	       struct dcr_err *e)
{
	return squash(paths, n, NULL, attempt, sink, what, st, e);
}

int dcr_squash_base(const char *const *paths, size_t n, const char *base_dir,
		    const uint8_t *attempt, struct dcr_sink sink, const char *what,
		    struct dcr_squash_stats *st, struct dcr_err *e)
{
	if (!base_dir)
		return dcr_err_set(e, -EINVAL, "squash: no base checkpoint");
	return squash(paths, n, base_dir, attempt, sink, what, st, e);
}
