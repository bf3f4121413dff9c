/* cuda.c - the dcr_cuda_* module: libdcr's only way to kernels/ (see
 * cuda.h). It checks arguments, runs the kernels and turns CUDA's errors
 * into negative codes and messages; built without CUDA, every call says
 * so (-ENOTSUP). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/cuda.h"
#include "core/item.h"

int dcr_device_parse(const char *s)
{
	if (!strcmp(s, "cpu"))
		return DCR_DEVICE_CPU;
	if (!strcmp(s, "cuda"))
		return DCR_DEVICE_CUDA;
	return -1;
}

void dcr_gap_positions(const uint32_t *gaps, size_t m, uint64_t first, uint64_t *pos)
{
	uint64_t next = first;
	for (size_t k = 0; k < m; k++) {
		pos[k] = next + gaps[k];
		next = pos[k] + 1;
	}
}

#ifdef HAVE_CUDA
#include "dcr_cuda.h"

static int bad_unit(unsigned unit)
{
	return unit != 1 && unit != 2 && unit != 4 && unit != 8;
}

int dcr_cuda_built(void)
{
	return 1;
}

/* A CUDA error as a code and a message naming what failed. */
static int cu(struct dcr_err *e, int err, const char *what)
{
	if (!err)
		return 0;
	int code = dk_err_no_device(err)      ? -ENODEV
		   : dk_err_out_of_memory(err) ? -ENOMEM
		   : dk_err_invalid_value(err) ? -EINVAL
					       : -EIO;
	return dcr_err_set(e, code, "CUDA: %s: %s (%s)", what, dk_error_string(err),
			   dk_error_name(err));
}

int dcr_cuda_probe(struct dcr_err *e)
{
	int n = 0, err = dk_device_count(&n);
	if (err)
		return dcr_err_set(e, -ENODEV, "no CUDA device: %s (%s)", dk_error_string(err),
				   dk_error_name(err));
	if (n < 1)
		return dcr_err_set(e, -ENODEV, "no CUDA device");
	return 0;
}

int dcr_cuda_device_name(char *out, size_t n, struct dcr_err *e)
{
	if (n)
		out[0] = '\0';
	return cu(e, dk_device_name(out, n), "device properties");
}

int dcr_cuda_malloc(void **d_p, size_t n, struct dcr_err *e)
{
	*d_p = NULL;
	return cu(e, dk_malloc(d_p, n), "cannot allocate device memory");
}

void dcr_cuda_free(void *d_p)
{
	if (d_p)
		dk_free(d_p);
}

int dcr_cuda_host_alloc(void **h_p, size_t n, struct dcr_err *e)
{
	*h_p = NULL;
	return cu(e, dk_host_alloc(h_p, n), "cannot allocate page-locked host memory");
}

void dcr_cuda_host_free(void *h_p)
{
	if (h_p)
		dk_host_free(h_p);
}

int dcr_cuda_stream_new(void **stream, struct dcr_err *e)
{
	*stream = NULL;
	return cu(e, dk_stream_new(stream), "cannot create a stream");
}

void dcr_cuda_stream_free(void *stream)
{
	if (stream)
		dk_stream_free(stream);
}

int dcr_cuda_copy(void *dst, const void *src, size_t n, int dir, void *stream,
		  struct dcr_err *e)
{
	if (dir != DCR_CUDA_H2D && dir != DCR_CUDA_D2H && dir != DCR_CUDA_D2D)
		return dcr_err_set(e, -EINVAL, "CUDA: copy: bad direction %d", dir);
	return cu(e, dk_copy(dst, src, n, dir, stream), "copy");
}

int dcr_cuda_fill(void *d_p, int byte, size_t n, void *stream, struct dcr_err *e)
{
	return cu(e, dk_fill(d_p, byte, n, stream), "fill");
}

int dcr_cuda_sync(void *stream, struct dcr_err *e)
{
	return cu(e, dk_sync(stream), "stream");
}

int dcr_cuda_is_device(const void *p, struct dcr_err *e)
{
	int is = 0, r = cu(e, dk_is_device(p, &is), "pointer attributes");
	return r ? r : is;
}

static int check_buf(const void *p, unsigned unit, const char *what, struct dcr_err *e)
{
	if ((uintptr_t)p % unit)
		return dcr_err_set(e, -EINVAL, "CUDA: %s is not aligned to its %u-byte units", what,
				   unit);
	return 0;
}

int dcr_cuda_diff_scratch(uint64_t n, unsigned unit, size_t *bytes, struct dcr_err *e)
{
	*bytes = 0;
	if (bad_unit(unit))
		return dcr_err_set(e, -EINVAL, "CUDA: diff: bad unit %u", unit);
	if (!n)
		return 0;
	/* the largest of the methods' (tests and benchmarks run each; the
	 * tiles' covers the positions', their fallback) */
	static const int methods[] = {DK_DIFF_TILES, DK_DIFF_TRIPLES};
	for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++) {
		size_t b = 0;
		int r = cu(e, dk_diff(NULL, NULL, n, unit, 0, NULL, NULL, 0, NULL, NULL, &b,
				      methods[k], NULL),
			   "diff");
		if (r)
			return r;
		if (b > *bytes)
			*bytes = b;
	}
	return 0;
}

int dcr_cuda_diff(const void *d_base, const void *d_cur, uint64_t n, unsigned unit, int enc,
		  uint64_t *d_pos, void *d_val, uint64_t cap, uint64_t *d_count,
		  void *d_scratch, size_t scratch_bytes, void *stream, struct dcr_err *e)
{
	size_t need;
	int r;
	if (enc != DCR_ENC_XOR && enc != DCR_ENC_OVERWRITE)
		return dcr_err_set(e, -EINVAL, "CUDA: diff: bad encoding %d", enc);
	if ((r = dcr_cuda_diff_scratch(n, unit, &need, e)))
		return r;
	if (!n)
		return cu(e, dk_fill(d_count, 0, sizeof(*d_count), stream), "diff");
	if (scratch_bytes < need)
		return dcr_err_set(e, -EINVAL, "CUDA: diff: %zu bytes of scratch, %zu needed",
				   scratch_bytes, need);
	if ((r = check_buf(d_base, unit, "diff's base", e)) ||
	    (r = check_buf(d_cur, unit, "diff's input", e)) ||
	    (r = check_buf(d_val, unit, "diff's values", e)) ||
	    (r = check_buf(d_pos, 8, "diff's positions", e)) ||
	    (r = check_buf(d_count, 8, "diff's count", e)))
		return r;
	return cu(e, dk_diff(d_base, d_cur, n, unit, enc == DCR_ENC_OVERWRITE, d_pos, d_val, cap,
			     (unsigned long long *)d_count, d_scratch, &scratch_bytes,
			     DK_DIFF_POSITIONS, stream),
		  "diff");
}

int dcr_cuda_scatter(void *d_dst, uint64_t n, unsigned unit, const uint64_t *d_pos,
		     const void *d_val, uint64_t m, int enc, void *stream, struct dcr_err *e)
{
	int r;
	if (bad_unit(unit))
		return dcr_err_set(e, -EINVAL, "CUDA: scatter: bad unit %u", unit);
	if (enc != DCR_ENC_XOR && enc != DCR_ENC_OVERWRITE)
		return dcr_err_set(e, -EINVAL, "CUDA: scatter: bad encoding %d", enc);
	if (!m)
		return 0;
	if ((r = check_buf(d_dst, unit, "scatter's target", e)) ||
	    (r = check_buf(d_val, unit, "scatter's values", e)) ||
	    (r = check_buf(d_pos, 8, "scatter's positions", e)))
		return r;
	return cu(e, dk_scatter(d_dst, n, unit, d_pos, d_val, m, enc == DCR_ENC_XOR, stream),
		  "scatter");
}

int dcr_cuda_positions_scratch(uint64_t m, size_t *bytes, struct dcr_err *e)
{
	*bytes = 0;
	if (!m)
		return 0;
	return cu(e, dk_positions(NULL, m, 0, NULL, NULL, bytes, NULL), "positions");
}

int dcr_cuda_positions(const uint32_t *d_gaps, uint64_t m, uint64_t first, uint64_t *d_pos,
		       void *d_scratch, size_t scratch_bytes, void *stream, struct dcr_err *e)
{
	size_t need;
	int r;
	if ((r = dcr_cuda_positions_scratch(m, &need, e)) || !m)
		return r;
	if (scratch_bytes < need)
		return dcr_err_set(e, -EINVAL, "CUDA: positions: %zu bytes of scratch, %zu needed",
				   scratch_bytes, need);
	if ((r = check_buf(d_gaps, 4, "the gaps", e)) || (r = check_buf(d_pos, 8, "the positions", e)))
		return r;
	return cu(e, dk_positions(d_gaps, m, first, d_pos, d_scratch, &scratch_bytes, stream),
		  "positions");
}

/* ---- host buffers through the device ---- */

struct dbuf {
	void *p;
	size_t cap;
};

struct dcr_cuda_ctx {
	void *stream;
	struct dbuf a, b, pos, val, scratch, count;
	uint8_t *narrow; /* values at unit width, host side */
	size_t narrow_cap;
};

static int grow(struct dbuf *b, size_t n, struct dcr_err *e)
{
	if (n <= b->cap && b->p)
		return 0;
	dcr_cuda_free(b->p);
	b->p = NULL;
	b->cap = 0;
	size_t want = n < 4096 ? 4096 : n + n / 4;
	int r = dcr_cuda_malloc(&b->p, want, e);
	if (!r)
		b->cap = want;
	return r;
}

static int grow_narrow(struct dcr_cuda_ctx *c, size_t n, struct dcr_err *e)
{
	if (n <= c->narrow_cap && c->narrow)
		return 0;
	size_t want = n < 4096 ? 4096 : n + n / 4;
	uint8_t *p = realloc(c->narrow, want);
	if (!p)
		return dcr_err_sys(e, ENOMEM, "CUDA: host buffer");
	c->narrow = p;
	c->narrow_cap = want;
	return 0;
}

int dcr_cuda_ctx_new(struct dcr_cuda_ctx **out, struct dcr_err *e)
{
	*out = NULL;
	int r = dcr_cuda_probe(e);
	if (r)
		return r;
	struct dcr_cuda_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return dcr_err_sys(e, ENOMEM, "CUDA context");
	if ((r = dcr_cuda_stream_new(&c->stream, e))) {
		free(c);
		return r;
	}
	*out = c;
	return 0;
}

void dcr_cuda_ctx_free(struct dcr_cuda_ctx *c)
{
	if (!c)
		return;
	dcr_cuda_sync(c->stream, NULL);
	struct dbuf *v[] = {&c->a, &c->b, &c->pos, &c->val, &c->scratch, &c->count};
	for (size_t i = 0; i < sizeof(v) / sizeof(*v); i++)
		dcr_cuda_free(v[i]->p);
	dcr_cuda_stream_free(c->stream);
	free(c->narrow);
	free(c);
}

int dcr_cuda_scan_changes(struct dcr_cuda_ctx *c, const uint8_t *a, const uint8_t *b,
			  size_t nbytes, unsigned unit, uint64_t *pos, uint64_t *val, size_t *n,
			  struct dcr_err *e)
{
	*n = 0;
	if (bad_unit(unit) || nbytes % unit)
		return dcr_err_set(e, -EINVAL, "CUDA: %zu bytes are no whole units of %u", nbytes,
				   unit);
	uint64_t units = nbytes / unit, count = 0;
	size_t sb;
	int r;
	if (!units)
		return 0;
	if ((r = dcr_cuda_diff_scratch(units, unit, &sb, e)) || (r = grow(&c->a, nbytes, e)) ||
	    (r = grow(&c->b, nbytes, e)) || (r = grow(&c->pos, units * 8, e)) ||
	    (r = grow(&c->val, nbytes, e)) || (r = grow(&c->scratch, sb, e)) ||
	    (r = grow(&c->count, 8, e)) || (r = grow_narrow(c, nbytes, e)))
		return r;
	if ((r = dcr_cuda_copy(c->a.p, a, nbytes, DCR_CUDA_H2D, c->stream, e)) ||
	    (r = dcr_cuda_copy(c->b.p, b, nbytes, DCR_CUDA_H2D, c->stream, e)) ||
	    (r = dcr_cuda_diff(c->a.p, c->b.p, units, unit, DCR_ENC_XOR, c->pos.p, c->val.p, units,
			       c->count.p, c->scratch.p, c->scratch.cap, c->stream, e)) ||
	    (r = dcr_cuda_copy(&count, c->count.p, 8, DCR_CUDA_D2H, c->stream, e)) ||
	    (r = dcr_cuda_sync(c->stream, e)))
		return r;
	if (count > units)
		return dcr_err_set(e, -EIO, "CUDA: diff counted %llu changes in %llu units",
				   (unsigned long long)count, (unsigned long long)units);
	if ((r = dcr_cuda_copy(pos, c->pos.p, count * 8, DCR_CUDA_D2H, c->stream, e)) ||
	    (r = dcr_cuda_copy(c->narrow, c->val.p, count * unit, DCR_CUDA_D2H, c->stream, e)) ||
	    (r = dcr_cuda_sync(c->stream, e)))
		return r;
	for (uint64_t k = 0; k < count; k++)
		val[k] = load_unit(c->narrow + k * unit, unit);
	*n = (size_t)count;
	return 0;
}

int dcr_cuda_scatter_host(struct dcr_cuda_ctx *c, uint8_t *dst, size_t nbytes, unsigned unit,
			  const uint64_t *pos, const uint64_t *val, size_t n, int xor_,
			  struct dcr_err *e)
{
	if (bad_unit(unit) || nbytes % unit)
		return dcr_err_set(e, -EINVAL, "CUDA: %zu bytes are no whole units of %u", nbytes,
				   unit);
	int r;
	if (!n)
		return 0;
	if ((r = grow(&c->a, nbytes, e)) || (r = grow(&c->pos, n * 8, e)) ||
	    (r = grow(&c->val, n * unit, e)) || (r = grow_narrow(c, n * unit, e)))
		return r;
	for (size_t k = 0; k < n; k++)
		store_unit(c->narrow + k * unit, unit, val[k]);
	if ((r = dcr_cuda_copy(c->a.p, dst, nbytes, DCR_CUDA_H2D, c->stream, e)) ||
	    (r = dcr_cuda_copy(c->pos.p, pos, n * 8, DCR_CUDA_H2D, c->stream, e)) ||
	    (r = dcr_cuda_copy(c->val.p, c->narrow, n * unit, DCR_CUDA_H2D, c->stream, e)) ||
	    (r = dcr_cuda_scatter(c->a.p, nbytes / unit, unit, c->pos.p, c->val.p, n,
				  xor_ ? DCR_ENC_XOR : DCR_ENC_OVERWRITE, c->stream, e)) ||
	    (r = dcr_cuda_copy(dst, c->a.p, nbytes, DCR_CUDA_D2H, c->stream, e)))
		return r;
	return dcr_cuda_sync(c->stream, e);
}

#else /* !HAVE_CUDA: every call says so */

static int none(struct dcr_err *e)
{
	return dcr_err_set(e, -ENOTSUP,
			   "libdcr was built without CUDA (configure found no working nvcc; see --with-cuda)");
}

int dcr_cuda_built(void) { return 0; }
int dcr_cuda_probe(struct dcr_err *e) { return none(e); }
int dcr_cuda_device_name(char *out, size_t n, struct dcr_err *e)
{
	if (n)
		out[0] = '\0';
	return none(e);
}
int dcr_cuda_malloc(void **d_p, size_t n, struct dcr_err *e)
{
	(void)n;
	*d_p = NULL;
	return none(e);
}
void dcr_cuda_free(void *d_p) { (void)d_p; }
int dcr_cuda_host_alloc(void **h_p, size_t n, struct dcr_err *e)
{
	(void)n;
	*h_p = NULL;
	return none(e);
}
void dcr_cuda_host_free(void *h_p) { (void)h_p; }
int dcr_cuda_stream_new(void **stream, struct dcr_err *e)
{
	*stream = NULL;
	return none(e);
}
void dcr_cuda_stream_free(void *stream) { (void)stream; }
int dcr_cuda_copy(void *dst, const void *src, size_t n, int dir, void *stream,
		  struct dcr_err *e)
{
	(void)dst, (void)src, (void)n, (void)dir, (void)stream;
	return none(e);
}
int dcr_cuda_fill(void *d_p, int byte, size_t n, void *stream, struct dcr_err *e)
{
	(void)d_p, (void)byte, (void)n, (void)stream;
	return none(e);
}
int dcr_cuda_sync(void *stream, struct dcr_err *e)
{
	(void)stream;
	return none(e);
}
int dcr_cuda_is_device(const void *p, struct dcr_err *e)
{
	(void)p, (void)e;
	return 0; /* nothing is device memory to a libdcr without CUDA */
}
int dcr_cuda_diff_scratch(uint64_t n, unsigned unit, size_t *bytes, struct dcr_err *e)
{
	(void)n, (void)unit;
	*bytes = 0;
	return none(e);
}
int dcr_cuda_diff(const void *d_base, const void *d_cur, uint64_t n, unsigned unit, int enc,
		  uint64_t *d_pos, void *d_val, uint64_t cap, uint64_t *d_count,
		  void *d_scratch, size_t scratch_bytes, void *stream, struct dcr_err *e)
{
	(void)d_base, (void)d_cur, (void)n, (void)unit, (void)enc, (void)d_pos, (void)d_val;
	(void)cap, (void)d_count, (void)d_scratch, (void)scratch_bytes, (void)stream;
	return none(e);
}
int dcr_cuda_scatter(void *d_dst, uint64_t n, unsigned unit, const uint64_t *d_pos,
		     const void *d_val, uint64_t m, int enc, void *stream, struct dcr_err *e)
{
	(void)d_dst, (void)n, (void)unit, (void)d_pos, (void)d_val, (void)m, (void)enc;
	(void)stream;
	return none(e);
}
int dcr_cuda_positions_scratch(uint64_t m, size_t *bytes, struct dcr_err *e)
{
	(void)m;
	*bytes = 0;
	return none(e);
}
int dcr_cuda_positions(const uint32_t *d_gaps, uint64_t m, uint64_t first, uint64_t *d_pos,
		       void *d_scratch, size_t scratch_bytes, void *stream, struct dcr_err *e)
{
	(void)d_gaps, (void)m, (void)first, (void)d_pos, (void)d_scratch, (void)scratch_bytes;
	(void)stream;
	return none(e);
}
int dcr_cuda_ctx_new(struct dcr_cuda_ctx **c, struct dcr_err *e)
{
	*c = NULL;
	return none(e);
}
void dcr_cuda_ctx_free(struct dcr_cuda_ctx *c) { (void)c; }
int dcr_cuda_scan_changes(struct dcr_cuda_ctx *c, const uint8_t *a, const uint8_t *b,
			  size_t nbytes, unsigned unit, uint64_t *pos, uint64_t *val, size_t *n,
			  struct dcr_err *e)
{
	(void)c, (void)a, (void)b, (void)nbytes, (void)unit, (void)pos, (void)val;
	*n = 0;
	return none(e);
}
int dcr_cuda_scatter_host(struct dcr_cuda_ctx *c, uint8_t *dst, size_t nbytes, unsigned unit,
			  const uint64_t *pos, const uint64_t *val, size_t n, int xor_,
			  struct dcr_err *e)
{
	(void)c, (void)dst, (void)nbytes, (void)unit, (void)pos, (void)val, (void)n, (void)xor_;
	return none(e);
}
#endif
