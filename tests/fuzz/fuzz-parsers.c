/* fuzz-parsers - libFuzzer harness over every parser of hostile input:
 * safetensors headers, delta streams (records, items, codecs), payloads
 * (their records, a window at a time), manifests, layout maps, signify
 * keys and signatures (and the trust check over a manifest), pack tar
 * streams (dcr_pack_in_open_tar over a memory file, every entry walked),
 * HTTP answers (net.c's header and body callbacks as libcurl calls them:
 * status line, Content-Length and Content-Range, bodies shorter or longer
 * than announced, resumed and ranged requests, the cause of an error) and
 * S3 XML (a ListObjectsV2 page, an error body), and what AWS credential
 * sources answer (the shared config files' INI, a credential_process's or
 * an endpoint's JSON, STS's XML, ISO 8601 expiries), the in-memory
 * apply of a pack to a fixed set of tensors, the placement of a delta
 * into the ranks of a fixed serving layout, and producers' summaries (each
 * built back, two joined into a manifest). The first input byte
 * picks the parser. Build and run with scripts/fuzz (clang, libFuzzer,
 * ASan, UBSan); scripts/fuzz TARGET runs one. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"
#include "transport/awsconf.h"
#include "transport/awscred.h"
#include "transport/net.h"
#include "transport/store-s3.h"

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

/* The changes a payload decoded to, coded again as DELTA and CLASSED on
 * the portable loops and on the vector ones: the same answer and the same
 * bytes, or a crash for the fuzzer. */
static void encode_paths(unsigned pick, unsigned unit, uint64_t range, size_t cnt,
			 const uint64_t *pos, const uint64_t *newv, const uint8_t *old)
{
	static const int dt2[] = {DCR_DT_BF16, DCR_DT_F16, DCR_DT_I16, DCR_DT_U16};
	int dt = unit == 1 ? DCR_DT_F8_E4M3 : unit == 2 ? dt2[pick % 4] : unit == 4 ? DCR_DT_F32
										    : DCR_DT_F64;
	uint64_t oldv[64];
	for (size_t i = 0; i < cnt; i++)
		oldv[i] = load_unit(old + pos[i] * unit, unit);
	for (int c = DCR_CODEC_DELTA; c <= DCR_CODEC_CLASSED; c++) {
		struct dcr_buf a = {0}, b = {0};
		struct dcr_err e;
		cdc_cpu_limit(0);
		int ra = dcr_codec_encode_range(c, unit, dt, range, cnt, pos, oldv, newv, old, &a, &e);
		cdc_cpu_limit(3);
		int rb = dcr_codec_encode_range(c, unit, dt, range, cnt, pos, oldv, newv, old, &b, &e);
		if (ra != rb || (!ra && (a.len != b.len || memcmp(a.p, b.p, a.len))))
			__builtin_trap();
		dcr_buf_free(&a);
		dcr_buf_free(&b);
	}
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
	if (!dcr_codec_decode_range(1 + p[0] % 3, p + 4, n - 4, unit, range, cnt, old, pos, newv,
				    &e))
		encode_paths(p[0] >> 2, unit, range, cnt, pos, newv, old);
}

/* keys and signatures: parsed, and a signature checked against a fixed
 * key (the input's first byte splits key text from signature text) */
static void sign(const uint8_t *p, size_t n)
{
	static const char pub[] = "untrusted comment: fuzz\n"
				  "RWQAAQIDBAUGB2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKD\n";
	struct dcr_err e;
	struct dcr_pubkey k, fixed;
	struct dcr_seckey sk;
	size_t cut = n ? p[0] % (n + 1) : 0;
	dcr_pubkey_parse(p, cut, "fuzz", &k, &e);
	dcr_seckey_parse(p, cut, "fuzz", &sk, &e);
	if (dcr_pubkey_parse((const uint8_t *)pub, sizeof(pub) - 1, "key", &fixed, &e))
		return;
	dcr_verify_sig(&fixed, 1, "msg", 3, p + cut, n - cut, "fuzz", NULL, &e);
	/* the trust check over a manifest that parses */
	struct dcr_manifest m;
	if (!dcr_manifest_parse(p + cut, n - cut, "fuzz", &m, &e)) {
		struct dcr_trust t = {.keys = &fixed, .nkeys = 1, .min_version = 3};
		dcr_trust_check(&t, p + cut, n - cut, &m, p, cut, "fuzz", &e);
		dcr_manifest_release(&m);
	}
}

static int walk_entry(void *ctx, const struct dcr_pack_entry *en)
{
	(void)ctx, (void)en;
	return 0;
}

/* a pack tar stream from a memory file, every entry read and checked */
static void tar(const uint8_t *p, size_t n)
{
	int fd = memfd_create("fuzz-tar", MFD_CLOEXEC);
	if (fd < 0)
		return;
	struct dcr_err e;
	struct dcr_pack_in *in;
	if (dcr_write_full(fd, p, n) == 0 && lseek(fd, 0, SEEK_SET) == 0 &&
	    !dcr_pack_in_open_tar(fd, NULL, 0, &in, &e)) {
		dcr_pack_walk(in, walk_entry, NULL, &e);
		dcr_pack_in_close(in);
	}
	close(fd);
}

static int http_sink(void *arg, uint64_t off, const uint8_t *p, size_t n, uint64_t total)
{
	struct dcr_buf *b = arg;
	(void)off, (void)total;
	if (b->len + n > (1u << 20))
		return -EFBIG;
	return dcr_buf_add(b, p, n) ? -ENOMEM : 0;
}

/* An HTTP answer fed to net.c as libcurl would: a request described by
 * the first 4 bytes (ranged or not, a resume, a sink or a kept body), the
 * header lines up to the blank one, then the body in pieces whose sizes
 * the input picks; then what net_perform and get_stream decide from it. */
static void http(const uint8_t *p, size_t n)
{
	if (n < 4)
		return;
	struct net_req q;
	struct dcr_buf body = {0};
	memset(&q, 0, sizeof(q));
	q.body_fd = -1;
	q.what = "fuzz";
	q.ranged = p[0] & 1;
	q.r_start = p[1] * 1000u;
	q.r_len = 1 + p[2] * 100u;
	q.got = p[0] & 2 ? p[3] : 0; /* a resumed request: that much arrived */
	if (q.ranged && q.got > q.r_len)
		q.got = q.r_len;
	q.keep_body = (p[0] & 4) != 0;
	if (!(p[0] & 4)) {
		q.sink = http_sink;
		q.sink_arg = &body;
	}
	size_t chunk = 1 + (p[0] >> 3);
	p += 4;
	n -= 4;
	int in_body = 0;
	while (n && !q.sink_rc) {
		if (!in_body) {
			const uint8_t *nl = memchr(p, '\n', n);
			size_t l = nl ? (size_t)(nl - p) + 1 : n;
			char line[4096];
			size_t k = l < sizeof(line) ? l : sizeof(line);
			memcpy(line, p, k);
			if (net_on_header(line, 1, k, &q) != k)
				break;
			in_body = k <= 2 && (line[0] == '\r' || line[0] == '\n');
			p += l;
			n -= l;
			continue;
		}
		size_t k = n < chunk ? n : chunk;
		char buf[256];
		memcpy(buf, p, k);
		if (net_on_data(buf, 1, k, &q) != k)
			break;
		p += k;
		n -= k;
	}
	char cause[700];
	char *code = NULL;
	if (q.status < 200 || q.status >= 300) {
		net_http_cause(&q, cause, sizeof(cause), &code);
		free(code);
	}
	/* get_stream's last checks: nothing more than announced arrived */
	if (!q.sink_rc && !q.ranged && q.have_total && q.got > q.total)
		__builtin_trap();
	if (!q.sink_rc && q.ranged && q.got > q.r_len)
		__builtin_trap();
	dcr_buf_free(&body);
	dcr_buf_free(&q.resp);
}

/* S3 XML: a ListObjectsV2 page under a prefix, an error body, and the
 * root element a multipart completion is judged by */
static void s3xml(const uint8_t *p, size_t n)
{
	struct dcr_names l = {0};
	struct dcr_err e;
	int more;
	char *token = NULL;
	size_t strip = n && p[0] & 1 ? 4 : 0; /* a store prefix "pre/", or none */
	s3_list_page((const char *)p, n, strip ? "pre/v1/" : "v1/", strip, "fuzz", &l, &more,
		     &token, &e);
	free(token);
	dcr_store_names_free(l.v, l.n);
	struct net_req q;
	memset(&q, 0, sizeof(q));
	q.status = 403;
	q.resp.p = (uint8_t *)p;
	q.resp.len = n;
	char cause[700];
	char *code = NULL;
	net_http_cause(&q, cause, sizeof(cause), &code);
	free(code);
	(void)net_xml_root_is((const char *)p, n, "CompleteMultipartUpload");
}

/* The credential sources' answers: the first byte picks the source; the
 * same bytes as a config file (two sections, a few keys) and, NUL-ended,
 * as an expiry. */
static void aws(const uint8_t *p, size_t n)
{
	static const enum dcr_aws_source src[] = {DCR_AWS_PROCESS, DCR_AWS_CONTAINER,
						  DCR_AWS_IMDS};
	struct dcr_aws_creds c;
	struct dcr_err e;
	if (n && !dcr_aws_creds_parse((const char *)p + 1, n - 1, src[p[0] % 3], "fuzz", &c, &e))
		dcr_aws_creds_free(&c);
	if (!dcr_aws_sts_parse((const char *)p, n, "fuzz", &c, &e))
		dcr_aws_creds_free(&c);
	static const char *const sec[] = {"default", "profile x"};
	static const char *const key[] = {"aws_access_key_id", "credential_process", "region"};
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 3; k++) {
			int found;
			free(dcr_aws_ini_get((const char *)p, n, sec[i], key[k], &found));
		}
	char *z = malloc(n + 1);
	if (z) {
		memcpy(z, p, n);
		z[n] = '\0';
		time_t t;
		(void)dcr_aws_time_parse(z, &t);
		free(z);
	}
}

/* The in-memory apply (dcr_apply_mem, the serving process's hook) of a
 * pack tar stream to a fixed set of host tensors, one of each element
 * width: every check before a write, the items held squeezed past 4 KiB,
 * the decode; tests/fuzz/apply-base.py writes the same tensors as a
 * checkpoint (byte j of tensor k is apply_byte(k, j)), so that packs
 * dcr-diff and dcr-pack make from it are seeds that apply whole. With
 * DCR_FUZZ_APPLY_MUST set, an input that does not apply aborts (how
 * scripts/fuzz checks its seeds reach the end). */
static const struct {
	const char *name;
	int dtype;
	unsigned ndim;
	uint64_t shape[2];
} ftab[] = {
	{"model.a", DCR_DT_BF16, 2, {64, 48}}, {"model.b", DCR_DT_F32, 1, {500}},
	{"model.c", DCR_DT_F16, 2, {33, 17}},  {"model.d", DCR_DT_U8, 1, {1024}},
	{"model.e", DCR_DT_F64, 1, {100}},     {"model.f", DCR_DT_F4, 2, {4, 64}},
	{"model.g", DCR_DT_F8_E4M3, 1, {300}},
};
#define NFT (sizeof(ftab) / sizeof(ftab[0]))
static uint8_t *fmem[NFT];
static size_t fbytes[NFT];

static uint8_t apply_byte(uint64_t k, uint64_t j)
{
	return (uint8_t)((j * 2654435761u + k * 40503u) >> 11);
}

static int flookup(void *ctx, const char *name, struct dcr_mem_tensor *t, struct dcr_err *e)
{
	(void)ctx, (void)e;
	for (size_t k = 0; k < NFT; k++)
		if (!strcmp(name, ftab[k].name)) {
			t->data = fmem[k];
			t->device = DCR_DEVICE_CPU;
			t->dtype = ftab[k].dtype;
			t->ndim = ftab[k].ndim;
			memset(t->shape, 0, sizeof(t->shape));
			memcpy(t->shape, ftab[k].shape, sizeof(ftab[k].shape));
			return 0;
		}
	return DCR_ENOTFOUND;
}

static void apply(const uint8_t *p, size_t n)
{
	for (size_t k = 0; k < NFT; k++) {
		if (!fmem[k]) {
			uint64_t ne = ftab[k].shape[0] * (ftab[k].ndim > 1 ? ftab[k].shape[1] : 1);
			fbytes[k] = (size_t)(ne * dcr_dtype_bits(ftab[k].dtype) / 8);
			if (!(fmem[k] = malloc(fbytes[k])))
				abort();
		}
		for (size_t j = 0; j < fbytes[k]; j++)
			fmem[k][j] = apply_byte(k, j);
	}
	int fd = memfd_create("fuzz-apply", MFD_CLOEXEC);
	if (fd < 0)
		return;
	struct dcr_err e = {0};
	struct dcr_pack_in *in;
	int r = -1;
	if (dcr_write_full(fd, p, n) == 0 && lseek(fd, 0, SEEK_SET) == 0 &&
	    !(r = dcr_pack_in_open_tar(fd, NULL, 0, &in, &e))) {
		struct dcr_mem_apply_opts o = {.lookup = flookup, .held_plain = 4096, .what = "fuzz"};
		struct dcr_mem_apply_result res;
		r = dcr_apply_mem(in, &o, &res, &e);
		dcr_pack_in_close(in);
	}
	close(fd);
	if (r && getenv("DCR_FUZZ_APPLY_MUST")) {
		fprintf(stderr, "fuzz: apply: %s\n", e.msg[0] ? e.msg : "cannot write the input");
		abort();
	}
}

/* The placement of a canonical delta into a serving layout: dcr_place of
 * rank 0 or rank 1, or dcr_place_replica of both (the input's first byte
 * picks), over the rank files that pmap makes of its canonical tensors
 * (byte j of tensor k is apply_byte(k, j); tests/fuzz/apply-base.py
 * --place writes them, and a step, as a checkpoint). Every check of the
 * delta's records and items against the map, the resolution of items
 * coded against the receiver's bits, the rank's journaled apply. A refused
 * placement must leave every rank file as it was (else the harness
 * aborts); a placed one is undone before the next input. */
#define AFF(c, co, d) "{\"kind\": \"affine\", \"canon\": \"" c "\", \"coff\": " co ", \"soff\": 0, \"dims\": " d "}"
#define STORED(r, n, dt, sh, pieces) \
	"{\"rank\": " r ", \"name\": \"" n "\", \"dtype\": \"" dt "\", \"shape\": [" sh "], \"pieces\": [" pieces "]}"
/* model.a split by rows, model.c by columns (rank 1's slice padded to
 * rank 0's width), model.b replicated, model.d and model.e on rank 0 only,
 * model.g on rank 1 only, model.h stored as F32 on rank 0 (a residual
 * cast) and as itself on rank 1 */
static const char pmap[] =
	"{\"dcr_layout\": 1, \"tp\": 2, \"world\": 2, \"complete\": true, \"canonical\": ["
	"{\"name\": \"model.a\", \"dtype\": \"BF16\", \"shape\": [64, 48]},"
	"{\"name\": \"model.b\", \"dtype\": \"F32\", \"shape\": [500]},"
	"{\"name\": \"model.c\", \"dtype\": \"F16\", \"shape\": [33, 17]},"
	"{\"name\": \"model.d\", \"dtype\": \"U8\", \"shape\": [1024]},"
	"{\"name\": \"model.e\", \"dtype\": \"F64\", \"shape\": [100]},"
	"{\"name\": \"model.g\", \"dtype\": \"F8_E4M3\", \"shape\": [300]},"
	"{\"name\": \"model.h\", \"dtype\": \"BF16\", \"shape\": [256]}], \"stored\": ["
	STORED("0", "model.a", "BF16", "32, 48", AFF("model.a", "0", "[[1536, 1, 1]]")) ","
	STORED("0", "model.b", "F32", "500", AFF("model.b", "0", "[[500, 1, 1]]")) ","
	STORED("0", "model.c", "F16", "33, 9", AFF("model.c", "0", "[[33, 9, 17], [9, 1, 1]]")) ","
	STORED("0", "model.d", "U8", "1024", AFF("model.d", "0", "[[1024, 1, 1]]")) ","
	STORED("0", "model.e", "F64", "100", AFF("model.e", "0", "[[100, 1, 1]]")) ","
	STORED("0", "model.h", "F32", "256",
	       "{\"kind\": \"residual\", \"transform\": \"cast\", \"canon\": \"model.h\", \"coff\": 0, "
	       "\"soff\": 0, \"dims\": [[256, 1, 1]]}") ","
	STORED("1", "model.a", "BF16", "32, 48", AFF("model.a", "1536", "[[1536, 1, 1]]")) ","
	STORED("1", "model.b", "F32", "500", AFF("model.b", "0", "[[500, 1, 1]]")) ","
	STORED("1", "model.c", "F16", "33, 9",
	       AFF("model.c", "9", "[[33, 9, 17], [8, 1, 1]]")
	       ", {\"kind\": \"padding\", \"soff\": 8, \"dims\": [[33, 9]]}") ","
	STORED("1", "model.g", "F8_E4M3", "300", AFF("model.g", "0", "[[300, 1, 1]]")) ","
	STORED("1", "model.h", "BF16", "256", AFF("model.h", "0", "[[256, 1, 1]]")) "]}";

static char *pdir;               /* the harness's directory */
static struct dcr_layout *pL;
static uint8_t *prank[2];        /* each rank's model.safetensors as made */
static size_t prank_len[2];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(path);
}

static void place_cleanup(void)
{
	if (pdir)
		nftw(pdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void place_die(const char *what, const struct dcr_err *e)
{
	fprintf(stderr, "fuzz: place: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
	place_cleanup();
	abort();
}

/* the canonical checkpoint, the map and its rank files, once */
static void place_setup(void)
{
	struct dcr_err e = {0};
	const char *tmp = access("/dev/shm", W_OK) ? getenv("TMPDIR") : "/dev/shm";
	char *t = dcr_asprintf("%s/dcr-fuzz-place.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!t || !(pdir = mkdtemp(t)))
		place_die("cannot make a directory", NULL);
	atexit(place_cleanup);
	if (dcr_layout_parse(pmap, sizeof(pmap) - 1, &pL, &e))
		place_die("cannot read the map", &e);
	/* the canonical checkpoint: the map's canonical tensors, in its order */
	struct dcr_tensor_info ti[16];
	size_t n = pL->ncanon;
	if (n > sizeof(ti) / sizeof(ti[0]))
		place_die("the map has too many canonical tensors", NULL);
	for (size_t k = 0; k < n; k++) {
		const struct dcr_layout_canon *cn = &pL->canon[k];
		ti[k] = (struct dcr_tensor_info){.name = cn->name, .dtype = cn->dtype,
						 .ndim = cn->ndim, .nelem = cn->nelem};
		memcpy(ti[k].shape, cn->shape, sizeof(cn->shape));
	}
	char *cdir = dcr_asprintf("%s/canon", pdir), *cf = dcr_asprintf("%s/canon/model.safetensors", pdir);
	struct dcr_st_writer *w = NULL;
	if (!cdir || !cf || dcr_mkdir_p(cdir, &e) < 0 || dcr_st_layout(ti, n, &e) < 0 ||
	    dcr_st_writer_new(cf, ti, n, NULL, 0, &w, &e) < 0)
		place_die("cannot write the canonical checkpoint", &e);
	for (size_t k = 0; k < n; k++) {
		size_t nb = (size_t)(ti[k].end - ti[k].begin);
		uint8_t *b = malloc(nb + 1);
		if (!b)
			place_die("out of memory", NULL);
		for (size_t j = 0; j < nb; j++)
			b[j] = apply_byte(k, j);
		if (dcr_st_writer_write(w, b, nb, &e) < 0)
			place_die("cannot write the canonical checkpoint", &e);
		free(b);
	}
	if (dcr_st_writer_commit(w, &e) < 0)
		place_die("cannot write the canonical checkpoint", &e);
	dcr_st_writer_free(w);
	struct dcr_ckpt *c;
	char *made = dcr_asprintf("%s/made", pdir);
	if (dcr_ckpt_open(cdir, &c, &e) || dcr_layout_materialize(pL, c, made, &e))
		place_die("cannot make the ranks", &e);
	dcr_ckpt_close(c);
	for (int r = 0; r < 2; r++) {
		char *f = dcr_asprintf("%s/rank-%d/model.safetensors", made, r);
		if (!f || dcr_read_file(f, 1 << 20, &prank[r], &prank_len[r], &e))
			place_die("cannot read a rank back", &e);
		free(f);
	}
	free(made);
	free(cdir);
	free(cf);
}

/* rank r's directory (run/rank-R) as made, nothing in its .dcr */
static char *place_fresh(int r)
{
	char *dir = dcr_asprintf("%s/run/rank-%d", pdir, r);
	char *f = dcr_asprintf("%s/model.safetensors", dir);
	if (!dir || !f)
		place_die("out of memory", NULL);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	struct dcr_err e;
	if (dcr_mkdir_p(dir, &e) < 0)
		place_die("cannot make a rank's directory", &e);
	int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || dcr_write_full(fd, prank[r], prank_len[r]) || close(fd))
		place_die("cannot write a rank", NULL);
	free(f);
	return dir;
}

static int place_same(int r)
{
	char *f = dcr_asprintf("%s/run/rank-%d/model.safetensors", pdir, r);
	uint8_t *b = NULL;
	size_t n = 0;
	struct dcr_err e;
	int same = f && !dcr_read_file(f, 1 << 20, &b, &n, &e) && n == prank_len[r] &&
		   !memcmp(b, prank[r], n);
	free(b);
	free(f);
	return same;
}

static void place(const uint8_t *p, size_t n)
{
	if (!n)
		return;
	if (!pdir)
		place_setup();
	int mode = p[0] % 3; /* rank 0, rank 1, the replica */
	struct mem m = {p + 1, n - 1, 0};
	struct dcr_source src = {mem_read, &m};
	struct dcr_receiver *rcs[2] = {NULL, NULL};
	struct dcr_place_result res[2];
	struct dcr_apply_opts o = {.what = "fuzz"};
	struct dcr_err e = {0};
	int r = 0;
	for (int k = 0; k < 2 && !r; k++) {
		char *dir = place_fresh(k);
		if ((mode == 2 || mode == k) && dcr_receiver_open(dir, DCR_RECEIVER_LOCK, &rcs[k], &e))
			place_die("cannot open a rank", &e);
		free(dir);
	}
	if (mode == 2)
		r = dcr_place_replica(rcs, 2, pL, src, NULL, 0, &o, res, &e);
	else
		r = dcr_place(rcs[mode], pL, (uint32_t)mode, src, NULL, 0, &o, res, &e);
	for (int k = 0; k < 2; k++)
		if (rcs[k])
			dcr_receiver_close(rcs[k]);
	if (r && getenv("DCR_FUZZ_APPLY_MUST")) {
		fprintf(stderr, "fuzz: place: %s\n", e.msg);
		place_cleanup();
		abort();
	}
	for (int k = 0; k < 2 && r; k++)
		if (!place_same(k)) {
			fprintf(stderr, "fuzz: place: refused (%s), yet rank %d changed\n", e.msg, k);
			place_cleanup();
			abort();
		}
}

/* summary: with p[0] even, a producer's summary parsed, built back and
 * parsed again, which must give the same bytes; odd, two summaries (the
 * first's length in le32 after the byte) joined into a pack's manifest as
 * producers 0 and 1 (the first alone when only it parses). The summaries
 * come from the store, put there by each training rank. */
static void summary(const uint8_t *p, size_t n)
{
	struct dcr_err e = {0};
	struct dcr_summary v[2];
	if (!n)
		return;
	int join = p[0] & 1;
	p++, n--;
	if (!join) {
		if (dcr_summary_parse(p, n, "fuzz", &v[0], &e))
			return;
		struct dcr_buf b[2] = {{0}, {0}};
		int r = dcr_summary_build(&v[0], &b[0], &e) ||
			dcr_summary_parse(b[0].p, b[0].len, "fuzz", &v[1], &e);
		if (r) {
			fprintf(stderr, "fuzz: summary: a parsed summary does not build back: %s\n", e.msg);
			abort();
		}
		if (dcr_summary_build(&v[1], &b[1], &e) || b[0].len != b[1].len ||
		    memcmp(b[0].p, b[1].p, b[0].len)) {
			fprintf(stderr, "fuzz: summary: built twice, two different summaries\n");
			abort();
		}
		dcr_summary_release(&v[1]);
		dcr_summary_release(&v[0]);
		dcr_buf_free(&b[0]);
		dcr_buf_free(&b[1]);
		return;
	}
	if (n < 4)
		return;
	size_t len0 = get_le32(p);
	p += 4, n -= 4;
	if (len0 > n || dcr_summary_parse(p, len0, "fuzz", &v[0], &e))
		return;
	uint32_t k = dcr_summary_parse(p + len0, n - len0, "fuzz", &v[1], &e) ? 1 : 2;
	const char *names[2] = {"summary 0", "summary 1"};
	struct dcr_manifest m;
	int r = dcr_summaries_join(v, names, k, &m, &e);
	if (!r)
		dcr_manifest_release(&m);
	else if (getenv("DCR_FUZZ_APPLY_MUST")) {
		fprintf(stderr, "fuzz: summary: %s\n", e.msg);
		abort();
	}
	for (uint32_t i = 0; i < k; i++)
		dcr_summary_release(&v[i]);
}

/* DCR_FUZZ_ONLY=N (scripts/fuzz TARGET): parser N whatever the first
 * byte says, so that one parser is fuzzed alone; -1 or unset: the byte. */
static int only = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	const char *v = getenv("DCR_FUZZ_ONLY");
	if (v && *v)
		only = atoi(v);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	struct dcr_err e;
	switch (only >= 0 ? only : data[0] % 14) {
	case 0: {
		struct dcr_st *st;
		if (!dcr_st_parse(p, n, &st, &e))
			dcr_st_close(st);
		break;
	}
	case 1: delta(p, n); break;
	case 2: {
		struct dcr_payload pl;
		struct dcr_payload_records it;
		struct dcr_delta_rec rec;
		if (!dcr_payload_check(p, n, "fuzz", &pl, &e) &&
		    !dcr_payload_records_open(&it, p, n, &pl, "fuzz", &e)) {
			while (dcr_payload_records_next(&it, &rec, &e) == 1)
				if (rec.type == DCR_REC_ITEM)
					items(&rec);
			dcr_payload_records_close(&it);
		}
		break;
	}
	case 3: {
		struct dcr_manifest m, h;
		int head = dcr_manifest_head(p, n, "fuzz", &h, &e);
		if (!dcr_manifest_parse(p, n, "fuzz", &m, &e)) {
			/* a manifest that parses has a head that says the same */
			if (head || memcmp(&h.target, &m.target, 32) || h.dense != m.dense)
				abort();
			dcr_manifest_release(&m);
		}
		break;
	}
	case 4: {
		struct dcr_layout *L;
		if (!dcr_layout_parse((const char *)p, n, &L, &e))
			dcr_layout_free(L);
		break;
	}
	case 5: codec(p, n); break;
	case 6: sign(p, n); break;
	case 7: tar(p, n); break;
	case 8: http(p, n); break;
	case 9: s3xml(p, n); break;
	case 10: aws(p, n); break;
	case 11: apply(p, n); break;
	case 12: place(p, n); break;
	case 13: summary(p, n); break;
	}
	return 0;
}
