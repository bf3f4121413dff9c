/* manifest.h - a pack's manifest (see dcr-format-pack(5)); written last,
 * it is what makes a delta whole.
 *
 * manifest = magic[8] "\x89DCRM\r\n\x1a", le32 version, le32 flags,
 *            base_id[32], target_id[32], attempt[16],
 *            le32 npayloads, npayloads x (le64 size, digest[32]),
 *            le32 ntensors, ntensors x (TENSOR body as a varint-length
 *            string, digest[32]), le32 nremoved, nremoved x name,
 *            le64 nitems, le64 nchanges,
 *            [flags & 1: le32 nalt, nalt x alternative base id[32]]
 *            [flags & 4: le32 log2, every payload's piece CVs[32]]
 *            [flags & 8: le64 version, policy as a varint-length string]
 *            [flags & 16: npayloads x le32 index, strictly increasing]
 *            trailer SHA-256 of all before.
 *   Manifest flag 1 (DCR_MANIFEST_BASES): the delta is overwrite-only and
 *   also applies to receivers at the alternative bases (see
 *   dcr-format-delta(5), BASES); flag 2 (DCR_MANIFEST_DENSE): a dense
 *   copy; flag 4 (DCR_MANIFEST_PIECES): the piece table; flag 8
 *   (DCR_MANIFEST_VERSION): the version and policy; flag 16
 *   (DCR_MANIFEST_INDEX): the payloads' indices (a pack of several
 *   producers, whose payloads are named by producer: dcr_producer_index),
 *   else payload i has index i. Readers refuse flags they do not know.
 */
#ifndef DCR_CORE_MANIFEST_H
#define DCR_CORE_MANIFEST_H

#include "core/blake3.h"
#include "core/delta.h"
#include "core/payload.h"

#define DCR_MANIFEST_MAGIC "\x89" "DCRM\r\n\x1a"
#define DCR_MANIFEST_NAME "manifest.dcrm"
#define DCR_MANIFEST_MAX (1u << 30)

struct dcr_manifest_tensor {
	struct dcr_delta_tensor t; /* digest filled */
};

struct dcr_manifest {
	dcr_digest base, target;
	uint8_t attempt[16];
	uint32_t npayloads;
	uint64_t *psize;
	dcr_digest *pdigest;
	uint32_t ntensors;
	struct dcr_delta_tensor *tensors; /* sorted by name, digests set */
	uint32_t nremoved;
	char **removed;
	uint64_t nitems, nchanges;
	uint32_t nalt;     /* alternative bases (manifest flag 1) */
	int dense;         /* a dense copy (manifest flag 2): fits any receiver */
	dcr_digest *alt;
	/* manifest flag 4: the BLAKE3 CVs of every payload's pieces (see
	 * dcr_blake3_pieces), so that a receiver can check a payload piece by
	 * piece as it arrives; payload i's are pieces[piece0[i] ...] */
	unsigned piece_log2;
	uint8_t (*pieces)[32];
	size_t *piece0;
	size_t npieces;
	/* manifest flag 8: the policy and the version this pack reaches, what
	 * a signature over the manifest vouches for (dcr-pack --version,
	 * --policy); policy may be "" */
	int have_version;
	uint64_t version;
	char *policy;
	/* manifest flag 16: payload i's index, its entry name and header
	 * index (NULL: i itself); strictly increasing */
	uint32_t *pindex;
};
enum {
	DCR_MANIFEST_BASES = 1,
	DCR_MANIFEST_DENSE = 2,
	DCR_MANIFEST_PIECES = 4,
	DCR_MANIFEST_VERSION = 8,
	DCR_MANIFEST_INDEX = 16,
};
#define DCR_POLICY_MAX 255 /* bytes of a policy name */
/* Whether the n bytes at s are a policy name: 1 to DCR_POLICY_MAX
 * printable bytes, no blank, no '/' (one name component). */
int dcr_policy_name_ok(const char *s, size_t n);
/* The detached signature of a signed pack (core/sign.h), beside the manifest. */
#define DCR_MANIFEST_SIG_NAME "manifest.dcrm.sig"
/* Pieces of payload i (covering all but its trailer). */
static inline size_t dcr_manifest_npieces(const struct dcr_manifest *m, uint32_t i)
{
	return dcr_blake3_npieces(m->psize[i] - 32, m->piece_log2);
}

/* The index (entry name, header index) of the manifest's payload i. */
static inline uint32_t dcr_manifest_index(const struct dcr_manifest *m, uint32_t i)
{
	return m->pindex ? m->pindex[i] : i;
}
/* The position of the payload with index idx in the manifest, or -1. */
int64_t dcr_manifest_find(const struct dcr_manifest *m, uint32_t idx);

/* Checking a payload piece by piece as its bytes stream in (dcr-pull's
 * parts, a relay's windows): bytes [pos, end) of the manifest's payload
 * at position i, end where its trailer starts; each whole piece's BLAKE3
 * CV against the manifest's. */
struct dcr_piece_check {
	const struct dcr_manifest *m;
	uint32_t i;
	uint64_t pos, end; /* the next byte to hash, the end of the hashed bytes */
	int open;          /* h holds the start of the piece at pos */
	struct dcr_blake3 h;
};
/* From byte pos of payload i (a piece's start, or pos >= the trailer's). */
void dcr_piece_check_init(struct dcr_piece_check *c, const struct dcr_manifest *m, uint32_t i,
			  uint64_t pos);
/* Hashes the bytes at *p, *n of them, up to the end of the piece at
 * c->pos, and moves *p and *n past what it took. Returns the number of
 * the piece they finish, *ok saying whether its CV is the manifest's, or
 * -1 when they finish none (all taken, or the hashed bytes' end). */
long dcr_piece_check_feed(struct dcr_piece_check *c, const uint8_t **p, size_t *n, int *ok);

int dcr_manifest_build(const struct dcr_manifest *m, struct dcr_buf *out, struct dcr_err *e);
int dcr_manifest_parse(const uint8_t *buf, size_t len, const char *what, struct dcr_manifest *m,
		       struct dcr_err *e);
/* The head alone (its first DCR_MANIFEST_HEAD_LEN bytes: magic, version,
 * flags, base, target, attempt) into m's base, target, attempt and dense,
 * the rest of m zero (nothing to release): what a ranged read of a large
 * manifest tells without its trailer, so unchecked by it; checked whole
 * by dcr_manifest_parse wherever the pack is used. */
#define DCR_MANIFEST_HEAD_LEN 96
int dcr_manifest_head(const uint8_t *buf, size_t len, const char *what, struct dcr_manifest *m,
		      struct dcr_err *e);
void dcr_manifest_release(struct dcr_manifest *m);

#endif
