/* record.h - the small text records of the commit protocol: a magic line
 * ("dcr-head 2"), then "key value" lines. Internal to libdcr. */
#ifndef DCR_REFIT_RECORD_H
#define DCR_REFIT_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "core/digest.h"
#include "core/error.h"
#include "core/fault.h"

/* 32 hex digits into 16 bytes; 0 or -1. */
int kv_attempt(const char *s, uint8_t a[16]);
/* Replace path atomically with text (temp file, fsync, rename, fsync the
 * directory), a fault point before each durable action. */
int kv_write(const char *path, const char *text, struct dcr_fault *f, struct dcr_err *e);
/* Read a small key-value file whose first line is magic into *buf
 * (malloc'd, NUL-terminated). 1 if the file does not exist. */
int kv_read(const char *path, const char *magic, char **buf, struct dcr_err *e);
/* The same without the first line checked: *len bytes (a NUL after). */
int kv_read_any(const char *path, char **buf, size_t *len, struct dcr_err *e);
/* 1 if buf's first line is magic (and it holds no NUL), else 0. */
int kv_is(const char *buf, size_t len, const char *magic);
/* The value of "key " in buf into out (at most n - 1 bytes); 0 or -1. */
int kv_get(const char *buf, const char *key, char *out, size_t n);
int kv_u64(const char *buf, const char *key, uint64_t *v);
int kv_digest(const char *buf, const char *key, dcr_digest *d);

#endif
