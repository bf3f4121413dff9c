/* policy.c - the store side of the commit protocol: acknowledgements,
 * refs created by compare-and-set, and garbage collection of old packs.
 * See policy.h and dcr(7), COMMIT PROTOCOL. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/manifest.h"
#include "core/util.h"
#include "refit/policy.h"
#include "refit/record.h"
#include "refit/version.h"

int dcr_policy_check_name(const char *policy, struct dcr_err *e)
{
	if (!policy[0] || strchr(policy, '/') || dcr_store_check_name(policy, e))
		return dcr_err_set(e, DCR_EFORMAT, "policy '%s' must be one name component",
				   policy);
	return 0;
}

static int check_receiver(const char *receiver, struct dcr_err *e)
{
	if (!receiver[0] || strchr(receiver, '/'))
		return dcr_err_set(e, DCR_EFORMAT, "receiver id '%s' must be one name component",
				   receiver);
	return 0;
}

/* The most bytes an acknowledgement or a ref may hold (they are a few
 * lines; a store that holds more is not read further). */
#define RECORD_MAX (64u << 10)

/* One acknowledgement or ref from the store into *buf, NUL-terminated:
 * 0, DCR_ENOTFOUND (with a message), or an error. */
static int get_record(struct dcr_store *s, const char *name, uint8_t **buf, size_t *len,
		      struct dcr_err *e)
{
	int r = dcr_store_get_small(s, name, RECORD_MAX, "an acknowledgement or a ref", buf, len, e);
	if (!r && !*buf)
		r = dcr_err_set(e, DCR_ENOTFOUND, "'%s/%s': no such object", dcr_store_url(s), name);
	return r;
}

int dcr_ack_put(struct dcr_store *s, const char *policy, uint64_t version, const char *receiver,
		const dcr_digest *state, struct dcr_err *e)
{
	int r = check_receiver(receiver, e);
	if (r)
		return r;
	char hex[65];
	dcr_digest_hex(state, hex);
	char *name = dcr_asprintf("%s/acks/v%llu/%s", policy, (unsigned long long)version, receiver);
	char *text = dcr_asprintf("dcr-ack 1\nversion %llu\nstate %s\nreceiver %s\n",
				  (unsigned long long)version, hex, receiver);
	r = !name || !text ? dcr_err_sys(e, ENOMEM, "ack") : dcr_store_check_name(name, e);
	if (!r)
		r = dcr_store_put(s, name, text, strlen(text), e);
	free(name);
	free(text);
	return r;
}

int dcr_commit_receiver(struct dcr_receiver *rc, struct dcr_store *s, const char *policy,
			const char *receiver, const struct dcr_commit_opts *o,
			struct dcr_commit_result *res, struct dcr_err *e)
{
	int r = s ? check_receiver(receiver, e) : 0;
	if (r || (r = dcr_commit_local(rc, o, res, e)) || !s)
		return r;
	/* the acknowledgement's fault point follows the local commit's */
	dcr_fault_point(o ? o->fault : NULL);
	return dcr_ack_put(s, policy, res->version, receiver, &res->state, e);
}

void dcr_acks_free(struct dcr_ack *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].receiver);
	free(v);
}

int dcr_acks_list(struct dcr_store *s, const char *policy, uint64_t version,
		  struct dcr_ack **out, size_t *nout, struct dcr_err *e)
{
	char **names = NULL;
	size_t n = 0;
	*out = NULL;
	*nout = 0;
	char *pfx = version == UINT64_MAX
			    ? dcr_asprintf("%s/acks/", policy)
			    : dcr_asprintf("%s/acks/v%llu/", policy, (unsigned long long)version);
	int r = pfx ? dcr_store_list(s, pfx, &names, &n, e) : dcr_err_sys(e, ENOMEM, "acks");
	size_t pl = strlen(policy) + 6;
	struct dcr_ack *v = r ? NULL : dcr_calloc(n + 1, sizeof(*v));
	size_t k = 0;
	if (!r && !v)
		r = dcr_err_sys(e, ENOMEM, "acks");
	for (size_t i = 0; !r && i < n; i++) {
		const char *rest = names[i] + pl; /* "vV/ID" */
		const char *slash = strchr(rest, '/');
		uint64_t ver;
		if (!slash || strchr(slash + 1, '/') || dcr_version_parse(rest, (size_t)(slash - rest), &ver))
			continue;
		uint8_t *buf;
		size_t len;
		int q = get_record(s, names[i], &buf, &len, e);
		if (q == DCR_ENOTFOUND || q == DCR_EFORMAT)
			continue; /* gone, or far too large: not counted */
		if (q) {
			r = q;
			break;
		}
		uint64_t bv;
		dcr_digest st;
		int ok = len > 10 && !memcmp(buf, "dcr-ack 1\n", 10) &&
			 !kv_u64((char *)buf, "version", &bv) && bv == ver &&
			 !kv_digest((char *)buf, "state", &st);
		free(buf);
		if (!ok)
			continue; /* not an acknowledgement: ignored, never counted */
		v[k].receiver = dcr_strdup(slash + 1);
		v[k].version = ver;
		v[k].state = st;
		if (!v[k++].receiver)
			r = dcr_err_sys(e, ENOMEM, "acks");
	}
	dcr_store_names_free(names, n);
	free(pfx);
	if (r) {
		dcr_acks_free(v, k);
		return r;
	}
	*out = v;
	*nout = k;
	return 0;
}

static int parse_ref(const uint8_t *buf, size_t len, uint64_t version, dcr_digest *state)
{
	uint64_t v;
	return len > 10 && !memcmp(buf, "dcr-ref 1\n", 10) && !kv_u64((const char *)buf, "version", &v) &&
			       v == version && !kv_digest((const char *)buf, "state", state)
		       ? 0
		       : -1;
}

int dcr_policy_ref(struct dcr_store *s, const char *policy, uint64_t version, dcr_digest *state,
		   struct dcr_err *e)
{
	char *name = dcr_asprintf("%s/refs/v%llu", policy, (unsigned long long)version);
	uint8_t *buf = NULL;
	size_t len;
	int r = name ? get_record(s, name, &buf, &len, e) : dcr_err_sys(e, ENOMEM, "ref");
	if (!r && parse_ref(buf, len, version, state))
		r = dcr_err_set(e, DCR_EFORMAT, "'%s' is not a dcr ref", name);
	free(buf);
	free(name);
	return r;
}

int dcr_policy_head(struct dcr_store *s, const char *policy, struct dcr_head *h,
		    struct dcr_err *e)
{
	memset(h, 0, sizeof(*h));
	char **names = NULL;
	size_t n = 0;
	char *pfx = dcr_asprintf("%s/refs/", policy);
	int r = pfx ? dcr_store_list(s, pfx, &names, &n, e) : dcr_err_sys(e, ENOMEM, "refs");
	size_t pl = pfx ? strlen(pfx) : 0;
	for (size_t i = 0; !r && i < n; i++) {
		uint64_t v;
		if (dcr_version_parse(names[i] + pl, strlen(names[i] + pl), &v))
			continue;
		if (!h->have || v > h->version) {
			h->have = 1;
			h->version = v;
		}
	}
	dcr_store_names_free(names, n);
	free(pfx);
	if (!r && h->have)
		r = dcr_policy_ref(s, policy, h->version, &h->state, e);
	return r;
}

int dcr_policy_target(struct dcr_store *s, const char *policy, uint64_t version,
		      dcr_digest *state, struct dcr_err *e)
{
	char *name = dcr_asprintf("%s/v%llu/%s", policy, (unsigned long long)version,
				  DCR_MANIFEST_NAME);
	uint8_t *buf = NULL;
	size_t len;
	struct dcr_manifest m;
	int r = name ? dcr_store_get(s, name, &buf, &len, e) : dcr_err_sys(e, ENOMEM, "manifest");
	if (r == DCR_ENOTFOUND)
		r = dcr_err_set(e, DCR_ENOTFOUND,
				"no pack '%s' in '%s' to take the target state from; give --state",
				name, dcr_store_url(s));
	else if (!r && !(r = dcr_manifest_parse(buf, len, name, &m, e))) {
		*state = m.target;
		dcr_manifest_release(&m);
	}
	free(buf);
	free(name);
	return r;
}

int dcr_policy_commit(struct dcr_store *s, const char *policy,
		      const struct dcr_policy_commit_opts *o, unsigned *acks_seen,
		      struct dcr_err *e)
{
	char hex[65], other[65];
	dcr_digest d;
	dcr_digest_hex(&o->state, hex);
	int r;
	/* the ref must still name V-1: refs/v(V-1) exists, refs/vV does not */
	if (o->version > 0) {
		r = dcr_policy_ref(s, policy, o->version - 1, &d, e);
		if (r == DCR_ENOTFOUND)
			return dcr_err_set(e, DCR_ECONFLICT,
					   "policy '%s': version %llu is not committed, so %llu cannot be",
					   policy, (unsigned long long)(o->version - 1),
					   (unsigned long long)o->version);
		if (r)
			return r;
	}
	double deadline = dcr_now_s() + o->timeout_s;
	unsigned good = 0, had = 0, nap_ms = 25;
	for (;;) {
		r = dcr_policy_ref(s, policy, o->version, &d, e);
		if (!r) {
			dcr_digest_hex(&d, other);
			return dcr_err_set(e, DCR_ECONFLICT,
					   "policy '%s': version %llu is already committed (state %s)",
					   policy, (unsigned long long)o->version, other);
		}
		if (r != DCR_ENOTFOUND)
			return r;
		struct dcr_ack *v;
		size_t n;
		if ((r = dcr_acks_list(s, policy, o->version, &v, &n, e)))
			return r;
		good = 0;
		for (size_t i = 0; i < n; i++)
			good += !memcmp(v[i].state.b, o->state.b, 32);
		dcr_acks_free(v, n);
		if (acks_seen)
			*acks_seen = good;
		if (good >= o->expect)
			break;
		if (dcr_now_s() >= deadline)
			return dcr_err_set(e, DCR_ENOTFOUND,
					   "policy '%s': %u of %u receivers acknowledged version %llu (state %.12s) after %.0f s; nothing committed",
					   policy, good, o->expect, (unsigned long long)o->version, hex,
					   o->timeout_s);
		/* listed again after 25 ms, doubling to 100 ms while no new
		 * acknowledgement comes: the receivers of one refit tend to
		 * finish together, and the last one's wait is the refit's */
		if (good > had)
			nap_ms = 25;
		had = good;
		usleep(nap_ms * 1000);
		nap_ms = nap_ms * 2 > 100 ? 100 : nap_ms * 2;
	}
	char *name = dcr_asprintf("%s/refs/v%llu", policy, (unsigned long long)o->version);
	/* a nonce makes every committer's bytes unique: the store treats
	 * finding exactly its own bytes as a retried create that succeeded */
	uint8_t nonce[16];
	char nhex[33];
	if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce))
		return dcr_err_sys(e, errno, "getrandom");
	dcr_hex(nonce, sizeof(nonce), nhex);
	char *text = dcr_asprintf("dcr-ref 1\nversion %llu\nstate %s\ncommitter %s\n",
				  (unsigned long long)o->version, hex, nhex);
	if (!name || !text) {
		free(name);
		free(text);
		return dcr_err_sys(e, ENOMEM, "ref");
	}
	dcr_fault_point(o->fault);
	r = dcr_store_put_if_absent(s, name, text, strlen(text), e);
	dcr_fault_point(o->fault);
	if (r == DCR_ECONFLICT) {
		if (!dcr_policy_ref(s, policy, o->version, &d, e)) {
			dcr_digest_hex(&d, other);
			r = dcr_err_set(e, DCR_ECONFLICT,
					"policy '%s': version %llu was committed by another trainer (state %s)",
					policy, (unsigned long long)o->version, other);
		} else {
			r = dcr_err_set(e, DCR_ECONFLICT,
					"policy '%s': version %llu was committed by another trainer",
					policy, (unsigned long long)o->version);
		}
	}
	free(name);
	free(text);
	return r;
}

/* A receiver's latest acknowledged version. */
struct latest {
	const char *receiver;
	uint64_t version;
};

static int cmp_ack(const void *a, const void *b)
{
	const struct dcr_ack *x = a, *y = b;
	int c = strcmp(x->receiver, y->receiver);
	return c ? c : (x->version < y->version) - (x->version > y->version);
}

/* What an object under NAME/ is, from rest (the name after "NAME/"): a
 * delta's pack (vV/...), a dense copy's (vV.dense/...; *manifest when it
 * is the manifest, which a push writes last), an acknowledgement
 * (acks/vV/ID) or something else (refs are kept). *len: the length of
 * the pack's directory component. */
enum gc_kind { GC_OTHER, GC_PACK, GC_DENSE, GC_ACK };

static enum gc_kind gc_kind(const char *rest, uint64_t *v, size_t *len, int *manifest)
{
	const char *sl = strchr(rest, '/');
	*manifest = 0;
	if (!sl)
		return GC_OTHER;
	*len = (size_t)(sl - rest);
	if (!dcr_version_parse(rest, *len, v))
		return GC_PACK;
	if (*len > 6 && !memcmp(sl - 6, ".dense", 6) && !dcr_version_parse(rest, *len - 6, v)) {
		*manifest = !strcmp(sl + 1, DCR_MANIFEST_NAME);
		return GC_DENSE;
	}
	const char *id;
	if (*len == 4 && !memcmp(rest, "acks", 4) && (id = strchr(sl + 1, '/')) &&
	    !dcr_version_parse(sl + 1, (size_t)(id - sl - 1), v))
		return GC_ACK;
	return GC_OTHER;
}

static int cmp_latest(const void *a, const void *b)
{
	return strcmp(((const struct latest *)a)->receiver, ((const struct latest *)b)->receiver);
}

/* Whom the packs are kept for: every receiver's latest acknowledgement
 * (into lt, sorted by receiver: *nl), the oldest of those waited for
 * (*oldest, UINT64_MAX for none), and whether one further behind than
 * max_behind was let go (it catches up by the dense copy dense, when
 * there is one: have_dense). */
static int gc_receivers(struct dcr_ack *acks, size_t nacks, const struct dcr_gc_opts *o,
			uint64_t head, int have_dense, uint64_t dense, struct latest *lt,
			size_t *nl, uint64_t *oldest, int *let_go, struct dcr_gc_result *res)
{
	*oldest = UINT64_MAX;
	*let_go = 0;
	*nl = 0;
	qsort(acks, nacks, sizeof(*acks), cmp_ack);
	for (size_t i = 0; i < nacks; i++) {
		if (i && !strcmp(acks[i].receiver, acks[i - 1].receiver))
			continue; /* the first of a receiver's is its latest */
		struct latest l = {acks[i].receiver, acks[i].version};
		lt[(*nl)++] = l;
		if (head > l.version && head - l.version > o->max_behind) {
			int go = have_dense && dense > l.version;
			if (o->behind)
				o->behind(o->ctx, l.receiver, l.version, go);
			if (go) {
				*let_go = 1;
				continue;
			}
		}
		if (l.version < *oldest) {
			*oldest = l.version;
			free(res->held_by);
			if (!(res->held_by = dcr_strdup(l.receiver)))
				return -ENOMEM;
			res->held_at = l.version;
		}
	}
	return 0;
}

/* 1 if the acknowledgement rest ("acks/vV/ID") of version v is of no more
 * use: its receiver has acknowledged a later version, and v is committed
 * (a trainer may still be waiting for the acknowledgements of a version
 * that is not). */
static int ack_superseded(const struct latest *lt, size_t nl, const char *rest, uint64_t v,
			  uint64_t head)
{
	const char *id = strchr(rest + 5, '/') + 1;
	struct latest key = {id, 0};
	const struct latest *l = nl ? bsearch(&key, lt, nl, sizeof(*lt), cmp_latest) : NULL;
	return l && v < l->version && v <= head;
}

int dcr_policy_gc(struct dcr_store *s, const char *policy, const struct dcr_gc_opts *o,
		  struct dcr_gc_result *res, struct dcr_err *e)
{
	struct dcr_head h;
	struct dcr_ack *acks = NULL;
	size_t nacks = 0, n = 0;
	char **names = NULL;
	memset(res, 0, sizeof(*res));
	int r = dcr_policy_head(s, policy, &h, e);
	if (r || !h.have)
		return r; /* nothing committed: nothing superseded */
	res->have_head = 1;
	res->head = h.version;
	char *pfx = dcr_asprintf("%s/", policy);
	size_t pl = pfx ? strlen(pfx) : 0;
	r = pfx ? dcr_store_list(s, pfx, &names, &n, e) : dcr_err_sys(e, ENOMEM, "gc");
	/* the newest complete dense copy of a committed version: it serves
	 * every receiver an older one would, with fewer deltas after it */
	int have_dense = 0;
	uint64_t dense = 0, v;
	size_t len;
	int man;
	for (size_t i = 0; !r && i < n; i++)
		if (gc_kind(names[i] + pl, &v, &len, &man) == GC_DENSE && man && v <= h.version &&
		    (!have_dense || v > dense)) {
			have_dense = 1;
			dense = v;
		}
	if (!r)
		r = dcr_acks_list(s, policy, UINT64_MAX, &acks, &nacks, e);
	uint64_t oldest = UINT64_MAX;
	int let_go = 0;
	size_t nl = 0;
	struct latest *lt = r ? NULL : dcr_calloc(nacks + 1, sizeof(*lt));
	if (!r && (!lt || gc_receivers(acks, nacks, o, h.version, have_dense, dense, lt, &nl,
				       &oldest, &let_go, res)))
		r = dcr_err_sys(e, ENOMEM, "gc");
	/* packs at or below limit go: none while no receiver has said where
	 * it stands; never the last keep committed versions'; none a
	 * receiver waited for still needs; none after the dense copy a
	 * receiver let go catches up by */
	int any = nacks && h.version >= o->keep;
	uint64_t limit = any ? h.version - o->keep : 0;
	if (oldest < limit)
		limit = oldest;
	if (let_go && dense < limit)
		limit = dense;
	if (res->held_by && (!any || res->held_at >= h.version - o->keep)) {
		free(res->held_by); /* it held back nothing --keep let go */
		res->held_by = NULL;
	}
	const char *cur = NULL; /* the pack being removed, and its objects */
	size_t cur_len = 0, count = 0;
	for (size_t i = 0; !r && i <= n; i++) {
		const char *rest = i < n ? names[i] + pl : NULL;
		enum gc_kind k = rest ? gc_kind(rest, &v, &len, &man) : GC_OTHER;
		int go = (k == GC_PACK && any && v <= limit) ||
			 (k == GC_DENSE && have_dense && v < dense) ||
			 (k == GC_ACK && ack_superseded(lt, nl, rest, v, h.version));
		int pack = go && k != GC_ACK;
		if (cur && (!pack || len != cur_len || memcmp(rest, cur, len))) {
			char *name = strndup(cur, cur_len);
			if (!name) {
				r = dcr_err_sys(e, ENOMEM, "gc");
				break;
			}
			if (o->removed)
				o->removed(o->ctx, name, count);
			if (strchr(name, '.'))
				res->dense++;
			else
				res->versions++;
			free(name);
			cur = NULL;
		}
		if (!go)
			continue;
		if (pack && !cur) {
			cur = rest;
			cur_len = len;
			count = 0;
		}
		count += pack;
		if (!o->dry_run) {
			int q = dcr_store_delete(s, names[i], e);
			if (q && q != DCR_ENOTFOUND)
				r = q;
		}
	}
	free(lt);
	dcr_acks_free(acks, nacks);
	dcr_store_names_free(names, n);
	free(pfx);
	return r;
}

void dcr_gc_result_release(struct dcr_gc_result *res)
{
	free(res->held_by);
	res->held_by = NULL;
}
