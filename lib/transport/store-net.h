/* store-net.h - the HTTP(S) and S3 stores over libcurl (store-net.c). Not
 * part of the API. */
#ifndef DCR_TRANSPORT_STORE_NET_H
#define DCR_TRANSPORT_STORE_NET_H

#include "transport/store-impl.h"

/* For http:// and https:// URLs. */
extern const struct dcr_store_ops store_http_ops;
/* For s3:// URLs. */
extern const struct dcr_store_ops store_s3_ops;

/* Name of the probe objects put_if_absent writes on remote stores; lists
 * skip them. */
#define DCR_CAS_PROBE ".dcr-cas-probe-"

#endif
