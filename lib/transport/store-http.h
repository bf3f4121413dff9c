/* store-http.h - the HTTP(S) store: PUT, GET, HEAD and DELETE of
 * BASE/NAME on any server, listing by GET BASE/?prefix= (store.h). */
#ifndef DCR_TRANSPORT_STORE_HTTP_H
#define DCR_TRANSPORT_STORE_HTTP_H

#include "transport/store-impl.h"

/* For http:// and https:// URLs. */
extern const struct dcr_store_ops store_http_ops;

#endif
