/* fuzz-parsers - libFuzzer harness over every parser of hostile input:
 * safetensors headers, delta streams (records, items, codecs), payloads,
 * manifests and layout maps. The first input byte picks the parser.
 * Build and run with scripts/fuzz (clang, libFuzzer, ASan, UBSan). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dcr.h"
#include "core/bytes.h"

struct mem {
	const uint8_t *p;
	size_t n, off;
};

static int mem_read(void *ctx, void *dst, size_t n)
{
	struct mem *m = ctx;
	if (m->n - m->off < n)
		return -EPIPE;
	memcpy(dst, m->p + m->off, n);
	m->off += n;
	return 0;
}

static void items(const struct dcr_delta_rec *rec)
{
	struct dcr_err e;
	struct dcr_item it;
	if (dcr_delta_parse_item(rec, &it, &e))
		return;
	struct dcr_changes ch = {0};
	for (unsigned unit = 1; unit <= 8; unit *= 2) {
		if (it.len > (1u << 16))
			break;
		uint8_t *old = calloc(it.len * unit + 8, 1);
		if (!old)
			break;
		dcr_item_decode(&it, unit, &ch, &e);
		dcr_item_resolve(&it, unit, old, &ch, &e);
		free(old);
	}
	dcr_changes_free(&ch);
}

static void delta(const uint8_t *p, size_t n)
{
	struct mem m = {p, n, 0};
	struct dcr_delta_reader r;
	struct dcr_err e;
	if (!dcr_delta_reader_init_flags(&r, (struct dcr_source){mem_read, &m}, NULL, 0,
					 DCR_DELTA_PARTIAL | DCR_DELTA_DENSE, "fuzz", &e)) {
		struct dcr_delta_rec rec;
		int k = 0;
		while (k++ < 10000 && dcr_delta_next(&r, &rec, &e) == 1) {
			struct dcr_delta_tensor t;
			char *name;
			uint32_t ti;
			dcr_digest d;
			switch (rec.type) {
			case DCR_REC_TENSOR:
				if (!dcr_delta_parse_tensor(&rec, &t, &e))
					dcr_delta_tensor_clear(&t);
				break;
			case DCR_REC_ITEM: items(&rec); break;
			case DCR_REC_REMOVE:
				if (!dcr_delta_parse_name(&rec, &name, &e))
					free(name);
				break;
			case DCR_REC_DONE: dcr_delta_parse_done(&rec, &ti, &d, &e); break;
			}
		}
	}
	dcr_delta_reader_release(&r);
}

static void codec(const uint8_t *p, size_t n)
{
	if (n < 4)
		return;
	int c = 1 + (p[0] & 1);
	unsigned unit = 1u << (p[1] & 3);
	size_t cnt = p[2] % 64;
	uint64_t range = 1 + p[3] * 37u;
	uint64_t pos[64], oldv[64], newv[64];
	struct dcr_err e;
	memset(oldv, 0x5a, sizeof(oldv));
	if (!dcr_codec_decode_positions(c, p + 4, n - 4, unit, range, cnt, pos, &e))
		dcr_codec_decode_values(c, p + 4, n - 4, unit, DCR_DT_BF16, range, cnt, pos, oldv,
					newv, &e);
	dcr_codec_decode_values(c, p + 4, n - 4, unit, DCR_DT_F32, range, cnt, NULL, NULL, newv,
				&e);
	/* every codec whole, with old bits of the range (CLASSED needs them) */
	static uint8_t old[(1 + 255 * 37) * 8];
	static int old_set;
	for (size_t i = 0; !old_set && i < sizeof(old); i++)
		old[i] = (uint8_t)(i * 131 + (i >> 7));
	old_set = 1;
	dcr_codec_decode_range(1 + p[0] % 3, p + 4, n - 4, unit, range, cnt, old, pos, newv, &e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	struct dcr_err e;
	switch (data[0] % 6) {
	case 0: {
		struct dcr_st *st;
		if (!dcr_st_parse(p, n, &st, &e))
			dcr_st_close(st);
		break;
	}
	case 1: delta(p, n); break;
	case 2: {
		struct dcr_payload pl;
		if (!dcr_payload_open(p, n, "fuzz", &pl, &e)) {
			struct dcr_rd rd;
			dcr_rd_init(&rd, pl.raw, pl.raw_len);
			while (dcr_rd_left(&rd) && !rd.bad) {
				struct dcr_delta_rec rec = {.type = dcr_rd_le32(&rd)};
				rec.flags = dcr_rd_le32(&rd);
				rec.len = dcr_rd_le64(&rd);
				rec.body = rec.len <= dcr_rd_left(&rd) ? dcr_rd_bytes(&rd, rec.len) : NULL;
				if (!rec.body)
					break;
				if (rec.type == DCR_REC_ITEM)
					items(&rec);
			}
			dcr_payload_release(&pl);
		}
		break;
	}
	case 3: {
		struct dcr_manifest m;
		if (!dcr_manifest_parse(p, n, "fuzz", &m, &e))
			dcr_manifest_release(&m);
		break;
	}
	case 4: {
		struct dcr_layout *L;
		if (!dcr_layout_parse((const char *)p, n, &L, &e))
			dcr_layout_free(L);
		break;
	}
	case 5: codec(p, n); break;
	}
	return 0;
}
