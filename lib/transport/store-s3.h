/* store-s3.h - the S3 store (s3://bucket/prefix): SigV4-signed requests
 * to an endpoint or AWS, multipart uploads, ListObjectsV2. */
#ifndef DCR_TRANSPORT_STORE_S3_H
#define DCR_TRANSPORT_STORE_S3_H

#include "transport/store-impl.h"

/* For s3:// URLs. */
extern const struct dcr_store_ops store_s3_ops;

/* One ListObjectsV2 answer (xml, n bytes): the keys that start with full
 * (the store's prefix and the one asked for), less their first strip bytes
 * (the store's prefix), appended to l; a key that is no valid object name
 * is DCR_EFORMAT. *more: the listing goes on, from *token (malloc'd).
 * what names the listing in messages. */
struct dcr_names;
int s3_list_page(const char *xml, size_t n, const char *full, size_t strip, const char *what,
		 struct dcr_names *l, int *more, char **token, struct dcr_err *e);

#endif
