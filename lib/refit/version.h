/* version.h - policy versions (0, 1, 2, ...) and the names that carry
 * them: "v42", and packs or deltas named after the version they reach. */
#ifndef DCR_REFIT_VERSION_H
#define DCR_REFIT_VERSION_H

#include <stddef.h>
#include <stdint.h>

/* "v42" (n bytes of s) -> 42: 0, or -1 unless s is "vN" (decimal, no sign,
 * no leading zeros but "v0", at most 2^64 - 1). */
int dcr_version_parse(const char *s, size_t n, uint64_t *v);
/* The version a pack or delta reaches, from its path when its last
 * component is vN, vN.tar, vN.delta or vN.dcrd: 0, or -1 if it is not. */
int dcr_version_from_name(const char *path, uint64_t *v);
/* The length of the n bytes of s without the ".dense" a dense copy's name
 * ends with (NAME.dense, NAME not empty; vV.dense of version V), or n
 * where s does not end so. */
size_t dcr_dense_stem(const char *s, size_t n);

#endif
