/* pack-list.c - dcr-pack --list: a pack's entries (a directory, a tar file
 * or stream) or a delta's tensors, checked, then shown for a person or as
 * --porcelain records (see dcr-pack(1), OUTPUT). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "pack-list.h"
#include "dcr.h"

struct lister {
	int porcelain, bad;
	char eol;
};

/* A name from the pack, quoted unless records end with NUL (-z). */
static const char *qname(const struct lister *l, const char *s)
{
	return l->eol ? cmd_quote(s) : s;
}

/* a shape as "4096,128" */
static void shape_text(const struct dcr_delta_tensor *t, char *out, size_t n)
{
	size_t o = 0;
	out[0] = '\0';
	for (unsigned k = 0; k < t->ndim && o < n - 24; k++)
		o += (size_t)snprintf(out + o, n - o, "%s%llu", k ? "," : "",
				      (unsigned long long)t->shape[k]);
}

/* A tensor's porcelain record, the same for a pack's manifest and a
 * delta: name, dtype, shape, file, digest (hex, or "-"), new or base. */
static void tensor_record(const struct lister *l, const struct dcr_delta_tensor *t,
			  const char *digest)
{
	char shape[512];
	shape_text(t, shape, sizeof(shape));
	printf("tensor\t%s\t%s\t%s\t%s\t%s\t%s%c", qname(l, t->name), dcr_dtype_name(t->dtype),
	       shape, qname(l, t->file), digest, (t->flags & DCR_TENSOR_NEW) ? "new" : "base",
	       l->eol);
}

/* The removed tensors' names, one line or record each. */
static void removed_lines(const struct lister *l, char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (l->porcelain)
			printf("removed\t%s%c", qname(l, names[i]), l->eol);
		else
			printf("  removed %s\n", qname(l, names[i]));
}

static void list_manifest(const struct lister *l, const struct dcr_pack_entry *en)
{
	const struct dcr_manifest *m = en->manifest;
	char h1[65], h2[65], at[33];
	dcr_digest_hex(&m->base, h1);
	dcr_digest_hex(&m->target, h2);
	dcr_hex(m->attempt, sizeof(m->attempt), at);
	if (l->porcelain)
		printf("manifest\t%zu\t%s\t%s\t%s\t%u\t%u\t%u\t%llu\t%llu%c", en->len, h1, h2, at,
		       m->npayloads, m->ntensors, m->nremoved, (unsigned long long)m->nitems,
		       (unsigned long long)m->nchanges, l->eol);
	else
		printf("%-24s %12zu  manifest: %u payloads, %u tensors, %u removed, %llu items, %llu changes\n"
		       "  base   %s\n  target %s\n  attempt %s\n",
		       en->name, en->len, m->npayloads, m->ntensors, m->nremoved,
		       (unsigned long long)m->nitems, (unsigned long long)m->nchanges, h1, h2, at);
	if (m->have_version && !l->porcelain)
		printf("  version %llu%s%s\n", (unsigned long long)m->version,
		       m->policy && *m->policy ? ", policy " : "", m->policy ? m->policy : "");
	for (uint32_t i = 0; i < m->ntensors && l->porcelain; i++) {
		dcr_digest_hex(&m->tensors[i].digest, h1);
		tensor_record(l, &m->tensors[i], h1);
	}
	removed_lines(l, m->removed, m->nremoved);
}

static int list_entry(void *ctx, const struct dcr_pack_entry *en)
{
	struct lister *l = ctx;
	if (en->rc) {
		cmd_error("%s", en->err.msg);
		l->bad = 1;
		return 0;
	}
	if (en->kind == DCR_ENTRY_MANIFEST) {
		list_manifest(l, en);
		return 0;
	}
	if (en->kind == DCR_ENTRY_SUMMARY) {
		const struct dcr_summary *ps = en->producer;
		char at[33];
		uint64_t np = 0;
		dcr_hex(ps->attempt, sizeof(ps->attempt), at);
		for (uint32_t i = 0; i < ps->ntensors; i++)
			np += ps->tensors[i].parts.n;
		if (l->porcelain)
			printf("summary\t%zu\t%u\t%u\t%u\t%u\t%llu\t%llu\t%llu\t%s%c", en->len,
			       ps->producer, ps->nproducers, ps->npayloads, ps->ntensors,
			       (unsigned long long)np, (unsigned long long)ps->nitems,
			       (unsigned long long)ps->nchanges, at, l->eol);
		else
			printf("%-24s %12zu  summary of producer %u of %u: %u payloads, %u tensors, %llu digest parts, %llu items, %llu changes\n"
			       "  attempt %s\n",
			       en->name, en->len, ps->producer, ps->nproducers, ps->npayloads,
			       ps->ntensors, (unsigned long long)np, (unsigned long long)ps->nitems,
			       (unsigned long long)ps->nchanges, at);
		return 0;
	}
	if (en->kind == DCR_ENTRY_SIGNATURE) {
		if (l->porcelain)
			printf("signature\t%zu%c", en->len, l->eol);
		else
			printf("%-24s %12zu  signature of the manifest\n", en->name, en->len);
		return 0;
	}
	const struct dcr_payload *pl = en->payload;
	const struct dcr_payload_summary *sum = en->summary;
	char h1[65];
	dcr_digest_hex(&pl->digest, h1);
	const char *alg = pl->flags & DCR_PAYLOAD_BLAKE3 ? "blake3" : "sha256";
	if (l->porcelain)
		printf("payload\t%u\t%zu\t%s\t%llu\t%llu\t%llu\t%llu\t%s%c", pl->index, en->len, h1,
		       (unsigned long long)pl->raw_len, (unsigned long long)sum->tensors,
		       (unsigned long long)sum->items, (unsigned long long)sum->changes, alg, l->eol);
	else
		printf("%-24s %12zu  %llu tensors, %llu items, %llu changes, raw %llu, %s %.16s\n",
		       en->name, en->len, (unsigned long long)sum->tensors,
		       (unsigned long long)sum->items, (unsigned long long)sum->changes,
		       (unsigned long long)pl->raw_len, alg, h1);
	return 0;
}

/* What --list keeps of a delta's tensor while it reads the items. */
struct dtensor {
	uint64_t items, changes;
	uint64_t codec[DCR_CODEC_RAW + 1]; /* items per DCR_CODEC_* (0: any other) */
};

/* "classed:2,delta:1", or "-" for none */
static void codec_text(const struct dtensor *d, char *out, size_t n)
{
	size_t o = 0;
	out[0] = '\0';
	for (int c = DCR_CODEC_XOR_ZSTD; c <= DCR_CODEC_RAW; c++)
		if (d->codec[c])
			o += (size_t)snprintf(out + o, n - o, "%s%s:%llu", o ? "," : "",
					      dcr_codec_name(c), (unsigned long long)d->codec[c]);
	if (d->codec[0])
		o += (size_t)snprintf(out + o, n - o, "%s?:%llu", o ? "," : "",
				      (unsigned long long)d->codec[0]);
	if (!o)
		snprintf(out, n, "-");
}

/* --list of a delta stream (what dcr-diff writes), head[0..hl) already
 * read from fd: every record is checked as dcr-apply checks it (the
 * trailer too) before anything is printed. */
static int list_delta(int fd, const uint8_t *head, size_t hl, const char *what,
		      const struct lister *l)
{
	struct dcr_err e = {0};
	struct dcr_fdbuf fb;
	struct dcr_delta_reader rd;
	struct dcr_delta_rec rec;
	struct dcr_tensor_table tt = {0};
	struct dtensor *dt = NULL;
	size_t dcap = 0, nbases = 0;
	struct dcr_names removed = {0};
	uint64_t nitems = 0, nchanges = 0;
	int r;
	if (dcr_fdbuf_init(&fb, fd, DCR_FDBUF_SIZE))
		cmd_die("out of memory");
	r = dcr_delta_reader_init_flags(&rd, (struct dcr_source){dcr_source_fdbuf_read, &fb}, head,
					hl, DCR_DELTA_PARTIAL | DCR_DELTA_DENSE, what, &e);
	while (!r && (r = dcr_delta_next(&rd, &rec, &e)) == 1) {
		r = 0;
		if (rec.type == DCR_REC_TENSOR) {
			if ((r = dcr_tensor_table_add(&tt, &rec, what, &e)))
				break;
			if (tt.cap > dcap) { /* as the table grows: geometrically */
				struct dtensor *g = realloc(dt, tt.cap * sizeof(*dt));
				if (!g) {
					r = dcr_err_sys(&e, ENOMEM, "%s", what);
					break;
				}
				dt = g;
				dcap = tt.cap;
			}
			memset(&dt[tt.n - 1], 0, sizeof(*dt));
		} else if (rec.type == DCR_REC_ITEM) {
			struct dcr_item it;
			const struct dcr_delta_tensor *t;
			if ((r = dcr_tensor_table_item(&tt, &rec, what, &it, &t, &e)))
				break;
			struct dtensor *d = &dt[t - tt.v];
			d->items++;
			d->changes += it.n;
			d->codec[it.codec >= DCR_CODEC_XOR_ZSTD && it.codec <= DCR_CODEC_RAW ? it.codec : 0]++;
			nitems++;
			nchanges += it.n;
		} else if (rec.type == DCR_REC_DONE) {
			uint32_t ti;
			dcr_digest dg;
			if ((r = dcr_delta_parse_done(&rec, &ti, &dg, &e)))
				break;
			if (ti >= tt.n) {
				r = dcr_err_set(&e, DCR_EFORMAT, "%s: DONE names tensor %u of %zu", what,
						ti, tt.n);
				break;
			}
			tt.v[ti].digest = dg;
			tt.v[ti].have_digest = 1;
		} else if (rec.type == DCR_REC_REMOVE) {
			char *name;
			if ((r = dcr_delta_parse_name(&rec, &name, &e)))
				break;
			if (dcr_names_add(&removed, name)) {
				free(name);
				r = dcr_err_sys(&e, ENOMEM, "%s", what);
			}
		} else if (rec.type == DCR_REC_BASES) {
			dcr_digest *v = NULL;
			if (!(r = dcr_delta_parse_bases(&rec, &v, &nbases, &e)))
				free(v);
		}
	}
	int bad = r < 0;
	if (bad) {
		cmd_error("%s", e.msg);
	} else {
		const char *kind = rd.flags & DCR_DELTA_DENSE     ? "dense"
				   : rd.flags & DCR_DELTA_PARTIAL ? "partial"
								  : "step";
		char h1[65], h2[65], at[33], shape[512], codecs[160];
		dcr_digest_hex(&rd.base, h1);
		dcr_digest_hex(&rd.target, h2);
		dcr_hex(rd.attempt, sizeof(rd.attempt), at);
		size_t nnew = 0;
		for (size_t i = 0; i < tt.n; i++)
			nnew += !!(tt.v[i].flags & DCR_TENSOR_NEW);
		if (l->porcelain)
			printf("delta\t%llu\t%s\t%s\t%s\t%zu\t%zu\t%llu\t%llu\t%s%c",
			       (unsigned long long)rd.offset, h1, h2, at, tt.n, removed.n,
			       (unsigned long long)nitems, (unsigned long long)nchanges, kind, l->eol);
		else
			printf("%-24s %12llu  %s delta: %zu tensors (%zu new), %zu removed, %llu items, %llu changes\n"
			       "  base   %s\n  target %s\n  attempt %s\n",
			       l->eol ? cmd_quote(what) : what, (unsigned long long)rd.offset, kind, tt.n,
			       nnew, removed.n, (unsigned long long)nitems, (unsigned long long)nchanges,
			       h1, h2, at);
		if (nbases && !l->porcelain)
			printf("  fits %zu other base states too (overwrites only)\n", nbases);
		for (size_t i = 0; i < tt.n; i++) {
			const struct dcr_delta_tensor *t = &tt.v[i];
			shape_text(t, shape, sizeof(shape));
			codec_text(&dt[i], codecs, sizeof(codecs));
			if (t->have_digest)
				dcr_digest_hex(&t->digest, h1);
			else
				snprintf(h1, sizeof(h1), "-");
			if (l->porcelain) {
				tensor_record(l, t, h1);
				printf("items\t%s\t%llu\t%llu\t%s%c", qname(l, t->name),
				       (unsigned long long)dt[i].items, (unsigned long long)dt[i].changes,
				       codecs, l->eol);
			} else {
				printf("  %s %s [%s] in %s%s: %llu items, %llu changes%s%s%s\n",
				       qname(l, t->name), dcr_dtype_name(t->dtype), shape, qname(l, t->file),
				       (t->flags & DCR_TENSOR_NEW) ? " (new)" : "",
				       (unsigned long long)dt[i].items, (unsigned long long)dt[i].changes,
				       dt[i].items ? " (" : "", dt[i].items ? codecs : "",
				       dt[i].items ? ")" : "");
			}
		}
		removed_lines(l, removed.v, removed.n);
	}
	dcr_store_names_free(removed.v, removed.n);
	free(dt);
	dcr_tensor_table_clear(&tt);
	dcr_delta_reader_release(&rd);
	dcr_fdbuf_release(&fb);
	return bad ? EXIT_FATAL : EXIT_OK;
}

int cmd_pack_list(const char *path, int porcelain, char eol)
{
	struct dcr_err e = {0};
	struct lister l = {.porcelain = porcelain, .eol = eol};
	const char *what = strcmp(path, "-") ? path : "standard input";
	struct cmd_delta_input d;
	struct dcr_pack_in *in = cmd_open_pack_input(path, &d);
	if (!in)
		return list_delta(d.fd, d.head, d.head_len, what, &l);
	int n = dcr_pack_walk(in, list_entry, &l, &e);
	if (n < 0) {
		cmd_error("%s", e.msg);
		l.bad = 1;
	} else if (!n) {
		cmd_error("'%s' is not a pack: no manifest and no payloads", what);
		l.bad = 1;
	}
	dcr_pack_in_close(in);
	return l.bad ? EXIT_FATAL : EXIT_OK;
}
