/* version.c - policy versions and the names that carry them. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "refit/version.h"

int dcr_version_parse(const char *s, size_t n, uint64_t *v)
{
	if (n < 2 || s[0] != 'v' || (s[1] == '0' && n > 2) || n > 21)
		return -1;
	uint64_t x = 0;
	for (size_t i = 1; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

size_t dcr_dense_stem(const char *s, size_t n)
{
	return n > 6 && !memcmp(s + n - 6, ".dense", 6) ? n - 6 : n;
}

int dcr_version_from_name(const char *path, uint64_t *v)
{
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	const char *b = path;
	for (size_t i = 0; i + 1 < n; i++)
		if (path[i] == '/')
			b = path + i + 1;
	size_t bl = (size_t)(path + n - b);
	static const char *const ext[] = {"", ".tar", ".delta", ".dcrd"};
	for (size_t k = 0; k < sizeof(ext) / sizeof(ext[0]); k++) {
		size_t el = strlen(ext[k]);
		if (bl > el && !strncmp(b + bl - el, ext[k], el) && !dcr_version_parse(b, bl - el, v))
			return 0;
	}
	return -1;
}
