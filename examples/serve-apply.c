/* serve-apply.c - a serving process's refit with libdcr: its weights live
 * in GPU memory, packs arrive, and each is applied there, in place, with
 * no reload from disk (dcr_apply_mem on device pointers).
 *
 * usage: serve-apply [--host] CKPT PACK...
 *
 * It loads CKPT's tensors into device memory as a weight loader would
 * (here with libdcr's own dcr_cuda_malloc and dcr_cuda_copy, so that it
 * needs no CUDA headers; a runtime passes the pointers it already has),
 * applies each PACK (a pack directory) in turn, each one's base the state
 * the previous one reached, then copies the weights back to the host and
 * hashes them as libdcr names tensors (dcr_digest_tensor_mem), apart from
 * the apply's own checks, to show they hold the last pack's target.
 * --host keeps the weights in host memory instead (a CPU-serving process;
 * no device needed). Exit 0 when they do, 1 when a pack is refused
 * (another base, bits it does not fit) or they do not, 77 without a CUDA
 * device, 128 on any other error, 129 on a usage error.
 *
 * Built by dcr's make check; tests/t0056 runs it on a device (skipped
 * without one), t0057 with --host everywhere.
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
	int host;              /* --host: dev holds host pointers */
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
	t->device = m->host ? DCR_DEVICE_CPU : DCR_DEVICE_CUDA;
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

/* The weights' state id, from their bytes (copied back to the host from
 * the device): each tensor's digest as libdcr defines it, then the id
 * over names, dtypes, shapes and digests. */
static int state_of(struct model *m, dcr_digest *id, struct dcr_err *e)
{
	size_t n = m->ckpt->ntensors;
	struct dcr_state_entry *ent = calloc(n ? n : 1, sizeof(*ent));
	int r = ent ? 0 : dcr_err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n && !r; i++) {
		const struct dcr_tensor_info *t = m->ckpt->tensors[i].info;
		size_t len = (size_t)dcr_tensor_bytes(t);
		void *h = m->host ? m->dev[i] : malloc(len ? len : 1);
		if (!h) {
			r = dcr_err_set(e, -ENOMEM, "out of memory");
			break;
		}
		if (m->host ||
		    (!(r = dcr_cuda_copy(h, m->dev[i], len, DCR_CUDA_D2H, m->stream, e)) &&
		     !(r = dcr_cuda_sync(m->stream, e)))) {
			/* on every core; all zero only when it ran out of memory */
			dcr_digest_tensor_mem(t->dtype, t->ndim, t->shape, h, 0, &ent[i].digest);
			if (dcr_digest_is_zero(&ent[i].digest))
				r = dcr_err_set(e, -ENOMEM, "out of memory hashing %s", t->name);
		}
		if (!m->host)
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

/* A tensor's home: device memory, or host memory with --host. */
static int load(struct model *m, size_t i, const void *src, size_t len, struct dcr_err *e)
{
	if (!m->host) {
		int r = dcr_cuda_malloc(&m->dev[i], len, e);
		return r ? r : dcr_cuda_copy(m->dev[i], src, len, DCR_CUDA_H2D, m->stream, e);
	}
	if (!(m->dev[i] = malloc(len ? len : 1)))
		return dcr_err_set(e, -ENOMEM, "out of memory");
	memcpy(m->dev[i], src, len);
	return 0;
}

int main(int argc, char **argv)
{
	struct dcr_err e = {0};
	struct model m = {0};
	int r, a = 1;
	if (argc > 1 && !strcmp(argv[1], "--host")) {
		m.host = 1;
		a = 2;
	}
	const char *where = m.host ? "host" : "device";
	if (argc - a < 2) {
		fputs("usage: serve-apply [--host] CKPT PACK...\n", stderr);
		return 129;
	}
	if (!m.host && (r = dcr_cuda_probe(&e))) {
		printf("serve-apply: %s\n", e.msg);
		return 77;
	}

	/* the weight loader: every tensor into device (or host) memory */
	if ((r = dcr_ckpt_open(argv[a], &m.ckpt, &e)) ||
	    (!m.host && (r = dcr_cuda_stream_new(&m.stream, &e))))
		return fail(&e, r);
	m.dev = calloc(m.ckpt->ntensors + 1, sizeof(void *));
	if (!m.dev) {
		fputs("serve-apply: error: out of memory\n", stderr);
		return 128;
	}
	for (size_t i = 0; i < m.ckpt->ntensors; i++) {
		const struct dcr_ckpt_tensor *ct = &m.ckpt->tensors[i];
		size_t len = (size_t)dcr_tensor_bytes(ct->info);
		if ((r = load(&m, i, ct->data, len, &e)))
			return fail(&e, r);
	}
	dcr_digest state;
	if ((!m.host && (r = dcr_cuda_sync(m.stream, &e))) ||
	    (r = dcr_ckpt_state_id(m.ckpt, &state, NULL, &e)))
		return fail(&e, r);

	/* refits: each pack into that memory, in place */
	for (int k = a + 1; k < argc; k++) {
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
		printf("%s: %llu changes in %llu items, %llu tensors rewritten in %s memory; state %s\n",
		       argv[k], (unsigned long long)res.changes, (unsigned long long)res.items,
		       (unsigned long long)res.tensors_written, where, hex);
	}

	/* the proof: the weights' own bytes hash to the last target */
	dcr_digest now;
	if ((r = state_of(&m, &now, &e)))
		return fail(&e, r);
	char hex[2 * DCR_DIGEST_LEN + 1];
	dcr_digest_hex(&now, hex);
	printf("%s memory holds %s\n", where, hex);
	for (size_t i = 0; i < m.ckpt->ntensors; i++)
		if (m.host)
			free(m.dev[i]);
		else
			dcr_cuda_free(m.dev[i]);
	free(m.dev);
	if (!m.host)
		dcr_cuda_stream_free(m.stream);
	dcr_ckpt_close(m.ckpt);
	return memcmp(now.b, state.b, DCR_DIGEST_LEN) ? 1 : 0;
}
