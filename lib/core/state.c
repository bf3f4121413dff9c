/* state.c - tensor digests and state ids (SHA-256), hashed on every core. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/bytes.h"
#include "core/file.h"
#include "core/state.h"
#include "core/util.h"

/* Read through a bounded buffer rather than the mapping, so that hashing a
 * large checkpoint does not leave it all resident in this process. */
void dcr_tensor_digest(const struct dcr_ckpt_tensor *t, dcr_digest *out)
{
	uint64_t n = dcr_tensor_bytes(t->info);
	size_t cap = n < (4u << 20) ? (size_t)n : (4u << 20);
	uint8_t *buf = t->fd >= 0 && n ? malloc(cap) : NULL;
	if (!buf) {
		dcr_sha256(t->data, n, out);
		return;
	}
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned int len = DCR_DIGEST_LEN;
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	for (uint64_t off = 0; off < n;) {
		size_t k = n - off < cap ? (size_t)(n - off) : cap;
		if (dcr_pread_full(t->fd, buf, k, t->file_off + off))
			memcpy(buf, t->data + off, k); /* the mapping is the fallback */
		EVP_DigestUpdate(c, buf, k);
		off += k;
	}
	EVP_DigestFinal_ex(c, out->b, &len);
	EVP_MD_CTX_free(c);
	free(buf);
}

/* The state id: SHA-256 over "dcr-state-v1\n" then, per tensor sorted by
 * name: le32 name length, name, le32 dtype name length, dtype name, le32
 * ndim, le64 dims, 32-byte digest. */
void dcr_state_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned int len = DCR_DIGEST_LEN;
	uint8_t t[8];
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	EVP_DigestUpdate(c, "dcr-state-v1\n", 13);
	for (size_t i = 0; i < n; i++) {
		const char *dt = dcr_dtype_name(ent[i].dtype);
		size_t nl = strlen(ent[i].name), dl = strlen(dt);
		put_le32(t, (uint32_t)nl);
		EVP_DigestUpdate(c, t, 4);
		EVP_DigestUpdate(c, ent[i].name, nl);
		put_le32(t, (uint32_t)dl);
		EVP_DigestUpdate(c, t, 4);
		EVP_DigestUpdate(c, dt, dl);
		put_le32(t, ent[i].ndim);
		EVP_DigestUpdate(c, t, 4);
		for (unsigned k = 0; k < ent[i].ndim; k++) {
			put_le64(t, ent[i].shape[k]);
			EVP_DigestUpdate(c, t, 8);
		}
		EVP_DigestUpdate(c, ent[i].digest.b, DCR_DIGEST_LEN);
	}
	EVP_DigestFinal_ex(c, out->b, &len);
	EVP_MD_CTX_free(c);
}

struct hash_job {
	const struct dcr_ckpt *c;
	dcr_digest *out;
	const uint8_t *sel;
	size_t next; /* shared cursor */
	pthread_mutex_t mu;
};

static void *hash_worker(void *arg)
{
	struct hash_job *j = arg;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		size_t i = j->next++;
		pthread_mutex_unlock(&j->mu);
		if (i >= j->c->ntensors)
			return NULL;
		if (j->sel && !j->sel[i])
			continue;
		dcr_tensor_digest(&j->c->tensors[i], &j->out[i]);
	}
}

int dcr_ckpt_digests(const struct dcr_ckpt *c, dcr_digest *out, int threads)
{
	return dcr_ckpt_digests_sel(c, out, NULL, threads);
}

int dcr_ckpt_digests_sel(const struct dcr_ckpt *c, dcr_digest *out, const uint8_t *sel,
			 int threads)
{
	struct hash_job j = {.c = c, .out = out, .sel = sel, .next = 0};
	pthread_mutex_init(&j.mu, NULL);
	if (threads < 1)
		threads = dcr_ncpu();
	if (threads > 64)
		threads = 64;
	pthread_t th[64];
	int started = 0;
	for (int i = 1; i < threads; i++)
		if (!pthread_create(&th[started], NULL, hash_worker, &j))
			started++;
	hash_worker(&j);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&j.mu);
	return 0;
}

void dcr_ckpt_state_from(const struct dcr_ckpt *c, const dcr_digest *dg, dcr_digest *id)
{
	struct dcr_state_entry *ent = dcr_calloc(c->ntensors, sizeof(*ent));
	if (!ent) {
		memset(id, 0, sizeof(*id));
		return;
	}
	for (size_t i = 0; i < c->ntensors; i++) {
		const struct dcr_tensor_info *t = c->tensors[i].info;
		ent[i].name = t->name;
		ent[i].dtype = t->dtype;
		ent[i].ndim = t->ndim;
		ent[i].shape = t->shape;
		ent[i].digest = dg[i];
	}
	dcr_state_id(ent, c->ntensors, id);
	free(ent);
}

int dcr_ckpt_state_id(const struct dcr_ckpt *c, dcr_digest *id,
		      dcr_digest *per_tensor, struct dcr_err *e)
{
	dcr_digest *dg = per_tensor ? per_tensor : dcr_calloc(c->ntensors, sizeof(*dg));
	if (!dg)
		return dcr_err_sys(e, ENOMEM, "%s", c->path);
	dcr_ckpt_digests(c, dg, 0);
	dcr_ckpt_state_from(c, dg, id);
	if (!per_tensor)
		free(dg);
	return 0;
}
