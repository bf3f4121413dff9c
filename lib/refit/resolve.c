/* resolve.c - items resolved on threads, handed back in order.
 *
 * A ring of slots: the caller copies an item into the next free slot, a
 * thread takes the oldest waiting one, decodes it against the receiver's
 * current bits and encodes the new bits as an OVERWRITE into the slot, and
 * the caller takes the slots back in the order it gave them. The ring's
 * size bounds the memory: a few items (each at most one diff chunk) per
 * thread. The slot last handed back stays the caller's until its next
 * call, so that the item it got may point into it. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/item.h"
#include "core/util.h"
#include "refit/resolve.h"

enum { FREE, WAITING, WORKING, DONE };

struct slot {
	int state;
	struct dcr_item in, out;
	struct dcr_buf data; /* in's data */
	struct dcr_buf enc;  /* out's data */
	int err;
	struct dcr_err e;
};

struct ap_resolver {
	const struct plan *p;
	pthread_mutex_t mu;
	pthread_cond_t more, done;
	struct slot *s;
	size_t ns;
	uint64_t given, started, taken; /* counters; slot k % ns */
	int held;			/* slot `taken` is the caller's */
	int stop;
	pthread_t th[64];
	int nth;
	struct dcr_changes ch; /* the caller's, when there are no threads */
};

static int resolve(const struct plan *p, struct slot *s, struct dcr_changes *ch)
{
	const struct dcr_item *it = &s->in;
	const struct ptensor *pt = &p->t[it->tensor];
	unsigned unit = dcr_dtype_unit(pt->t.dtype);
	const uint8_t *base =
		it->enc == DCR_ENC_XOR && pt->cur ? pt->cur->data + it->start * unit : NULL;
	int r = dcr_item_resolve(it, unit, base, ch, &s->e);
	if (r)
		return r;
	s->enc.len = 0;
	s->out = *it;
	s->out.enc = DCR_ENC_OVERWRITE;
	if ((r = dcr_item_encode(ch, unit, it->len, it->flags & DCR_ITEM_DENSE, &s->out.codec,
				 &s->enc, &s->e)))
		return r;
	s->out.data = s->enc.p;
	s->out.data_len = s->enc.len;
	return 0;
}

static void *worker(void *arg)
{
	struct ap_resolver *r = arg;
	struct dcr_changes ch = {0};
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->stop && r->started == r->given)
			pthread_cond_wait(&r->more, &r->mu);
		if (r->stop)
			break;
		struct slot *s = &r->s[r->started++ % r->ns];
		s->state = WORKING;
		pthread_mutex_unlock(&r->mu);
		int err = resolve(r->p, s, &ch);
		pthread_mutex_lock(&r->mu);
		s->err = err;
		s->state = DONE;
		pthread_cond_broadcast(&r->done);
	}
	pthread_mutex_unlock(&r->mu);
	dcr_changes_free(&ch);
	return NULL;
}

struct ap_resolver *ap_resolver_new(const struct plan *p, int threads)
{
	struct ap_resolver *r = dcr_calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	if (threads < 1)
		threads = dcr_ncpu();
	if (threads > 64)
		threads = 64;
	if (threads == 1)
		threads = 0; /* the caller resolves each item as it takes it */
	r->p = p;
	r->ns = 2 * (size_t)threads + 2;
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

int ap_resolver_room(const struct ap_resolver *r)
{
	/* slots taken .. given are in use, the held one among them */
	return r->given - r->taken < r->ns;
}

int ap_resolver_put(struct ap_resolver *r, const struct dcr_item *it)
{
	if (!ap_resolver_room(r))
		return -ENOSPC;
	struct slot *s = &r->s[r->given % r->ns];
	s->data.len = 0;
	if (dcr_buf_add(&s->data, it->data, it->data_len) < 0)
		return -ENOMEM;
	s->in = *it;
	s->in.data = s->data.p;
	pthread_mutex_lock(&r->mu);
	s->state = WAITING;
	r->given++;
	pthread_cond_signal(&r->more);
	pthread_mutex_unlock(&r->mu);
	return 0;
}

int ap_resolver_get(struct ap_resolver *r, struct dcr_item *out, struct dcr_err *e)
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
		r->started++;
		s->state = WORKING;
		pthread_mutex_unlock(&r->mu);
		s->err = resolve(r->p, s, &r->ch);
		pthread_mutex_lock(&r->mu);
		s->state = DONE;
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
	return 1;
}

void ap_resolver_free(struct ap_resolver *r)
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
	free(r->s);
	free(r);
}
