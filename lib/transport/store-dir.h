/* store-dir.h - the directory store: objects are files under a directory,
 * written to a temp file, fsync'd, renamed, and the directory fsync'd. */
#ifndef DCR_TRANSPORT_STORE_DIR_H
#define DCR_TRANSPORT_STORE_DIR_H

#include "transport/store-impl.h"

/* For a directory path or file:// URL. */
extern const struct dcr_store_ops store_dir_ops;
/* 1 when s's directory (its root, as opened) is not a directory that
 * exists: dcr_store_dir_missing (store.h). */
int store_dir_missing(const struct dcr_store *s);

#endif
