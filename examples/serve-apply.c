/* serve-apply.c - a serving process's refit with libdcr: its weights live
 * in GPU memory, packs arrive, and each is applied there, in place, with
 * no reload from disk (dcr_apply_mem on device pointers).
 *
 * usage: serve-apply CKPT PACK...
 *
 * It loads CKPT's tensors into device memory as a weight loader would
 * (here with libdcr's own dcr_cuda_malloc and dcr_cuda_copy, so that it
 * needs no CUDA headers; a runtime passes the pointers it already has),
 * applies each PACK (a pack directory) in turn, each one's base the state
 * the previous one reached, then copies the weights back to the host and
 * hashes them, independently of the apply's own checks, to show they hold
 * the last pack's target. Exit 0 when they do, 1 when a pack is refused
 * (another base, bits it does not fit), 77 without a CUDA device, 128 on
 * any other error, 129 on a usage error.
 *
 * Built by dcr's make check where libdcr has CUDA; tests/t0056 runs it.
 * Build it against an installed libdcr with
 *   cc -std=c11 -o serve-apply serve-apply.c $(pkg-config --cflags --libs dcr)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dcr.h>

struct model {
	struct dcr_ckpt *ckpt; /* names, dtypes and shapes */
	void **dev;            /* each tensor's bytes in device memory */
	void *stream;
};

/* libdcr asks for a tensor by name: hand it the device pointer */
static int lookup(void *ctx, const char *name, struct dcr_mem_tensor *t, struct dcr_err *e)
{
	(void)e;
	struct model *m = ctx;
	const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(m->ckpt, name);
	if (!ct)
		return DCR_ENOTFOUND;
	t->data = m->dev[ct - m->ckpt->tensors];
	t->device = DCR_DEVICE_CUDA;
	t->dtype = ct->info->dtype;
	t->ndim = ct->info->ndim;
	memcpy(t->shape, ct->info->shape, sizeof(t->shape));
	return 0;
}

static int fail(const struct dcr_err *e, int r)
{
	fprintf(stderr, "serve-apply: error: %s\n", e->msg);
	return r == DCR_EBASE || r == DCR_EDIGEST ? 1 : 128;
}

/* The weights' state id, from their bytes copied back to the host. */
static int state_of(struct model *m, dcr_digest *id, struct dcr_err *e)
{
	size_t n = m->ckpt->ntensors;
	struct dcr_state_entry *ent = calloc(n ? n : 1, sizeof(*ent));
	int r = ent ? 0 : dcr_err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n && !r; i++) {
		const struct dcr_tensor_info *t = m->ckpt->tensors[i].info;
		size_t len = (size_t)dcr_tensor_bytes(t);
		void *h = malloc(len ? len : 1);
		if (!h) {
			r = dcr_err_set(e, -ENOMEM, "out of memory");
			break;
		}
		if (!(r = dcr_cuda_copy(h, m->dev[i], len, DCR_CUDA_D2H, m->stream, e)) &&
		    !(r = dcr_cuda_sync(m->stream, e)))
			dcr_sha256(h, len, &ent[i].digest);
		free(h);
		ent[i].name = t->name;
		ent[i].dtype = t->dtype;
		ent[i].ndim = t->ndim;
		ent[i].shape = t->shape;
	}
	if (!r)
		dcr_state_id(ent, n, id); /* the tensors are sorted by name */
	free(ent);
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fputs("usage: serve-apply CKPT PACK...\n", stderr);
		return 129;
	}
	struct dcr_err e = {0};
	struct model m = {0};
	int r;
	if ((r = dcr_cuda_probe(&e))) {
		printf("serve-apply: %s\n", e.msg);
		return 77;
	}

	/* the weight loader: every tensor into device memory */
	if ((r = dcr_ckpt_open(argv[1], &m.ckpt, &e)) || (r = dcr_cuda_stream_new(&m.stream, &e)))
		return fail(&e, r);
	m.dev = calloc(m.ckpt->ntensors + 1, sizeof(void *));
	if (!m.dev) {
		fputs("serve-apply: error: out of memory\n", stderr);
		return 128;
	}
	for (size_t i = 0; i < m.ckpt->ntensors; i++) {
		const struct dcr_ckpt_tensor *ct = &m.ckpt->tensors[i];
		size_t len = (size_t)dcr_tensor_bytes(ct->info);
		if ((r = dcr_cuda_malloc(&m.dev[i], len, &e)) ||
		    (r = dcr_cuda_copy(m.dev[i], ct->data, len, DCR_CUDA_H2D, m.stream, &e)))
			return fail(&e, r);
	}
	dcr_digest state;
	if ((r = dcr_cuda_sync(m.stream, &e)) || (r = dcr_ckpt_state_id(m.ckpt, &state, NULL, &e)))
		return fail(&e, r);

	/* refits: each pack into the device memory, in place */
	for (int k = 2; k < argc; k++) {
		struct dcr_pack_in *in;
		if ((r = dcr_pack_in_open_dir(argv[k], &in, &e)))
			return fail(&e, r);
		struct dcr_mem_apply_opts o = {.lookup = lookup, .ctx = &m, .stream = m.stream,
					       .base = &state, .what = argv[k]};
		struct dcr_mem_apply_result res;
		r = dcr_apply_mem(in, &o, &res, &e);
		dcr_pack_in_close(in);
		if (r)
			return fail(&e, r);
		state = res.target;
		char hex[2 * DCR_DIGEST_LEN + 1];
		dcr_digest_hex(&state, hex);
		printf("%s: %llu changes in %llu items, %llu tensors rewritten in device memory; state %s\n",
		       argv[k], (unsigned long long)res.changes, (unsigned long long)res.items,
		       (unsigned long long)res.tensors_written, hex);
	}

	/* the proof: the weights' own bytes hash to the last target */
	dcr_digest now;
	if ((r = state_of(&m, &now, &e)))
		return fail(&e, r);
	char hex[2 * DCR_DIGEST_LEN + 1];
	dcr_digest_hex(&now, hex);
	printf("device memory holds %s\n", hex);
	for (size_t i = 0; i < m.ckpt->ntensors; i++)
		dcr_cuda_free(m.dev[i]);
	free(m.dev);
	dcr_cuda_stream_free(m.stream);
	dcr_ckpt_close(m.ckpt);
	return memcmp(now.b, state.b, DCR_DIGEST_LEN) ? 1 : 0;
}
