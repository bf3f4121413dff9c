/* apply-int.h - what apply.c, journal.c and apply-pack.c share: the plan of
 * an apply (the target's tensors and the file operations) and the steps
 * every apply goes through. Internal to lib/. */
#ifndef DCR_APPLY_INT_H
#define DCR_APPLY_INT_H

#include "checkpoint.h"
#include "pack.h"
#include "receiver.h"

struct ptensor {
	struct dcr_delta_tensor t;
	int has_done;
	int touched;
	int verified; /* new bytes hashed to the target digest before the commit */
	const struct dcr_ckpt_tensor *cur; /* in the receiver, when present */
};

struct plan {
	struct ptensor *t;
	size_t n, cap;
	char **removed;
	size_t nremoved;
	char **renames, **unlinks;
	size_t nrenames, nunlinks;
	dcr_digest base, target;
	uint8_t attempt[16];
	uint64_t nitems, nchanges;
	dcr_digest *alt; /* alternative bases (BASES record, or the manifest) */
	int any_base;    /* a dense copy: fits a receiver in any state */
	size_t nalt;
	uint64_t nxor;   /* XOR items: none allowed from an alternative base */
};

struct ctx {
	struct dcr_receiver *rc;
	const struct dcr_apply_opts *o;
	int steps;
};

/* A durable step: the fault-injection hook kills the process at step N. */
/* Where the journal's items come from: each call yields one item, already
 * resolved to an OVERWRITE and encoded (1), or the end (0). */
struct item_src {
	int (*next)(void *ctx, struct plan *p, struct dcr_item *it, struct dcr_err *e);
	void *ctx;
};

void ap_plan_free(struct plan *p);
int ap_push_str(char ***v, size_t *n, char *s);
/* A durable step: the fault-injection hook kills the process at step N. */
void ap_step(struct ctx *x);
/* Read a whole delta (or journal) into a plan, copying it to fd if >= 0. */
int ap_read_plan(struct dcr_source src, const uint8_t *head, size_t head_len, int copy_fd,
		 int journal, const char *what, struct plan *p, struct dcr_err *e);
int ap_explain_base(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
		    const dcr_digest *cur, struct dcr_err *e);
int ap_check_bases(const struct plan *p, const struct dcr_ckpt *c, const char *dir,
		   const dcr_digest *cur, const dcr_digest *head, int xor_seen,
		   struct dcr_err *e);
/* Open the receiver's checkpoint and its current state. */
int ap_current_state(struct dcr_receiver *rc, struct dcr_ckpt **c, dcr_digest *cur,
		     dcr_digest **cur_dg, struct dcr_err *e);
int ap_begin(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
	     struct dcr_apply_result *res, struct dcr_err *e);
int ap_commit_plan(struct ctx *x, struct plan *p, struct dcr_ckpt *c, const dcr_digest *cur,
		   const dcr_digest *cur_dg, struct item_src src, struct dcr_apply_result *res,
		   struct dcr_err *e);

/* journal.c: write, check and commit the journal; replay it. */
int ap_write_journal(struct ctx *x, struct plan *p, struct item_src src, struct dcr_err *e);
int ap_replay(struct ctx *x, struct dcr_apply_result *res, struct dcr_err *e);

#endif
