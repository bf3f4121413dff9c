/* sigv4.h - AWS Signature Version 4: the canonical request, the string to
 * sign and the Authorization header of one S3 request. */
#ifndef DCR_TRANSPORT_SIGV4_H
#define DCR_TRANSPORT_SIGV4_H

#include <stddef.h>

struct dcr_sigv4_header {
	const char *name;   /* any case; signed lowercased */
	const char *value;  /* trimmed, inner space runs collapsed */
};

struct dcr_sigv4 {
	const char *method;
	const char *uri;        /* canonical URI: the path as sent, %-encoded */
	const char *query;      /* query string as sent (no '?'), or NULL; its
				   pairs are decoded, re-encoded and sorted */
	const struct dcr_sigv4_header *headers; /* the signed headers */
	size_t nheaders;
	const char *payload_hash; /* lowercase hex SHA-256 or UNSIGNED-PAYLOAD */
	const char *amz_date;   /* YYYYMMDDTHHMMSSZ */
	const char *region, *service, *access_key, *secret_key;
};

struct dcr_sigv4_out {
	char *canonical_request;
	char *string_to_sign;
	char signature[65];
	char *authorization;    /* the Authorization header's value */
};

int dcr_sigv4_sign(const struct dcr_sigv4 *in, struct dcr_sigv4_out *out);
void dcr_sigv4_out_free(struct dcr_sigv4_out *o);
/* AWS URI encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XX (uppercase);
 * '/' kept when keep_slash. Returns malloc'd string or NULL. */
char *dcr_uri_encode(const char *s, size_t n, int keep_slash);

#endif
