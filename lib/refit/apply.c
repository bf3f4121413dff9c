/* apply.c - apply a delta to a receiver in place, crash-safe.
 *
 * 1. Stage: the whole delta is read (from a pipe, copied to .dcr/incoming;
 *    a regular file is read again where it lies) while its framing,
 *    record bodies, trailer checksum and target state id are checked.
 *    Nothing in the receiver has been touched yet.
 * 2. Check: the receiver's state must be the delta's base (or already the
 *    target: then there is nothing to do).
 * 3. Journal: every item becomes an OVERWRITE of new stored bits (XOR masks
 *    are resolved against the current bits here, once, on every core).
 *    Files whose tensor set changes (every file of a dense copy) are
 *    rebuilt under .dcr/stage/. Every touched tensor's new bytes (its
 *    current bytes with the overwrites) are hashed and must match its
 *    target digest; those of a rebuilt file's touched and new tensors are
 *    written into the staged file as they are hashed, and only items that
 *    come after their tensor was hashed go to the journal. The journal is
 *    written to .dcr/journal.tmp, the staged files and it are fsynced, and
 *    it is renamed to .dcr/journal: the commit point.
 * 4. Replay: staged files are renamed into place, overwrites are written,
 *    files fsynced, the state cache written, the journal removed. The
 *    tensors a rebuilt file copied are hashed after the write; touched
 *    ones again only with --recheck, or in a recovery (a journal another
 *    run committed).
 * A crash before 3 leaves the receiver as it was; a crash after 3 is
 * finished by replaying the journal, which only holds overwrites, so
 * replaying it twice is harmless.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "refit/apply.h"
#include "refit/commit.h"
#include "refit/journal.h"
#include "refit/plan.h"
#include "refit/ipool.h"
#include "refit/prehash.h"
#include "refit/stage.h"

/* Items of a staged delta: XOR masks resolved against the current bits,
 * on every core (refit/ipool.h), in the delta's order, and their new
 * bytes hashed there for the check (refit/prehash.h). */
struct delta_items {
	struct dcr_delta_reader rd;
	struct dcr_fdbuf in; /* rd's source: the staged delta */
	int fd;
	int eof;
	int threads;
	struct ap_ipool *pool;
	struct ap_prehash *pre;
	struct ap_parts_ring ring;
};

/* One item decoded against the bits of the receiver's tensor (ctx: the
 * plan), read into the thread's scratch, and encoded as an OVERWRITE of
 * its new bits; when they were read, the item's new values go into them
 * and they are hashed into digest parts for the check (arg: the cell
 * they go in). A DENSE overwrite already is one, coded as the journal
 * codes it (PLAIN): it goes in as it came (a dense copy's items were
 * decoded and coded again, zstd and all, for nothing), decoded first by
 * the journal's check, which refuses one that does not decode before
 * anything is committed. */
static int resolve_item(void *ctx, const struct dcr_item *it, void *arg, struct dcr_changes *ch,
			struct dcr_buf *scratch, struct dcr_buf *enc, struct dcr_item *out,
			struct dcr_err *e)
{
	const struct plan *p = ctx;
	const struct ptensor *pt = &p->t[it->tensor];
	unsigned unit = dcr_dtype_unit(pt->t.dtype);
	const uint8_t *base = NULL;
	int r;
	if (dcr_item_is_dense_overwrite(it))
		return 0;
	if (it->enc == DCR_ENC_XOR && pt->cur &&
	    (r = dcr_item_base(pt->cur, it, unit, scratch, &base, e)))
		return r;
	if ((r = dcr_item_to_overwrite(it, unit, base, ch, enc, out, e)))
		return r;
	if (base && base == scratch->p)
		((struct ap_parts_cell *)arg)->parts =
			ap_prehash_parts(pt->t.dtype, pt->t.ndim, pt->t.shape, it, scratch->p, ch);
	return 0;
}

static int delta_items_next(void *ctx, struct plan *p, struct dcr_item *o, struct dcr_err *e)
{
	struct delta_items *d = ctx;
	struct dcr_delta_rec rec;
	int r;
	if (!d->pool && !(d->pool = ap_ipool_new(d->threads, resolve_item, p)))
		return dcr_err_sys(e, ENOMEM, "apply");
	if (!d->pre && !(d->pre = ap_prehash_new()))
		return dcr_err_sys(e, ENOMEM, "apply");
	p->pre = d->pre;
	while (!d->eof && ap_ipool_room(d->pool)) {
		if ((r = dcr_delta_next(&d->rd, &rec, e)) < 0)
			return r;
		if (r == 0) {
			d->eof = 1;
			break;
		}
		if (rec.type != DCR_REC_ITEM)
			continue;
		struct dcr_item it;
		if ((r = dcr_delta_parse_item(&rec, &it, e)))
			return r;
		if (ap_ipool_put(d->pool, &it, ap_ring_give(&d->ring, NULL)))
			return dcr_err_sys(e, ENOMEM, "apply");
	}
	struct ap_parts_cell *cell = ap_ring_take(&d->ring);
	if ((r = ap_ipool_get(d->pool, o, NULL, e)) == 1 && cell) {
		const struct ptensor *pt = &p->t[o->tensor];
		ap_prehash_take(d->pre, pt->t.name, pt->cur, o, cell->parts);
		cell->parts = NULL;
	}
	return r;
}

/* Where the delta src starts (its first head_len bytes read already), when
 * it reads a regular file that can be read again from there (its fd in
 * *fd); else -1. */
static off_t staged_in_place(struct dcr_source src, size_t head_len, int *fd)
{
	struct stat sb;
	const struct dcr_fdbuf *b = src.ctx;
	if (src.read == dcr_source_fd_read)
		*fd = *(int *)src.ctx;
	else if (src.read == dcr_source_fdbuf_read && b->at == b->len) /* nothing read ahead */
		*fd = b->fd;
	else
		return -1;
	if (fstat(*fd, &sb) || !S_ISREG(sb.st_mode))
		return -1;
	off_t at = lseek(*fd, 0, SEEK_CUR);
	return at >= (off_t)head_len ? at - (off_t)head_len : -1;
}

static int apply_delta(struct dcr_receiver *rc, struct dcr_source src, const uint8_t *head,
		       size_t head_len, const struct dcr_apply_opts *o,
		       struct dcr_apply_result *res, struct dcr_err *e)
{
	struct ctx x = {.rc = rc, .o = o};
	struct plan p = {0};
	struct dcr_ckpt *c = NULL;
	dcr_digest *cur_dg = NULL;
	struct delta_items di = {.fd = -1, .threads = rc->threads};
	char *inc = dcr_receiver_path(rc, "incoming");
	int r;
	if (!inc)
		return dcr_err_sys(e, ENOMEM, "apply");
	if ((r = ap_begin(rc, o, res, e)))
		goto out;

	/* 1. stage and check the whole delta: a delta in a regular file is
	 * read again where it lies (a dense copy is as large as the model),
	 * any other copied to .dcr/incoming */
	int src_fd = -1;
	off_t start = staged_in_place(src, head_len, &src_fd);
	unlink(inc);
	if (start >= 0)
		di.fd = fcntl(src_fd, F_DUPFD_CLOEXEC, 0);
	else
		di.fd = open(inc, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (di.fd < 0) {
		r = start >= 0 ? dcr_err_sys(e, errno, "cannot read the delta again")
			       : dcr_err_sys(e, errno, "cannot create '%s'", inc);
		goto out;
	}
	if ((r = ap_read_plan(src, head, head_len, start >= 0 ? -1 : di.fd, 0,
			      o && o->what ? o->what : "delta", &p, e)))
		goto out;

	/* 2. the receiver must be at the base */
	dcr_digest cur;
	if ((r = ap_current_state(rc, &c, &cur, &cur_dg, e)))
		goto out;
	if (res) {
		res->base = p.base;
		res->target = p.target;
		memcpy(res->attempt, p.attempt, 16);
	}
	if (!memcmp(cur.b, p.target.b, 32)) {
		if (res)
			res->already = 1;
		goto out;
	}
	if ((r = ap_check_bases(&p, c, rc->dir, &cur, o ? o->head : NULL, 0, e)))
		goto out;
	if (res)
		res->base = cur;

	/* 3. journal from the staged delta, commit, replay (a delta read
	 * again must be the one read: its items must give the digests of
	 * the plan, before anything is committed, and its trailer its bytes) */
	off_t from = start >= 0 ? start : 0;
	if (lseek(di.fd, from, SEEK_SET) != from) {
		r = dcr_err_sys(e, errno, "cannot rewind the staged delta");
		goto out;
	}
	if (dcr_fdbuf_init(&di.in, di.fd, DCR_FDBUF_SIZE)) {
		r = dcr_err_sys(e, ENOMEM, "apply");
		goto out;
	}
	if ((r = dcr_delta_reader_init_flags(&di.rd, (struct dcr_source){dcr_source_fdbuf_read, &di.in},
					     NULL, 0, DCR_DELTA_DENSE, "staged delta", e)))
		goto out;
	r = ap_commit_plan(&x, &p, c, &cur, cur_dg, (struct item_src){delta_items_next, &di}, res, e);
out:
	ap_ipool_free(di.pool);
	ap_ring_release(&di.ring);
	ap_prehash_free(di.pre);
	p.pre = NULL;
	dcr_delta_reader_release(&di.rd);
	dcr_fdbuf_release(&di.in);
	if (di.fd >= 0)
		close(di.fd);
	unlink(inc);
	free(inc);
	free(cur_dg);
	dcr_ckpt_close(c);
	ap_plan_free(&p);
	return r;
}

int dcr_apply(struct dcr_receiver *rc, struct dcr_source src, const uint8_t *head,
	      size_t head_len, const struct dcr_apply_opts *o, struct dcr_apply_result *res,
	      struct dcr_err *e)
{
	struct dcr_apply_result tmp;
	if (!res)
		res = &tmp;
	if (o && o->trust && o->trust->nkeys)
		return dcr_err_set(e, DCR_ETRUST,
				   "%s is a delta stream, which carries no signature: with a verify key only signed packs are applied (dcr-pack --sign)",
				   o->what ? o->what : "the input");
	int r = apply_delta(rc, src, head, head_len, o, res, e);
	if (!r)
		r = dcr_applied_record(rc, res, o && o->have_version, o ? o->version : 0,
				       o ? o->fault : NULL, e);
	return r;
}

int dcr_apply_recover(struct dcr_receiver *rc, const struct dcr_apply_opts *o,
		      struct dcr_err *e)
{
	return ap_recover(rc, o, e);
}
