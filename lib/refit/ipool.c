/* ipool.c - items worked on threads, handed back in order.
 *
 * A ring of slots: the caller copies an item into the next free slot, a
 * thread takes the oldest waiting one and runs the pool's function on it
 * (whose output goes into the slot), and the caller takes the slots back
 * in the order it gave them. The ring's size bounds the memory: a few
 * items (each at most DCR_ITEM_MAX_ELEMS units) per thread. The slot last
 * handed back stays the caller's until its next call, so that the item it
 * got may point into it.
 *
 * Memory: an item's work takes ap_decode_bytes (its positions and values
 * decoded), so items are let in while those of the items waiting and
 * being worked on stay within AP_DECODE_BUDGET (one is let in
 * whatever it declares): a hostile input of items that claim the most
 * costs one of them at a time, not one per thread. A thread lets go of
 * scratch larger than IPOOL_KEEP after each item. A small item (its cost
 * and its range: IPOOL_INLINE), given when no other waits, is worked on
 * by the caller as it gives it. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "refit/ipool.h"

enum { FREE, WAITING, WORKING, DONE };

#define IPOOL_KEEP ((size_t)1 << 20) /* changes of scratch a thread keeps */
/* an item the caller works on: its cost, and its range (which the work
 * may read and hash, whatever its changes) */
#define IPOOL_INLINE ((uint64_t)16 << 10)
#define IPOOL_INLINE_ELEMS 4096

struct slot {
	int state;
	struct dcr_item in, out;
	void *arg;
	uint64_t cost;	     /* bytes its work may take */
	struct dcr_buf data; /* in's data */
	struct dcr_buf enc;  /* out's data */
	int err;
	struct dcr_err e;
};

struct ap_ipool {
	ap_ipool_fn *fn;
	void *ctx;
	pthread_mutex_t mu;
	pthread_cond_t more, done;
	struct slot *s;
	size_t ns;
	uint64_t given, started, taken; /* counters; slot k % ns */
	uint64_t busy;			/* cost of the items waiting and being worked on */
	int held;			/* slot `taken` is the caller's */
	int stop;
	pthread_t th[64];
	int nth;
	struct dcr_changes ch; /* the caller's, when there are no threads */
	struct dcr_buf scratch;
};

static int work(struct ap_ipool *r, struct slot *s, struct dcr_changes *ch,
		struct dcr_buf *scratch)
{
	s->enc.len = 0;
	s->out = s->in;
	int err = r->fn(r->ctx, &s->in, s->arg, ch, scratch, &s->enc, &s->out, &s->e);
	if (ch->cap > IPOOL_KEEP)
		dcr_changes_free(ch);
	if (scratch->cap > 8 * IPOOL_KEEP)
		dcr_buf_free(scratch);
	return err;
}

static void *worker(void *arg)
{
	struct ap_ipool *r = arg;
	struct dcr_changes ch = {0};
	struct dcr_buf scratch = {0};
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->stop && r->started == r->given)
			pthread_cond_wait(&r->more, &r->mu);
		if (r->stop)
			break;
		struct slot *s = &r->s[r->started++ % r->ns];
		s->state = WORKING;
		pthread_mutex_unlock(&r->mu);
		int err = work(r, s, &ch, &scratch);
		pthread_mutex_lock(&r->mu);
		s->err = err;
		s->state = DONE;
		r->busy -= s->cost;
		pthread_cond_broadcast(&r->done);
	}
	pthread_mutex_unlock(&r->mu);
	dcr_changes_free(&ch);
	dcr_buf_free(&scratch);
	return NULL;
}

struct ap_ipool *ap_ipool_new(int threads, ap_ipool_fn *fn, void *ctx)
{
	struct ap_ipool *r = dcr_calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	if (threads < 1)
		threads = dcr_ncpu();
	if (threads > 64)
		threads = 64;
	if (threads == 1)
		threads = 0; /* the caller works on each item as it takes it */
	r->fn = fn;
	r->ctx = ctx;
	r->ns = (size_t)threads + 2; /* one held, one per thread, one waiting */
	r->s = dcr_calloc(r->ns, sizeof(*r->s));
	if (!r->s) {
		free(r);
		return NULL;
	}
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->more, NULL);
	pthread_cond_init(&r->done, NULL);
	for (int i = 0; i < threads; i++)
		if (!pthread_create(&r->th[r->nth], NULL, worker, r))
			r->nth++;
	return r;
}

/* Under mu, which it lets go meanwhile: slot s, the next to be started,
 * worked on by the caller's thread. */
static void work_here(struct ap_ipool *r, struct slot *s)
{
	r->started++;
	s->state = WORKING;
	pthread_mutex_unlock(&r->mu);
	s->err = work(r, s, &r->ch, &r->scratch);
	pthread_mutex_lock(&r->mu);
	s->state = DONE;
}

int ap_ipool_room(const struct ap_ipool *r)
{
	/* slots taken .. given are in use, the held one among them */
	return r->given - r->taken < r->ns;
}

int ap_ipool_put(struct ap_ipool *r, const struct dcr_item *it, void *arg)
{
	if (!ap_ipool_room(r))
		return -ENOSPC;
	struct slot *s = &r->s[r->given % r->ns];
	s->data.len = 0;
	if (dcr_buf_add(&s->data, it->data, it->data_len) < 0)
		return -ENOMEM;
	s->in = *it;
	s->in.data = s->data.p;
	s->arg = arg;
	s->cost = ap_decode_bytes(it) + it->data_len;
	pthread_mutex_lock(&r->mu);
	if (r->nth && s->cost < IPOOL_INLINE && it->len <= IPOOL_INLINE_ELEMS &&
	    r->started == r->given) {
		/* a small item with none waiting before it: worked on here,
		 * at once (handing it to a thread and back cost more than
		 * the work: 25 us an item, in a stream of an item per tensor) */
		r->given++;
		work_here(r, s);
		pthread_mutex_unlock(&r->mu);
		return 0;
	}
	while (r->nth && r->busy && r->busy + s->cost > AP_DECODE_BUDGET)
		pthread_cond_wait(&r->done, &r->mu);
	r->busy += s->cost;
	s->state = WAITING;
	r->given++;
	pthread_cond_signal(&r->more);
	pthread_mutex_unlock(&r->mu);
	return 0;
}

int ap_ipool_get(struct ap_ipool *r, struct dcr_item *out, void **arg, struct dcr_err *e)
{
	pthread_mutex_lock(&r->mu);
	if (r->held) {
		r->s[r->taken++ % r->ns].state = FREE;
		r->held = 0;
	}
	if (r->taken == r->given) {
		pthread_mutex_unlock(&r->mu);
		return 0;
	}
	struct slot *s = &r->s[r->taken % r->ns];
	if (!r->nth && s->state == WAITING) {
		work_here(r, s);
		r->busy -= s->cost;
	}
	while (s->state != DONE)
		pthread_cond_wait(&r->done, &r->mu);
	r->held = 1;
	pthread_mutex_unlock(&r->mu);
	if (s->err) {
		*e = s->e;
		return s->err;
	}
	*out = s->out;
	if (arg)
		*arg = s->arg;
	return 1;
}

void ap_ipool_free(struct ap_ipool *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_broadcast(&r->more);
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < r->nth; i++)
		pthread_join(r->th[i], NULL);
	for (size_t i = 0; i < r->ns; i++) {
		dcr_buf_free(&r->s[i].data);
		dcr_buf_free(&r->s[i].enc);
	}
	pthread_cond_destroy(&r->more);
	pthread_cond_destroy(&r->done);
	pthread_mutex_destroy(&r->mu);
	dcr_changes_free(&r->ch);
	dcr_buf_free(&r->scratch);
	free(r->s);
	free(r);
}
