/* packio.h - packs as files: a directory of entries (each written
 * atomically), or a tar stream (libarchive, ustar); read back in stream
 * order. */
#ifndef DCR_CORE_PACKIO_H
#define DCR_CORE_PACKIO_H

#include "core/file.h"
#include "core/pack.h"
#include "core/summary.h"

/* Pack outputs: a directory (each entry written atomically; before its
 * manifest, the payload files the manifest does not list, left there by
 * another pack, are removed, and a signature unless the entry just before
 * the manifest, on the same thread, wrote it), or a tar stream on an fd
 * (libarchive, ustar). */
struct dcr_pack_dir;
int dcr_pack_dir_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		       struct dcr_err *e); /* ctx: const char *dir */
int dcr_pack_dir_stage(void *ctx, const char *name, const uint8_t *buf, size_t len, void **tok,
		       struct dcr_err *e);
int dcr_pack_dir_commit(void *ctx, void *tok, struct dcr_err *e);
void dcr_pack_dir_drop(void *ctx, void *tok);
/* A pack directory that a failed pack leaves as it was (dcr-pack -o DIR
 * over an older pack there): payload entries are staged (written and
 * fsync'd under temporary names) and renamed into place when the pack's
 * first other entry comes (its signature, manifest or summary, written
 * as dcr_pack_dir_entry writes it) or at dcr_pack_dir_held_finish with
 * ok; without ok the staged ones are removed. A process killed leaves
 * temporary files, which the next manifest written there removes. Set
 * dir, zero the rest; ctx of dcr_pack_dir_held_entry is the struct. */
struct dcr_pack_dir_held {
	const char *dir;
	void **tok;
	size_t n, cap;
};
int dcr_pack_dir_held_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
			    struct dcr_err *e);
int dcr_pack_dir_held_finish(struct dcr_pack_dir_held *h, int ok, struct dcr_err *e);
/* For a resumed pull into a pack directory (ctx: const char *dir): 1 and
 * its digest if payload `index` is already there and checks out, else 0. */
int dcr_pack_dir_have(void *ctx, uint32_t index, dcr_digest *digest);
struct dcr_tar_out;
int dcr_tar_out_open(int fd, struct dcr_tar_out **out, struct dcr_err *e);
int dcr_tar_out_entry(void *ctx, const char *name, const uint8_t *buf, size_t len,
		      struct dcr_err *e);
int dcr_tar_out_begin(void *ctx, const char *name, uint64_t len, struct dcr_err *e);
int dcr_tar_out_data(void *ctx, const uint8_t *buf, size_t len, struct dcr_err *e);
int dcr_tar_out_end(void *ctx, struct dcr_err *e);
int dcr_tar_out_close(struct dcr_tar_out *t, struct dcr_err *e);

/* Reading a pack: a directory or a tar stream; entries in stream order. */
struct dcr_pack_in;
int dcr_pack_in_open_dir(const char *dir, struct dcr_pack_in **out, struct dcr_err *e);
/* A tar stream from fd; head (may be NULL) holds bytes already read from it. */
int dcr_pack_in_open_tar(int fd, const uint8_t *head, size_t head_len, struct dcr_pack_in **out,
			 struct dcr_err *e);
/* 1 and the next entry (name and bytes valid until the next call), 0 at the end. */
int dcr_pack_in_next(struct dcr_pack_in *in, const char **name, const uint8_t **buf,
		     size_t *len, struct dcr_err *e);
/* Take the bytes of the entry dcr_pack_in_next returned last: they stay
 * valid, at the same address, until dcr_blob_free(b). */
void dcr_pack_in_take(struct dcr_pack_in *in, struct dcr_blob *b);
void dcr_pack_in_close(struct dcr_pack_in *in);

/* Inspecting a pack (dcr-pack --list): every entry read, told apart by
 * its name, parsed and checked, and handed to a callback. */
enum dcr_pack_entry_kind {
	DCR_ENTRY_PAYLOAD,
	DCR_ENTRY_MANIFEST,
	DCR_ENTRY_SIGNATURE,
	DCR_ENTRY_SUMMARY, /* a producer's summary (dcr-pack --producer) */
};
struct dcr_pack_entry {
	const char *name;
	size_t len;
	int kind;
	int rc;             /* < 0: the entry did not check out, err says why */
	struct dcr_err err;
	const struct dcr_manifest *manifest;       /* MANIFEST, when rc == 0 */
	const struct dcr_payload *payload;         /* PAYLOAD, when rc == 0 */
	const struct dcr_payload_summary *summary; /* PAYLOAD, when rc == 0 */
	const struct dcr_summary *producer;        /* SUMMARY, when rc == 0 */
	const uint8_t *bytes;                      /* the entry's bytes */
};
/* Walk in, calling fn for each entry in stream order (fn returns nonzero to
 * stop). Returns the number of entries, or a negative code when the stream
 * itself fails (a bad entry is reported to fn, and the walk goes on). An
 * entry that is neither a payload, the manifest nor its signature is a
 * stream error. */
int dcr_pack_walk(struct dcr_pack_in *in, int (*fn)(void *ctx, const struct dcr_pack_entry *en),
		  void *ctx, struct dcr_err *e);

#endif
