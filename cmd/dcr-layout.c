/* dcr-layout - generate, check, show and materialize layout maps. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
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
	"dcr-format-layout(5).\n"
	"\n"
	"Exit status: 0 done, 1 check found a problem, 128 error, 129 usage error.\n";

/* -h/--help to stdout, anything getopt could not take a usage error. */
static void other_option(int c)
{
	if (c == 'h') {
		fputs(usage_text, stdout);
		exit(cmd_finish(EXIT_OK));
	}
	cmd_bad_option(c, usage_text);
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
	int c, have_rank = 0, all = 0;
	while ((c = getopt_long(argc, argv, "+:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'f': g.framework = optarg; break;
		case 't': g.tp = (uint32_t)cmd_parse_u64(usage_text, "--tp", optarg, 0, UINT32_MAX); break;
		case 'E': g.ep = (uint32_t)cmd_parse_u64(usage_text, "--ep", optarg, 0, UINT32_MAX); break;
		case 'V':
			g.vocab_multiple = (uint32_t)cmd_parse_u64(usage_text, "--vocab-multiple", optarg,
								   0, UINT32_MAX);
			break;
		case 'r':
			g.rank = (int64_t)cmd_parse_u64(usage_text, "--rank", optarg, 0, UINT32_MAX);
			have_rank = 1;
			break;
		case 'a': all = 1; break;
		case 'D':
			if ((g.stored_dtype = dcr_dtype_parse(optarg)) < 0)
				cmd_usage_error(usage_text, "unknown dtype '%s'", optarg);
			break;
		case 'Z': g.zero_centered_gamma = 1; break;
		case 'o': out = optarg; break;
		default: other_option(c); break;
		}
	}
	if (optind != argc || !config || !g.framework || !g.tp || !out)
		cmd_usage_error(usage_text, "generate needs --config, --framework, --tp and -o");
	if (have_rank && all)
		cmd_usage_error(usage_text, "--rank and --all are exclusive");
	if (!strcmp(out, "-") && isatty(1))
		cmd_usage_error(usage_text, "refusing to write a map to a terminal");
	struct dcr_err e = {0};
	uint8_t *text;
	size_t len;
	struct dcr_layout *L;
	if (dcr_read_file(config, 1 << 24, &text, &len, &e) < 0)
		cmd_die_err(&e, EXIT_FATAL);
	int rc = dcr_layout_generate((const char *)text, len, &g, &L, &e);
	free(text);
	if (rc < 0)
		cmd_die_err(&e, EXIT_FATAL);
	rc = dcr_layout_save(L, out, &e);
	dcr_layout_free(L);
	if (rc < 0)
		cmd_die_err(&e, EXIT_FATAL);
	return cmd_finish(EXIT_OK);
}

static int cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0}};
	int c, quiet = 0;
	while ((c = getopt_long(argc, argv, "+:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'q': quiet = 1; break;
		default: other_option(c); break;
		}
	}
	if (optind + 1 != argc)
		cmd_usage_error(usage_text, "check needs one MAP");
	struct dcr_err e = {0};
	struct dcr_layout *L;
	struct dcr_layout_report r;
	if (dcr_layout_load(argv[optind], &L, &e) < 0)
		cmd_die_err(&e, EXIT_FATAL);
	int rc = dcr_layout_check(L, &r, &e);
	if (rc < 0)
		cmd_die_err(&e, EXIT_FATAL);
	if (rc == 1) {
		fprintf(stderr, "dcr-layout: %s: %s\n", argv[optind], r.problem);
		dcr_layout_free(L);
		return cmd_finish(EXIT_NEGATIVE);
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
	return cmd_finish(EXIT_OK);
}

static const char *kinds[] = {"affine", "residual", "padding"};

static int cmd_show(int argc, char **argv)
{
	static const struct option opts[] = {
		{"porcelain", no_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0}};
	int c, porcelain = 0;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': porcelain = 1; break;
		default: other_option(c); break;
		}
	}
	if (optind + 1 != argc)
		cmd_usage_error(usage_text, "show needs one MAP");
	struct dcr_err e = {0};
	struct dcr_layout *L;
	if (dcr_layout_load(argv[optind], &L, &e) < 0)
		cmd_die_err(&e, EXIT_FATAL);
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
	return cmd_finish(EXIT_OK);
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
	while ((c = getopt_long(argc, argv, "+:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': map = optarg; break;
		case 'c': ckpt = optarg; break;
		case 'o': out = optarg; break;
		default: other_option(c); break;
		}
	}
	if (optind != argc || !map || !ckpt || !out)
		cmd_usage_error(usage_text, "materialize needs --map, --canonical and -o");
	struct dcr_err e = {0};
	struct dcr_layout *L;
	struct dcr_layout_report r;
	struct dcr_ckpt *ck;
	if (dcr_layout_load(map, &L, &e) < 0)
		cmd_die_err(&e, EXIT_FATAL);
	int rc = dcr_layout_check(L, &r, &e);
	if (rc < 0)
		cmd_die_err(&e, EXIT_FATAL);
	if (rc > 0)
		cmd_die("'%s' is not an exact cover: %s", map, r.problem);
	if (dcr_ckpt_open(ckpt, &ck, &e) < 0)
		cmd_die_err(&e, EXIT_FATAL);
	rc = dcr_layout_materialize(L, ck, out, &e);
	dcr_ckpt_close(ck);
	dcr_layout_free(L);
	if (rc < 0)
		cmd_die_err(&e, EXIT_FATAL);
	return cmd_finish(EXIT_OK);
}

int main(int argc, char **argv)
{
	cmd_init("dcr-layout", argc, argv);
	if (argc < 2)
		cmd_usage_error(usage_text, "need a subcommand");
	const char *sub = argv[1];
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
		fputs(usage_text, stdout);
		return cmd_finish(EXIT_OK);
	}
	optind = 2; /* the subcommand's options follow it */
	if (!strcmp(sub, "generate"))
		return cmd_generate(argc, argv);
	if (!strcmp(sub, "check"))
		return cmd_check(argc, argv);
	if (!strcmp(sub, "show"))
		return cmd_show(argc, argv);
	if (!strcmp(sub, "materialize"))
		return cmd_materialize(argc, argv);
	cmd_usage_error(usage_text, "unknown subcommand '%s'", sub);
}
