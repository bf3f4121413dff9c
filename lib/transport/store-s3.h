/* store-s3.h - the S3 store (s3://bucket/prefix): SigV4-signed requests
 * to an endpoint or AWS, multipart uploads, ListObjectsV2. */
#ifndef DCR_TRANSPORT_STORE_S3_H
#define DCR_TRANSPORT_STORE_S3_H

#include "transport/store-impl.h"

/* For s3:// URLs. */
extern const struct dcr_store_ops store_s3_ops;

#endif
