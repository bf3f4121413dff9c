/* store-dir.h - the directory store: objects are files under a directory,
 * written to a temp file, fsync'd, renamed, and the directory fsync'd. */
#ifndef DCR_TRANSPORT_STORE_DIR_H
#define DCR_TRANSPORT_STORE_DIR_H

#include "transport/store-impl.h"

/* For a directory path or file:// URL. */
extern const struct dcr_store_ops store_dir_ops;

#endif
