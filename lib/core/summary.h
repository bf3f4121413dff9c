/* summary.h - a producer's summary (see dcr-format-pack(5), PRODUCERS):
 * what one of the N training ranks that make a pack together put in the
 * store, and what joins the N summaries into the pack's manifest.
 *
 * summary = magic[8] "\x89DCRS\r\n\x1a", le32 version (1), le32 flags (0),
 *           base_id[32], attempt[16], le32 producer, le32 nproducers,
 *           le32 ncanon, canon_id[32] (the whole pack's tensors),
 *           le32 npayloads, npayloads x (le32 index, le64 size, digest[32]),
 *           le32 piece_log2 (0: none), every payload's piece CVs[32],
 *           le32 ntensors, ntensors x (TENSOR body as a varint-length
 *           string, le32 nparts, nparts x digest part),
 *           le64 nitems, le64 nchanges,
 *           trailer BLAKE3 of all before.
 * A digest part is as dcr-format-delta(5) puts it on the wire
 * (dcr_blake3_part_encode): the producer's share of the tensor's stripe
 * stream, the elements it is responsible for (a replicated element by its
 * lowest holder). Producer R's payloads have the indices R * 10000 + j,
 * j = 0, 1, ...: payload-0R000j.dcrp, named by producer, so N producers
 * write the same pack without talking to each other.
 */
#ifndef DCR_CORE_SUMMARY_H
#define DCR_CORE_SUMMARY_H

#include "core/manifest.h"
#include "core/state.h"

#define DCR_SUMMARY_MAGIC "\x89" "DCRS\r\n\x1a"
#define DCR_SUMMARY_VERSION 1
#define DCR_SUMMARY_HDR_LEN (8 + 4 + 4 + 32 + 16 + 4 + 4 + 4 + 32)
#define DCR_SUMMARY_MAX (1u << 30) /* bytes of a summary, at most */
#define DCR_PRODUCERS_MAX 1024 /* indices stay below 2^24 */
#define DCR_PRODUCER_STRIDE 10000u /* payload indices per producer */

static inline uint32_t dcr_producer_index(uint32_t producer, uint32_t j)
{
	return producer * DCR_PRODUCER_STRIDE + j;
}

struct dcr_summary_tensor {
	struct dcr_delta_tensor t;
	struct dcr_parts parts; /* of its stripe stream, in any order */
};

struct dcr_summary {
	dcr_digest base;
	uint8_t attempt[16];
	uint32_t producer, nproducers;
	uint32_t ncanon;  /* tensors of the whole pack, every producer's */
	dcr_digest canon; /* their set id (dcr_tensor_set_id) */
	uint32_t npayloads;
	uint32_t *pindex; /* dcr_producer_index(producer, i) */
	uint64_t *psize;
	dcr_digest *pdigest;
	unsigned piece_log2;  /* 0: no piece CVs (SHA-256 payloads) */
	uint8_t (*pieces)[32]; /* every payload's, in order */
	size_t npieces;
	uint32_t ntensors;
	struct dcr_summary_tensor *tensors; /* sorted by name */
	uint64_t nitems, nchanges;
};

/* The id of a set of tensors (names, dtypes, shapes; entries sorted by
 * name, digests ignored): BLAKE3 of "dcr-tensors-v1\n" and the state id's
 * entries without the digests. */
void dcr_tensor_set_id(const struct dcr_state_entry *ent, size_t n, dcr_digest *out);

/* summary-NNNNNN.dcrs, the producer in decimal (6+ digits). */
char *dcr_summary_name(uint32_t producer);
/* 1 if name is a summary entry name (producer in *producer), else 0. */
int dcr_summary_name_parse(const char *name, uint32_t *producer);

int dcr_summary_build(const struct dcr_summary *s, struct dcr_buf *out, struct dcr_err *e);
/* Check and parse a summary (hostile input: every count is bounded by the
 * bytes that are there, the whole by DCR_SUMMARY_MAX). */
int dcr_summary_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_summary *s,
		      struct dcr_err *e);
void dcr_summary_release(struct dcr_summary *s);
/* 1 if a and b are the same producer's share of the same step: the same
 * base, producer and producers, tensor set, and tensors with the same
 * digest parts (in any order); the attempt, the payloads and how the
 * changes were cut into them may differ (a step run again after its
 * commit, dcr-push(1)). Else 0. */
int dcr_summary_same_share(const struct dcr_summary *a, const struct dcr_summary *b);

/* The manifest of the pack that the summaries of all n producers make
 * (v[r] is producer r's; names[r] names it in messages): one delta (base,
 * attempt, n), every tensor declared alike, every canonical element of
 * every tensor claimed by exactly one producer; the target digests joined
 * from the parts and the target state id from them. DCR_EFORMAT with a
 * message that names the producers and the element, else 0 and *m
 * (dcr_manifest_release it). */
int dcr_summaries_join(const struct dcr_summary *v, const char *const *names, uint32_t n,
		       struct dcr_manifest *m, struct dcr_err *e);

#endif
