/* dcr-layout - generate, check, show and materialize layout maps. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"

static const char usage_text[] =
	"usage: dcr-layout generate --config CONFIG.json --framework megatron|vllm --tp T\n"
	"                           [--ep E] [--rank R | --all] [--vocab-multiple N]\n"
	"                           [--stored-dtype DT] [--zero-centered-gamma] -o MAP\n"
	"   or: dcr-layout check [-q] MAP\n"
	"   or: dcr-layout show [--porcelain] MAP\n"
	"   or: dcr-layout materialize --map MAP --canonical CKPT -o DIR\n"
	"\n"
	"Layout maps relate a layout's stored tensors (training shards, serving\n"
	"parameters) to canonical Hugging Face coordinates; see dcr-layout(1) and\n"
	"dcr-format-layout(5).\n";

static int usage(int code)
{
	fputs(usage_text, code ? stderr : stdout);
	return code;
}

static int fatal(const struct dcr_err *e)
{
	fprintf(stderr, "dcr-layout: error: %s\n", e->msg);
	return 128;
}

static int finish_stdout(void)
{
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "dcr-layout: error: write to stdout failed\n");
		return 128;
	}
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || v > UINT32_MAX || *s == '-')
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int cmd_generate(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"framework", required_argument, NULL, 'f'},
		{"tp", required_argument, NULL, 't'},
		{"ep", required_argument, NULL, 'E'},
		{"rank", required_argument, NULL, 'r'},
		{"all", no_argument, NULL, 'a'},
		{"vocab-multiple", required_argument, NULL, 'V'},
		{"stored-dtype", required_argument, NULL, 'D'},
		{"zero-centered-gamma", no_argument, NULL, 'Z'},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0}};
	struct dcr_layout_gen g = {.rank = -1, .stored_dtype = -1};
	const char *config = NULL, *out = NULL;
	uint32_t v;
	int c, have_rank = 0, all = 0;
	while ((c = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'f': g.framework = optarg; break;
		case 't':
		case 'E':
		case 'r':
		case 'V':
			if (parse_u32(optarg, &v) < 0) {
				fprintf(stderr, "dcr-layout: error: '%s' is not a number\n", optarg);
				return 129;
			}
			if (c == 't')
				g.tp = v;
			else if (c == 'E')
				g.ep = v;
			else if (c == 'V')
				g.vocab_multiple = v;
			else {
				g.rank = v;
				have_rank = 1;
			}
			break;
		case 'a': all = 1; break;
		case 'D':
			if ((g.stored_dtype = dcr_dtype_parse(optarg)) < 0) {
				fprintf(stderr, "dcr-layout: error: unknown dtype '%s'\n", optarg);
				return 129;
			}
			break;
		case 'Z': g.zero_centered_gamma = 1; break;
		case 'o': out = optarg; break;
		case 'h': return usage(0);
		default: return usage(129);
		}
	}
	if (optind != argc || !config || !g.framework || !g.tp || !out) {
		fprintf(stderr, "dcr-layout: error: generate needs --config, --framework, --tp and -o\n");
		return usage(129);
	}
	if (have_rank && all) {
		fprintf(stderr, "dcr-layout: error: --rank and --all are exclusive\n");
		return 129;
	}
	if (!strcmp(out, "-") && isatty(1)) {
		fprintf(stderr, "dcr-layout: error: refusing to write a map to a terminal\n");
		return 129;
	}
	struct dcr_err e = {0};
	uint8_t *text;
	size_t len;
	struct dcr_layout *L;
	if (dcr_read_file(config, 1 << 24, &text, &len, &e) < 0)
		return fatal(&e);
	int rc = dcr_layout_generate((const char *)text, len, &g, &L, &e);
	free(text);
	if (rc < 0)
		return fatal(&e);
	rc = dcr_layout_save(L, out, &e);
	dcr_layout_free(L);
	if (rc < 0)
		return fatal(&e);
	return finish_stdout();
}

static int cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0}};
	int c, quiet = 0;
	while ((c = getopt_long(argc, argv, "+qh", opts, NULL)) != -1) {
		switch (c) {
		case 'q': quiet = 1; break;
		case 'h': return usage(0);
		default: return usage(129);
		}
	}
	if (optind + 1 != argc)
		return usage(129);
	struct dcr_err e = {0};
	struct dcr_layout *L;
	struct dcr_layout_report r;
	if (dcr_layout_load(argv[optind], &L, &e) < 0)
		return fatal(&e);
	int rc = dcr_layout_check(L, &r, &e);
	if (rc < 0) {
		dcr_layout_free(L);
		return fatal(&e);
	}
	if (rc == 1) {
		fprintf(stderr, "dcr-layout: %s: %s\n", argv[optind], r.problem);
		dcr_layout_free(L);
		return 1;
	}
	if (!quiet) {
		printf("tensors %zu\npieces %zu\nranks %u\ncomplete %s\n",
		       L->ntensors, L->npieces, L->world, L->complete ? "yes" : "no");
		printf("stored %" PRIu64 "\naffine %" PRIu64 "\nresidual %" PRIu64
		       "\npadding %" PRIu64 "\n",
		       r.stored_elems, r.affine_elems, r.residual_elems, r.padding_elems);
		printf("canonical %" PRIu64 "\nuncovered %" PRIu64 "\nreplicated %" PRIu64
		       "\nreplica-copies %" PRIu64 "\n",
		       r.canon_elems, r.canon_uncovered, r.canon_replicated, r.replica_copies);
	}
	dcr_layout_free(L);
	return finish_stdout();
}

static const char *kinds[] = {"affine", "residual", "padding"};

static int cmd_show(int argc, char **argv)
{
	static const struct option opts[] = {
		{"porcelain", no_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0}};
	int c, porcelain = 0;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': porcelain = 1; break;
		case 'h': return usage(0);
		default: return usage(129);
		}
	}
	if (optind + 1 != argc)
		return usage(129);
	struct dcr_err e = {0};
	struct dcr_layout *L;
	if (dcr_layout_load(argv[optind], &L, &e) < 0)
		return fatal(&e);
	if (!porcelain)
		printf("# %s %s tp=%u ep=%u world=%u complete=%s canonical=%zu stored=%zu\n",
		       L->framework ? L->framework : "-", L->model_type ? L->model_type : "-",
		       L->tp, L->ep, L->world, L->complete ? "yes" : "no", L->ncanon,
		       L->ntensors);
	/* One line per piece: rank stored-name kind transform canon soff coff dims */
	for (size_t i = 0; i < L->ntensors; i++) {
		const struct dcr_layout_tensor *t = &L->tensors[i];
		if (!porcelain) {
			printf("%u %s %s [", t->rank, t->name, dcr_dtype_name(t->dtype));
			for (unsigned k = 0; k < t->ndim; k++)
				printf("%s%" PRIu64, k ? ", " : "", t->shape[k]);
			printf("]\n");
		}
		for (size_t k = 0; k < t->npieces; k++) {
			const struct dcr_layout_piece *p = dcr_layout_tensor_piece(L, (uint32_t)i, k);
			if (porcelain)
				printf("%u\t%s\t", t->rank, t->name);
			else
				printf("  ");
			printf("%s%s%s", kinds[p->kind], p->kind == DCR_PIECE_RESIDUAL ? ":" : "",
			       p->kind == DCR_PIECE_RESIDUAL ? dcr_xform_name(p->xform) : "");
			printf(porcelain ? "\t%" PRIu64 "\t%s\t%" PRIu64 "\t" : " s@%" PRIu64 " -> %s @%" PRIu64 " ",
			       p->soff, p->kind == DCR_PIECE_PADDING ? "-" : L->canon[p->canon].name,
			       p->coff);
			for (unsigned d = 0; d < p->ndim; d++)
				printf("%s%" PRIu64 ":%" PRIu64 ":%" PRIu64, d ? "," : "",
				       p->dim[d].count, p->dim[d].sstride, p->dim[d].cstride);
			if (!p->ndim)
				printf("1:1:1");
			printf("\n");
		}
	}
	dcr_layout_free(L);
	return finish_stdout();
}

static int cmd_materialize(int argc, char **argv)
{
	static const struct option opts[] = {
		{"map", required_argument, NULL, 'm'},
		{"canonical", required_argument, NULL, 'c'},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0}};
	const char *map = NULL, *ckpt = NULL, *out = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': map = optarg; break;
		case 'c': ckpt = optarg; break;
		case 'o': out = optarg; break;
		case 'h': return usage(0);
		default: return usage(129);
		}
	}
	if (optind != argc || !map || !ckpt || !out) {
		fprintf(stderr, "dcr-layout: error: materialize needs --map, --canonical and -o\n");
		return usage(129);
	}
	struct dcr_err e = {0};
	struct dcr_layout *L;
	struct dcr_layout_report r;
	struct dcr_ckpt *ck;
	if (dcr_layout_load(map, &L, &e) < 0)
		return fatal(&e);
	int rc = dcr_layout_check(L, &r, &e);
	if (rc != 0) {
		if (rc > 0)
			fprintf(stderr, "dcr-layout: error: '%s' is not an exact cover: %s\n",
				map, r.problem);
		else
			fatal(&e);
		dcr_layout_free(L);
		return 128;
	}
	if (dcr_ckpt_open(ckpt, &ck, &e) < 0) {
		dcr_layout_free(L);
		return fatal(&e);
	}
	rc = dcr_layout_materialize(L, ck, out, &e);
	dcr_ckpt_close(ck);
	dcr_layout_free(L);
	return rc < 0 ? fatal(&e) : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage(129);
	const char *sub = argv[1];
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help"))
		return usage(0);
	argc--;
	argv++;
	optind = 1;
	if (!strcmp(sub, "generate"))
		return cmd_generate(argc, argv);
	if (!strcmp(sub, "check"))
		return cmd_check(argc, argv);
	if (!strcmp(sub, "show"))
		return cmd_show(argc, argv);
	if (!strcmp(sub, "materialize"))
		return cmd_materialize(argc, argv);
	fprintf(stderr, "dcr-layout: error: unknown subcommand '%s'\n", sub);
	return usage(129);
}
