/* mem-apply - apply a pack to a checkpoint's tensors in memory
 * (dcr_apply_mem), for the tests: every tensor of CKPT is copied into host
 * memory (--device cpu, the default) or device memory (--device cuda),
 * the pack applied there, and every tensor's bytes written back into
 * CKPT's files in place, whatever the outcome, so that a test can compare
 * them with what the file path (dcr-apply) makes, or with what they were.
 *
 * usage: mem-apply [--device cpu|cuda] [--base HEX] [--check-all] [--verify-key PUB]
 *                  [--batch N] [--held-plain BYTES] CKPT PACK
 * PACK: a pack directory or a pack tar file. Exit: 0 applied (or already
 * there), 1 refused (DCR_EBASE, DCR_EDIGEST, DCR_ETRUST), 77 --device cuda without a
 * usable device, 128 any other error, 129 usage. */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcr.h"
#include "core/file.h"
#include "core/util.h"

struct held {
	struct dcr_ckpt *c;
	void **mem; /* per tensor, host or device */
	int device;
};

static int lookup(void *ctx, const char *name, struct dcr_mem_tensor *t, struct dcr_err *e)
{
	(void)e;
	struct held *h = ctx;
	const struct dcr_ckpt_tensor *ct = dcr_ckpt_find(h->c, name);
	if (!ct)
		return DCR_ENOTFOUND;
	t->data = h->mem[ct - h->c->tensors];
	t->device = h->device;
	t->dtype = ct->info->dtype;
	t->ndim = ct->info->ndim;
	memcpy(t->shape, ct->info->shape, sizeof(t->shape));
	return 0;
}

static int die(const char *what, const struct dcr_err *e, int code)
{
	fprintf(stderr, "mem-apply: error: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
	return code;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"base", required_argument, NULL, 'b'},
		{"check-all", no_argument, NULL, 'a'},
		{"batch", required_argument, NULL, 'n'},
		{"held-plain", required_argument, NULL, 'H'},
		{"verify-key", required_argument, NULL, 'k'},
		{NULL, 0, NULL, 0},
	};
	struct dcr_mem_apply_opts o = {0};
	dcr_digest base;
	struct dcr_pubkey key;
	struct dcr_trust trust = {.keys = &key, .nkeys = 1};
	int device = DCR_DEVICE_CPU, c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if ((device = dcr_device_parse(optarg)) < 0)
				return die("--device wants cpu or cuda", NULL, 129);
			break;
		case 'b':
			if (dcr_digest_parse_hex(optarg, &base))
				return die("--base wants 64 hex digits", NULL, 129);
			o.base = &base;
			break;
		case 'a': o.check_all = 1; break;
		case 'n': o.batch = strtoull(optarg, NULL, 10); break;
		case 'H': o.held_plain = strtoull(optarg, NULL, 10); break;
		case 'k': {
			struct dcr_err ke = {0};
			if (dcr_pubkey_load(optarg, &key, &ke))
				return die("--verify-key", &ke, 129);
			o.trust = &trust;
			break;
		}
		default: return die("bad option", NULL, 129);
		}
	}
	if (argc - optind != 2)
		return die("usage: mem-apply [--device cpu|cuda] [--base HEX] [--check-all] [--batch N] [--held-plain BYTES] CKPT PACK",
			   NULL, 129);
	const char *ckpt = argv[optind], *pack = argv[optind + 1];
	struct dcr_err e = {0};
	void *stream = NULL;
	if (device == DCR_DEVICE_CUDA) {
		if (dcr_cuda_probe(&e)) {
			printf("mem-apply: %s: skipping\n", e.msg);
			return 77;
		}
		if (dcr_cuda_stream_new(&stream, &e))
			return die("stream", &e, 128);
	}
	struct held h = {.device = device};
	if (dcr_ckpt_open(ckpt, &h.c, &e))
		return die("open", &e, 128);
	h.mem = dcr_calloc(h.c->ntensors + 1, sizeof(void *));
	for (size_t i = 0; i < h.c->ntensors; i++) {
		const struct dcr_ckpt_tensor *ct = &h.c->tensors[i];
		size_t n = (size_t)dcr_tensor_bytes(ct->info);
		if (device == DCR_DEVICE_CUDA) {
			if (dcr_cuda_malloc(&h.mem[i], n, &e) ||
			    dcr_cuda_copy(h.mem[i], ct->data, n, DCR_CUDA_H2D, stream, &e))
				return die("to the device", &e, 128);
		} else {
			if (!(h.mem[i] = malloc(n ? n : 1)))
				return die("out of memory", NULL, 128);
			memcpy(h.mem[i], ct->data, n);
		}
	}
	if (device == DCR_DEVICE_CUDA && dcr_cuda_sync(stream, &e))
		return die("to the device", &e, 128);

	struct dcr_pack_in *in = NULL;
	struct stat sb;
	int fd = -1, r;
	if (!stat(pack, &sb) && S_ISDIR(sb.st_mode)) {
		r = dcr_pack_in_open_dir(pack, &in, &e);
	} else if ((fd = open(pack, O_RDONLY)) < 0) {
		return die(pack, NULL, 128);
	} else {
		r = dcr_pack_in_open_tar(fd, NULL, 0, &in, &e);
	}
	if (r)
		return die("pack", &e, 128);
	o.lookup = lookup;
	o.ctx = &h;
	o.stream = stream;
	o.what = pack;
	struct dcr_mem_apply_result res;
	struct dcr_err ae = {0};
	int ar = dcr_apply_mem(in, &o, &res, &ae);
	dcr_pack_in_close(in);
	if (fd >= 0)
		close(fd);

	/* the bytes in memory, back into the files, whatever happened */
	uint8_t *buf = NULL;
	for (size_t i = 0; i < h.c->ntensors; i++) {
		const struct dcr_ckpt_tensor *ct = &h.c->tensors[i];
		size_t n = (size_t)dcr_tensor_bytes(ct->info);
		const void *src = h.mem[i];
		if (device == DCR_DEVICE_CUDA) {
			free(buf);
			if (!(buf = malloc(n ? n : 1)))
				return die("out of memory", NULL, 128);
			if (dcr_cuda_copy(buf, h.mem[i], n, DCR_CUDA_D2H, stream, &e) ||
			    dcr_cuda_sync(stream, &e))
				return die("from the device", &e, 128);
			src = buf;
		}
		char *path = h.c->is_dir ? dcr_path_join(h.c->path, h.c->file_names[ct->file])
					 : dcr_strdup(h.c->path);
		int wfd = path ? open(path, O_WRONLY) : -1;
		free(path);
		if (wfd < 0 || (n && pwrite(wfd, src, n, (off_t)ct->file_off) != (ssize_t)n))
			return die("cannot write the tensors back", NULL, 128);
		close(wfd);
		if (device == DCR_DEVICE_CUDA)
			dcr_cuda_free(h.mem[i]);
		else
			free(h.mem[i]);
	}
	free(buf);
	free(h.mem);
	dcr_ckpt_close(h.c);
	dcr_cuda_stream_free(stream);
	if (ar) {
		fprintf(stderr, "mem-apply: error: %s\n", ae.msg);
		return ar == DCR_EBASE || ar == DCR_EDIGEST || ar == DCR_ETRUST ? 1 : 128;
	}
	if (res.already)
		printf("already at the target\n");
	else
		printf("applied %llu changes in %llu items: %llu tensors written, %llu checked\n",
		       (unsigned long long)res.changes, (unsigned long long)res.items,
		       (unsigned long long)res.tensors_written,
		       (unsigned long long)res.tensors_checked);
	return 0;
}
