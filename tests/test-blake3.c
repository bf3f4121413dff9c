/* test-blake3.c - BLAKE3 (lib/blake3.c) and payload digests (lib/pack.c).
 *
 * BLAKE3 against values from an independent implementation (b3sum 1.2.0,
 * the Rust crate, on the inputs of BLAKE3's published test vectors: byte i
 * is i % 251), in one shot and fed in every way the incremental hasher
 * distinguishes (odd pieces, whole chunks, 64 KiB steps, byte by byte),
 * with AVX2 and with the portable code; and against the b3sum program
 * itself on random data when it is installed (scripts/install-deps
 * installs it). Then the payload digest: the header's flag picks BLAKE3
 * or SHA-256, one shot and streaming agree, a flipped flag or an unknown
 * one is refused. */
#include "config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"

static const struct {
	size_t len;
	const char *hex;
} vectors[] = {
	{0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
	{1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
	{1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11"},
	{1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7"},
	{1025, "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444"},
	{2048, "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a"},
	{2049, "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030"},
	{3072, "b98cb0ff3623be03326b373de6b9095218513e64f1ee2edd2525c7ad1e5cffd2"},
	{3073, "7124b49501012f81cc7f11ca069ec9226cecb8a2c850cfe644e327d22d3e1cd3"},
	{4096, "015094013f57a5277b59d8475c0501042c0b642e531b0a1c8f58d2163229e969"},
	{4097, "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995"},
	{5120, "9cadc15fed8b5d854562b26a9536d9707cadeda9b143978f319ab34230535833"},
	{5121, "628bd2cb2004694adaab7bbd778a25df25c47b9d4155a55f8fbd79f2fe154cff"},
	{6144, "3e2e5b74e048f3add6d21faab3f83aa44d3b2278afb83b80b3c35164ebeca205"},
	{6145, "f1323a8631446cc50536a9f705ee5cb619424d46887f3c376c695b70e0f0507f"},
	{7168, "61da957ec2499a95d6b8023e2b0e604ec7f6b50e80a9678b89d2628e99ada77a"},
	{7169, "a003fc7a51754a9b3c7fae0367ab3d782dccf28855a03d435f8cfe74605e7817"},
	{8192, "aae792484c8efe4f19e2ca7d371d8c467ffb10748d8a5a1ae579948f718a2a63"},
	{8193, "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b"},
	{16384, "f875d6646de28985646f34ee13be9a576fd515f76b5b0a26bb324735041ddde4"},
	{31744, "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47"},
	{102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"},
};

/* a small linear congruential generator: reproducible test data */
static unsigned lcg(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed;
}

/* n pseudo-random bytes, malloc'd */
static uint8_t *random_bytes(size_t n, unsigned seed)
{
	uint8_t *p = malloc(n);
	cr_assert_not_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(lcg(&seed) >> 16);
	return p;
}

/* ways to feed the incremental hasher */
enum { ONE_SHOT, ODD_PIECES, WHOLE_CHUNKS, STEPS_64K, BYTES, NFEEDS };

static void hash_fed(const uint8_t *p, size_t n, int how, unsigned seed, dcr_digest *out)
{
	if (how == ONE_SHOT) {
		dcr_blake3(p, n, out);
		return;
	}
	struct dcr_blake3 h;
	dcr_blake3_init(&h);
	for (size_t off = 0; off < n;) {
		size_t k;
		unsigned r = lcg(&seed) >> 8;
		switch (how) {
		case ODD_PIECES: k = 1 + r % 40000; break;
		case WHOLE_CHUNKS: k = 1024 * (1 + r % 70); break;
		case STEPS_64K: k = 65536; break;
		default: k = 1; break;
		}
		if (k > n - off)
			k = n - off;
		dcr_blake3_update(&h, p + off, k);
		off += k;
	}
	dcr_blake3_final(&h, out);
}

static void check_all_ways(const uint8_t *p, size_t n, const char *want_hex)
{
	char hex[65];
	/* AVX-512 (16 lanes), AVX-512VL (8), AVX2, portable (as the CPU has them) */
	for (int simd = 3; simd >= 0; simd--) {
		int was = dcr_blake3_simd(simd);
		for (int how = 0; how < NFEEDS; how++) {
			if (how == BYTES && n > 20000)
				continue;
			dcr_digest d;
			hash_fed(p, n, how, (unsigned)n, &d);
			dcr_hex(d.b, 32, hex);
			cr_expect_str_eq(hex, want_hex, "%zu bytes, feed %d, simd %d", n, how, simd);
		}
		dcr_blake3_simd(was);
	}
}

Test(blake3, published_inputs_every_feed)
{
	uint8_t *p = malloc(102400);
	cr_assert_not_null(p);
	for (size_t i = 0; i < 102400; i++)
		p[i] = (uint8_t)(i % 251);
	for (size_t v = 0; v < sizeof(vectors) / sizeof(vectors[0]); v++)
		check_all_ways(p, vectors[v].len, vectors[v].hex);
	free(p);
}

/* Random lengths up to 3 MiB against the b3sum program, when installed:
 * lengths that straddle every size of subtree update() hashes at once. */
Test(blake3, random_data_against_b3sum)
{
	if (system("b3sum --version >/dev/null 2>&1")) {
		cr_log_warn("b3sum not installed: checked against the stored values only");
		return;
	}
	char path[] = "/tmp/dcr-test-blake3.XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	size_t cap = 3u << 20;
	uint8_t *p = random_bytes(cap, 7);
	static const size_t fixed[] = {64, 65, 1024 * 127, 1024 * 128, 1024 * 128 + 1, 1024 * 129,
				       1024 * 255 + 3, 1u << 20, (1u << 20) + 1024, 3u << 20};
	for (int t = 0; t < 26; t++) {
		size_t n = t < 10 ? fixed[t] : (size_t)(rand() % (int)cap);
		cr_assert_eq(ftruncate(fd, 0), 0);
		cr_assert_eq(pwrite(fd, p, n, 0), (ssize_t)n);
		char cmd[128], want[80] = "";
		snprintf(cmd, sizeof(cmd), "b3sum --no-names %s", path);
		FILE *f = popen(cmd, "r");
		cr_assert_not_null(f);
		cr_assert_not_null(fgets(want, sizeof(want), f));
		pclose(f);
		want[64] = '\0';
		check_all_ways(p, n, want);
	}
	close(fd);
	unlink(path);
	free(p);
}

/* ---- payload digests ---- */

static void build(enum dcr_payload_digest_alg alg, struct dcr_buf *out, dcr_digest *d)
{
	static const uint8_t raw[3000] = {1, 2, 3};
	dcr_digest base = {{9}};
	uint8_t attempt[16] = {4};
	struct dcr_err e = {0};
	cr_assert_eq(dcr_payload_build(&base, attempt, 5, raw, sizeof(raw), alg, out, d, NULL, &e), 0,
		     "%s", e.msg);
}

Test(payload, flag_names_the_digest)
{
	for (int alg = 0; alg < 2; alg++) {
		struct dcr_buf b = {0};
		dcr_digest d, want;
		build(alg, &b, &d);
		cr_assert_eq(get_le32(b.p + 12), alg == DCR_PDIGEST_BLAKE3 ? DCR_PAYLOAD_BLAKE3 : 0u);
		if (alg == DCR_PDIGEST_BLAKE3)
			dcr_blake3(b.p, b.len - 32, &want);
		else
			dcr_sha256(b.p, b.len - 32, &want);
		cr_assert_eq(memcmp(d.b, want.b, 32), 0);
		cr_assert_eq(memcmp(b.p + b.len - 32, want.b, 32), 0, "the trailer is the digest");
		struct dcr_payload pl;
		struct dcr_err e = {0};
		cr_assert_eq(dcr_payload_check(b.p, b.len, "p", &pl, &e), 0, "%s", e.msg);
		cr_assert_eq(memcmp(pl.digest.b, want.b, 32), 0);
		dcr_buf_free(&b);
	}
}

Test(payload, streaming_equals_one_shot)
{
	for (int alg = 0; alg < 2; alg++) {
		struct dcr_buf b = {0};
		dcr_digest d;
		build(alg, &b, &d);
		size_t n = b.len - 32;
		/* the 16 header bytes that name the digest in pieces of 1, 3, 7,
		 * ..., then the rest; and everything at once */
		for (size_t step = 1; step <= n; step = step * 2 + 1) {
			struct dcr_payload_hash h;
			dcr_digest got;
			dcr_payload_hash_init(&h);
			for (size_t off = 0; off < n; off += step)
				dcr_payload_hash_update(&h, b.p + off, off + step > n ? n - off : step);
			cr_assert_eq(dcr_payload_hash_final(&h, &got), 0);
			cr_assert_eq(memcmp(got.b, d.b, 32), 0, "alg %d, pieces of %zu", alg, step);
		}
		dcr_buf_free(&b);
	}
	/* under 16 bytes is no payload: some digest, no crash */
	struct dcr_payload_hash h;
	dcr_digest got;
	dcr_payload_hash_init(&h);
	dcr_payload_hash_update(&h, "short", 5);
	cr_assert_eq(dcr_payload_hash_final(&h, &got), 0);
}

Test(payload, flipped_or_unknown_flag_refused)
{
	struct dcr_buf b = {0};
	dcr_digest d;
	struct dcr_payload pl;
	struct dcr_err e = {0};
	build(DCR_PDIGEST_BLAKE3, &b, &d);
	/* the same bytes read as a SHA-256 payload: the trailer no longer fits */
	put_le32(b.p + 12, 0);
	cr_assert_eq(dcr_payload_check(b.p, b.len, "p", &pl, &e), DCR_EDIGEST);
	cr_assert(strstr(e.msg, "checksum mismatch"), "%s", e.msg);
	put_le32(b.p + 12, DCR_PAYLOAD_BLAKE3 | 2);
	cr_assert_eq(dcr_payload_check(b.p, b.len, "p", &pl, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "unknown payload flags 0x2"), "%s", e.msg);
	put_le32(b.p + 12, DCR_PAYLOAD_BLAKE3);
	cr_assert_eq(dcr_payload_check(b.p, b.len, "p", &pl, &e), 0, "%s", e.msg);
	cr_assert_gt(b.len, DCR_PAYLOAD_HDR_LEN + 32 + 1);
	b.p[DCR_PAYLOAD_HDR_LEN + 1] ^= 1; /* in the body */
	cr_assert_eq(dcr_payload_check(b.p, b.len, "p", &pl, &e), DCR_EDIGEST);
	dcr_buf_free(&b);
}

/* ---- pieces ---- */

/* Piece CVs add up to the root for every way the last piece can end, and
 * each piece's CV is what a hasher started at its chunk gives. */
Test(blake3, pieces_add_up_to_the_root)
{
	size_t cap = (5u << 20) + 4096;
	uint8_t *p = malloc(cap);
	cr_assert_not_null(p);
	for (size_t i = 0; i < cap; i++)
		p[i] = (uint8_t)(i * 2654435761u >> 11);
	static const unsigned logs[] = {10, 12, 20};
	for (size_t l = 0; l < 3; l++) {
		size_t piece = (size_t)1 << logs[l];
		size_t lens[] = {0, 1, piece - 1, piece, piece + 1, 2 * piece, 2 * piece + 7, 3 * piece,
				 5 * piece - 1, 7 * piece + 1024, 8 * piece, 9 * piece + 3};
		for (size_t t = 0; t < sizeof(lens) / sizeof(lens[0]); t++) {
			size_t n = lens[t];
			if (n > cap)
				continue;
			size_t np = dcr_blake3_npieces(n, logs[l]);
			cr_assert_eq(np, n ? (n + piece - 1) / piece : 1);
			uint8_t(*cv)[32] = malloc(np * 32);
			dcr_digest root, want, again;
			dcr_blake3_pieces(p, n, logs[l], cv, &root);
			dcr_blake3(p, n, &want);
			cr_expect_eq(memcmp(root.b, want.b, 32), 0, "log2 %u, %zu bytes", logs[l], n);
			dcr_blake3_root_of_pieces((const uint8_t(*)[32])cv, np, &again);
			cr_expect_eq(memcmp(again.b, want.b, 32), 0, "log2 %u, %zu bytes", logs[l], n);
			if (np > 1) { /* a piece fed in odd pieces gives the same CV */
				size_t i = np - 1, off = i * piece;
				struct dcr_blake3 h;
				uint8_t c[32];
				dcr_blake3_init_at(&h, off / 1024);
				for (size_t o = off; o < n; o += 777)
					dcr_blake3_update(&h, p + o, n - o < 777 ? n - o : 777);
				dcr_blake3_final_node(&h, c);
				cr_expect_eq(memcmp(c, cv[i], 32), 0, "last piece of %zu bytes", n);
				/* and a changed byte changes that piece's CV only */
				p[off] ^= 1;
				dcr_blake3_init_at(&h, off / 1024);
				dcr_blake3_update(&h, p + off, n - off);
				dcr_blake3_final_node(&h, c);
				p[off] ^= 1;
				cr_expect_neq(memcmp(c, cv[i], 32), 0);
			}
			free(cv);
		}
	}
	free(p);
}

/* ---- manifests with a piece table ---- */

/* Two payloads (one piece; several), their manifest parses back with the
 * same pieces; hostile variants are refused: a piece off by one bit, a
 * table cut short, a size near 2^64. Each tampered manifest gets a good
 * SHA-256 trailer, as an attacker who can write the store would give it. */
static void reseal(struct dcr_buf *b)
{
	dcr_digest d;
	dcr_sha256(b->p, b->len - 32, &d);
	memcpy(b->p + b->len - 32, d.b, 32);
}

Test(manifest, piece_table)
{
	struct dcr_manifest m = {0}, back;
	struct dcr_buf img[2] = {{0}}, pieces = {0}, man = {0};
	dcr_digest base = {{1}}, dg[2];
	uint8_t attempt[16] = {2};
	struct dcr_err e = {0};
	size_t big = 3u << 20;
	uint8_t *raw = random_bytes(big, 1);
	cr_assert_eq(dcr_payload_build(&base, attempt, 0, raw, 5000, DCR_PDIGEST_BLAKE3, &img[0],
					&dg[0], &pieces, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_payload_build(&base, attempt, 1, raw, big, DCR_PDIGEST_BLAKE3, &img[1],
					&dg[1], &pieces, &e), 0, "%s", e.msg);
	uint64_t psize[2] = {img[0].len, img[1].len};
	m.base = base;
	memcpy(m.attempt, attempt, 16);
	m.npayloads = 2;
	m.psize = psize;
	m.pdigest = dg;
	dcr_state_id(NULL, 0, &m.target);
	m.pieces = (uint8_t(*)[32])pieces.p;
	m.npieces = pieces.len / 32;
	m.piece_log2 = DCR_PIECE_LOG2;
	cr_assert_eq(m.npieces, 1 + 4, "one piece, then 3 MiB and change: four");
	cr_assert_eq(dcr_manifest_build(&m, &man, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_manifest_parse(man.p, man.len, "m", &back, &e), 0, "%s", e.msg);
	cr_assert_eq(back.npieces, m.npieces);
	cr_assert_eq(back.piece0[1], 1);
	cr_assert_eq(memcmp(back.pieces, m.pieces, m.npieces * 32), 0);

	/* the head alone (GC's ranged read of a dense copy): what the whole
	 * parse gives, from its first bytes; fewer, another magic, unknown
	 * flags or another version are refused */
	struct dcr_manifest h;
	cr_assert_eq(dcr_manifest_head(man.p, DCR_MANIFEST_HEAD_LEN, "m", &h, &e), 0, "%s", e.msg);
	cr_assert(!memcmp(&h.target, &back.target, 32) && !memcmp(&h.base, &back.base, 32) &&
		  !memcmp(h.attempt, back.attempt, 16) && h.dense == back.dense && !h.npayloads);
	cr_assert_eq(dcr_manifest_head(man.p, DCR_MANIFEST_HEAD_LEN - 1, "m", &h, &e), DCR_EFORMAT);
	uint8_t hb[DCR_MANIFEST_HEAD_LEN];
	memcpy(hb, man.p, sizeof(hb));
	hb[12] |= 0x80; /* flag 128 */
	cr_assert_eq(dcr_manifest_head(hb, sizeof(hb), "m", &h, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "unknown manifest flags"), "%s", e.msg);
	memcpy(hb, man.p, sizeof(hb));
	hb[8] = 9; /* version 9 */
	cr_assert_eq(dcr_manifest_head(hb, sizeof(hb), "m", &h, &e), DCR_EFORMAT);
	hb[8] = man.p[8];
	hb[0] ^= 1;
	cr_assert_eq(dcr_manifest_head(hb, sizeof(hb), "m", &h, &e), DCR_EFORMAT);

	/* the streaming check (dcr-pull's parts, a relay's windows): every
	 * piece reported once, in order, whatever the slices; from a piece's
	 * start on; a flipped byte fails its piece alone */
	size_t slices[] = {1, 1000, 4096, 65537, (size_t)1 << 20};
	for (int flip = 0; flip < 2; flip++)
		for (size_t si = 0; si < sizeof(slices) / sizeof(slices[0]); si++)
			for (uint32_t i = 0; i < 2; i++) {
				uint8_t *buf = img[i].p;
				uint64_t from = i == 1 && si == 4 ? 2ull << DCR_PIECE_LOG2 : 0;
				uint64_t bad = (3ull << DCR_PIECE_LOG2 >> 1) + 7; /* in piece 1 */
				if (flip && i == 1)
					buf[bad] ^= 0x40;
				struct dcr_piece_check pc;
				dcr_piece_check_init(&pc, &back, i, from);
				cr_assert_eq(pc.end, img[i].len - 32);
				long want = (long)(from >> DCR_PIECE_LOG2);
				const uint8_t *q = buf + from;
				size_t left = (size_t)(pc.end - from);
				while (left) {
					size_t n = left < slices[si] ? left : slices[si];
					left -= n;
					while (n) {
						int ok = -1;
						long k = dcr_piece_check_feed(&pc, &q, &n, &ok);
						if (k < 0)
							continue;
						cr_assert_eq(k, want, "payload %u: piece %ld, want %ld", i, k,
							     want);
						cr_assert_eq(ok, !(flip && i == 1 && k == 1),
							     "payload %u piece %ld, slices of %zu, flip %d", i,
							     k, slices[si], flip);
						want++;
					}
				}
				cr_assert_eq(want, (long)(back.piece0[i + 1] - back.piece0[i]));
				cr_assert_eq(pc.pos, pc.end);
				size_t zero = 0;
				int ok;
				cr_assert_eq(dcr_piece_check_feed(&pc, &q, &zero, &ok), -1);
				if (flip && i == 1)
					buf[bad] ^= 0x40;
			}
	dcr_manifest_release(&back);

	/* a piece CV one bit off: its payload's pieces no longer add up */
	size_t table = man.len - 32 - m.npieces * 32;
	man.p[table + 2 * 32] ^= 1;
	reseal(&man);
	cr_assert_eq(dcr_manifest_parse(man.p, man.len, "m", &back, &e), DCR_EDIGEST);
	cr_assert(strstr(e.msg, "pieces of payload 1 do not add up"), "%s", e.msg);
	man.p[table + 2 * 32] ^= 1;
	/* the table cut short by one CV */
	struct dcr_buf cut = {0};
	dcr_buf_add(&cut, man.p, table + (m.npieces - 1) * 32);
	dcr_buf_add(&cut, man.p + man.len - 32, 32);
	reseal(&cut);
	cr_assert_neq(dcr_manifest_parse(cut.p, cut.len, "m", &back, &e), 0);
	/* payload 1 said to be 2^64 - 1 bytes: no wrap-around, refused */
	size_t at = 8 + 8 + 32 + 32 + 16 + 4 + 40;
	put_le64(man.p + at, UINT64_MAX);
	reseal(&man);
	cr_assert_eq(dcr_manifest_parse(man.p, man.len, "m", &back, &e), DCR_EFORMAT);
	cr_assert(strstr(e.msg, "payload 1 is"), "%s", e.msg);
	dcr_buf_free(&cut);
	dcr_buf_free(&man);
	dcr_buf_free(&pieces);
	dcr_buf_free(&img[0]);
	dcr_buf_free(&img[1]);
	free(raw);
}
