/* plan.h - the plan of an apply: the target's tensors and the file
 * operations, read and checked from a whole delta (or journal), and the
 * receiver's state checked against its base. Internal to libdcr. */
#ifndef DCR_REFIT_PLAN_H
#define DCR_REFIT_PLAN_H

#include "core/checkpoint.h"
#include "core/delta.h"
#include "refit/apply.h"

struct ptensor {
	struct dcr_delta_tensor t;
	int has_done;
	int touched;
	int verified; /* new bytes hashed to the target digest before the commit */
	/* a touched or new tensor of a rebuilt file: the journal's check
	 * writes its new bytes (the current ones, or zeros for a new tensor,
	 * with the overwrites) into the staged file, where its blocks are
	 * reserved, at doff of dfd (stage.c), and its items are not
	 * journaled */
	int direct;
	int dfd;
	uint64_t doff;
	const struct dcr_ckpt_tensor *cur; /* in the receiver, when present */
};

struct ap_prehash;

struct plan {
	struct ptensor *t;
	size_t n, cap;
	char **removed;
	size_t nremoved;
	char **renames, **unlinks;
	size_t nrenames, nunlinks;
	int *dfds;       /* the staged files, open for the direct tensors */
	size_t ndfds;
	dcr_digest base, target;
	uint8_t attempt[16];
	uint64_t nitems, nchanges;
	dcr_digest *alt; /* alternative bases (BASES record, or the manifest) */
	int any_base;    /* a dense copy: fits a receiver in any state */
	/* digests the item source put together as it resolved the items
	 * (refit/prehash.h; the source's), or NULL */
	struct ap_prehash *pre;
	uint64_t prehashed; /* tensors whose digest the check took from it */
	size_t nalt;
	uint64_t nxor;   /* XOR items: none allowed from an alternative base */
};

/* What the steps of one apply share. */
struct ctx {
	struct dcr_receiver *rc;
	const struct dcr_apply_opts *o;
};

/* Where the journal's items come from: each call yields one item, already
 * resolved to an OVERWRITE and encoded (1), or the end (0). */
struct item_src {
	int (*next)(void *ctx, struct plan *p, struct dcr_item *it, struct dcr_err *e);
	void *ctx;
};

void ap_plan_free(struct plan *p);
int ap_push_str(char ***v, size_t *n, char *s);
/* A durable step of an apply: a fault point (core/fault.h). */
void ap_step(struct ctx *x);
/* Read a whole delta (or journal) into a plan, copying it to fd if >= 0. */
int ap_read_plan(struct dcr_source src, const uint8_t *head, size_t head_len, int copy_fd,
		 int journal, const char *what, struct plan *p, struct dcr_err *e);
/* Why the receiver (state cur) is not at the plan's base: DCR_EBASE and a
 * message that says what it is instead. */
int ap_explain_base(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
		    const dcr_digest *cur, struct dcr_err *e);
/* 0 if the receiver at cur may take the plan (its base, one of its
 * alternative bases, or any state for a dense copy), else DCR_EBASE. */
int ap_check_bases(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
		   const dcr_digest *cur, const dcr_digest *head, int xor_seen,
		   struct dcr_err *e);
/* Open the receiver's checkpoint and its current state. */
int ap_current_state(struct dcr_receiver *rc, struct dcr_ckpt **c, dcr_digest *cur,
		     dcr_digest **cur_dg, struct dcr_err *e);

#endif
