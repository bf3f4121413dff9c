/* policy.c - the store side of the commit protocol: acknowledgements,
 * refs created by compare-and-set, and garbage collection of old packs.
 * See policy.h and dcr(7), COMMIT PROTOCOL. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include "transport/transfer.h"

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

/* Put text (malloc'd, freed here; NULL: out of memory) as receiver's
 * record of version: NAME/acks/vV/ID, an acknowledgement or a failure
 * report, the later replacing the earlier. */
static int put_receiver_record(struct dcr_store *s, const char *policy, uint64_t version,
			       const char *receiver, char *text, struct dcr_err *e)
{
	char *name = dcr_asprintf("%s/acks/v%llu/%s", policy, (unsigned long long)version, receiver);
	int r = !name || !text ? dcr_err_sys(e, ENOMEM, "acknowledgement")
			       : dcr_store_check_name(name, e);
	if (!r)
		r = dcr_store_put(s, name, text, strlen(text), e);
	free(name);
	free(text);
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
	return put_receiver_record(s, policy, version, receiver,
				   dcr_asprintf("dcr-ack 1\nversion %llu\nstate %s\nreceiver %s\n",
						(unsigned long long)version, hex, receiver),
				   e);
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

int dcr_nack_put(struct dcr_store *s, const char *policy, uint64_t version, const char *receiver,
		 const uint8_t *attempt, const char *error, struct dcr_err *e)
{
	int r = check_receiver(receiver, e);
	if (r)
		return r;
	char why[DCR_NACK_MAX + 1];
	size_t n = 0;
	for (; error && error[n] && n < DCR_NACK_MAX; n++)
		why[n] = error[n] >= 0x20 && error[n] < 0x7f ? error[n] : '?';
	why[n] = '\0';
	char at[48] = "";
	if (attempt) {
		memcpy(at, "attempt ", 8);
		dcr_hex(attempt, 16, at + 8);
		strcat(at, "\n");
	}
	return put_receiver_record(s, policy, version, receiver,
				   dcr_asprintf("dcr-nack 1\nversion %llu\nreceiver %s\n%serror %s\n",
						(unsigned long long)version, receiver, at,
						n ? why : "(no reason given)"),
				   e);
}

void dcr_acks_free(struct dcr_ack *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].receiver);
		free(v[i].error);
	}
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
		memset(&st, 0, sizeof(st));
		char why[DCR_NACK_MAX + 1];
		int nack = len > 11 && !memcmp(buf, "dcr-nack 1\n", 11);
		int ok = (nack || (len > 10 && !memcmp(buf, "dcr-ack 1\n", 10))) &&
			 !kv_u64((char *)buf, "version", &bv) && bv == ver &&
			 (nack || !kv_digest((char *)buf, "state", &st));
		if (nack && kv_get((char *)buf, "error", why, sizeof(why)))
			snprintf(why, sizeof(why), "(a report dcr cannot read)");
		char at[40];
		uint8_t att[16] = {0};
		int have_at = nack && !kv_get((char *)buf, "attempt", at, sizeof(at)) &&
			      !kv_attempt(at, att);
		free(buf);
		if (!ok)
			continue; /* neither: ignored, never counted */
		v[k].receiver = dcr_strdup(slash + 1);
		v[k].version = ver;
		v[k].state = st;
		v[k].error = nack ? dcr_strdup(why) : NULL;
		v[k].have_attempt = have_at;
		memcpy(v[k].attempt, att, 16);
		if (!v[k].receiver || (nack && !v[k].error))
			r = dcr_err_sys(e, ENOMEM, "acks");
		k++;
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
	char *name = policy ? dcr_asprintf("%s/refs/v%llu", policy, (unsigned long long)version)
			    : dcr_asprintf("refs/v%llu", (unsigned long long)version);
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

int dcr_policy_pack(struct dcr_store *s, const char *policy, uint64_t version,
		    dcr_digest *state, uint8_t attempt[16], struct dcr_err *e)
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
		memcpy(attempt, m.attempt, 16);
		dcr_manifest_release(&m);
	}
	free(buf);
	free(name);
	return r;
}

int dcr_policy_target(struct dcr_store *s, const char *policy, uint64_t version,
		      dcr_digest *state, struct dcr_err *e)
{
	uint8_t attempt[16];
	return dcr_policy_pack(s, policy, version, state, attempt, e);
}

/* Whether the failure report a ends a trainer's wait (o): it names the
 * attempt being committed, or either attempt is unknown and the report
 * was not in the wait's first listing (old[0..nold)) as it is now. */
static int report_counts(const struct dcr_policy_commit_opts *o, const struct dcr_ack *a,
			 const struct dcr_ack *old, size_t nold)
{
	if (o->have_attempt && a->have_attempt)
		return !memcmp(o->attempt, a->attempt, 16);
	for (size_t i = 0; i < nold; i++)
		if (old[i].error && !strcmp(old[i].receiver, a->receiver) &&
		    !strcmp(old[i].error, a->error) && old[i].have_attempt == a->have_attempt &&
		    !memcmp(old[i].attempt, a->attempt, 16))
			return 0;
	return 1;
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
	double start = dcr_now_s(), deadline = start + o->timeout_s;
	unsigned good = 0, had = 0, nap_ms = 25;
	struct dcr_ack *old = NULL; /* the first listing's records */
	size_t nold = 0;
	for (int first = 1;; first = 0) {
		r = dcr_policy_ref(s, policy, o->version, &d, e);
		if (!r) {
			dcr_digest_hex(&d, other);
			r = dcr_err_set(e, DCR_ECONFLICT,
					"policy '%s': version %llu is already committed (state %s)",
					policy, (unsigned long long)o->version, other);
			break;
		}
		if (r != DCR_ENOTFOUND)
			break;
		struct dcr_ack *v;
		size_t n;
		if ((r = dcr_acks_list(s, policy, o->version, &v, &n, e)))
			break;
		good = 0;
		unsigned failed = 0;
		const struct dcr_ack *f = NULL, *stale = NULL; /* reports, to tell */
		for (size_t i = 0; i < n; i++) {
			if (v[i].error && report_counts(o, &v[i], first ? v : old, first ? n : nold)) {
				failed++;
				f = f ? f : &v[i];
			} else if (v[i].error) {
				stale = stale ? stale : &v[i];
			} else {
				good += !memcmp(v[i].state.b, o->state.b, 32);
			}
		}
		if (acks_seen)
			*acks_seen = good;
		if (o->progress)
			o->progress(o->progress_ctx, good, o->expect, failed, dcr_now_s() - start);
		if (good >= o->expect) {
			dcr_acks_free(v, n);
			break;
		}
		if (failed > o->max_failed || dcr_now_s() >= deadline) {
			char told[DCR_NACK_MAX + 200] = "";
			if (f)
				snprintf(told, sizeof(told), "; %u receiver%s failed it, '%s': %s", failed,
					 failed == 1 ? "" : "s", f->receiver, f->error);
			else if (stale)
				snprintf(told, sizeof(told),
					 "; receiver '%s' reported failing %s: %s", stale->receiver,
					 stale->have_attempt && o->have_attempt
						 ? "another attempt of it"
						 : "it before this wait began",
					 stale->error);
			/* ended by the reports, or by the timeout */
			char after[48] = "";
			if (failed <= o->max_failed)
				snprintf(after, sizeof(after), " after %.0f s", o->timeout_s);
			r = dcr_err_set(e, DCR_ENOTFOUND,
					"policy '%s': %u of %u receivers acknowledged version %llu (state %.12s)%s; nothing committed%s",
					policy, good, o->expect, (unsigned long long)o->version, hex,
					after, told);
			dcr_acks_free(v, n);
			break;
		}
		if (first) {
			old = v;
			nold = n;
		} else {
			dcr_acks_free(v, n);
		}
		/* listed again after 25 ms, doubling to 100 ms while no new
		 * acknowledgement comes: the receivers of one refit tend to
		 * finish together, and the last one's wait is the refit's */
		if (good > had)
			nap_ms = 25;
		had = good;
		usleep(nap_ms * 1000);
		nap_ms = nap_ms * 2 > 100 ? 100 : nap_ms * 2;
	}
	dcr_acks_free(old, nold);
	if (r)
		return r;
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

/* Receivers' names first, each receiver's latest acknowledgement first. */
static int cmp_ack(const void *a, const void *b)
{
	const struct dcr_ack *x = a, *y = b;
	int c = strcmp(x->receiver, y->receiver);
	return c ? c : (x->version < y->version) - (x->version > y->version);
}

static int cmp_receiver(const void *a, const void *b)
{
	return strcmp(((const struct dcr_ack *)a)->receiver, ((const struct dcr_ack *)b)->receiver);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* What an object under NAME/ is, from rest (the name after "NAME/"): a
 * delta's pack (vV/...), a dense copy's (vV.dense/...), an
 * acknowledgement (acks/vV/ID) or something else (refs). *manifest: it is
 * a pack's manifest, which a push writes last. *len: the length of the
 * pack's directory component. */
enum gc_kind { GC_OTHER, GC_PACK, GC_DENSE, GC_ACK };

static enum gc_kind gc_kind(const char *rest, uint64_t *v, size_t *len, int *manifest)
{
	const char *sl = strchr(rest, '/');
	*manifest = 0;
	if (!sl)
		return GC_OTHER;
	*len = (size_t)(sl - rest);
	size_t stem = dcr_dense_stem(rest, *len);
	enum gc_kind k = !dcr_version_parse(rest, *len, v)			   ? GC_PACK
			 : stem < *len && !dcr_version_parse(rest, stem, v) ? GC_DENSE
									   : GC_OTHER;
	if (k != GC_OTHER) {
		*manifest = !strcmp(sl + 1, DCR_MANIFEST_NAME);
		return k;
	}
	const char *id;
	if (*len == 4 && !memcmp(rest, "acks", 4) && (id = strchr(sl + 1, '/')) &&
	    !dcr_version_parse(sl + 1, (size_t)(id - sl - 1), v))
		return GC_ACK;
	return GC_OTHER;
}

/* Append x to (*v)[0..*n), the array grown to 8, then doubled. */
static int add_version(uint64_t **v, size_t *n, uint64_t x)
{
	if (!*n || (*n >= 8 && !(*n & (*n - 1)))) {
		uint64_t *nv = realloc(*v, (*n ? 2 * *n : 8) * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		*v = nv;
	}
	(*v)[(*n)++] = x;
	return 0;
}

int dcr_policy_dense_holds(struct dcr_store *s, const char *policy, uint64_t v,
			   const dcr_digest *ref, char *why, size_t wlen)
{
	struct dcr_err e = {0};
	dcr_digest r, target;
	char a[65], b[65];
	char *name = policy ? dcr_asprintf("%s/v%llu.dense", policy, (unsigned long long)v)
			    : dcr_asprintf("v%llu.dense", (unsigned long long)v);
	struct dcr_manifest m;
	int rc = name ? 0 : dcr_err_sys(&e, ENOMEM, "dense copy");
	if (!rc && !ref && !(rc = dcr_policy_ref(s, policy, v, &r, &e)))
		ref = &r;
	if (!rc)
		rc = dcr_store_manifest_head(s, name, &m, &e);
	free(name);
	if (rc) {
		snprintf(why, wlen, "%s", e.msg);
		return 0;
	}
	target = m.target;
	if (!m.dense) {
		snprintf(why, wlen, "its manifest is not a dense copy's (dcr-diff --dense)");
		return 0;
	}
	if (memcmp(ref, &target, sizeof(*ref))) {
		dcr_digest_hex(&target, a);
		dcr_digest_hex(ref, b);
		snprintf(why, wlen, "it holds state %.12s, and v%llu is committed as %.12s",
			 a, (unsigned long long)v, b);
		return 0;
	}
	return 1;
}

/* Pass over the dense copies of committed versions that do not hold
 * their version's committed state (sv->bad_dense, with why): receivers
 * would catch up by them to a state no later delta applies to. */
static int check_dense(struct dcr_store *s, const char *policy, struct dcr_policy_survey *sv)
{
	char why[sizeof(((struct dcr_err *)0)->msg)];
	size_t w = 0;
	for (size_t i = 0; i < sv->ndense; i++) {
		uint64_t v = sv->dense[i];
		if (!sv->head.have || v > sv->head.version ||
		    dcr_policy_dense_holds(s, policy, v, NULL, why, sizeof(why))) {
			sv->dense[w++] = v;
			continue;
		}
		if (!(sv->nbad_dense & (sv->nbad_dense + 1))) { /* 0, 1, 3, 7, ...: grow */
			struct dcr_bad_dense *nb =
				realloc(sv->bad_dense, 2 * (sv->nbad_dense + 1) * sizeof(*nb));
			if (!nb)
				return -ENOMEM;
			sv->bad_dense = nb;
		}
		struct dcr_bad_dense *b = &sv->bad_dense[sv->nbad_dense];
		if (!(b->why = dcr_strdup(why)))
			return -ENOMEM;
		b->version = v;
		sv->nbad_dense++;
	}
	sv->ndense = w;
	return 0;
}

/* dcr_policy_survey, and with names the listing of NAME/ it was made from
 * (*names, *n: the caller frees them). */
static int survey(struct dcr_store *s, const char *policy, struct dcr_policy_survey *sv,
		  char ***names, size_t *n, struct dcr_err *e)
{
	char **nm = NULL;
	size_t nn = 0;
	memset(sv, 0, sizeof(*sv));
	int r = dcr_policy_head(s, policy, &sv->head, e);
	char *pfx = r ? NULL : dcr_asprintf("%s/", policy);
	size_t pl = pfx ? strlen(pfx) : 0;
	if (!r)
		r = pfx ? dcr_store_list(s, pfx, &nm, &nn, e) : dcr_err_sys(e, ENOMEM, "policy");
	for (size_t i = 0; !r && i < nn; i++) {
		uint64_t v;
		size_t len;
		int man;
		enum gc_kind k = gc_kind(nm[i] + pl, &v, &len, &man);
		if (man && (k == GC_PACK ? add_version(&sv->packs, &sv->npacks, v)
					 : add_version(&sv->dense, &sv->ndense, v)))
			r = dcr_err_sys(e, ENOMEM, "policy");
	}
	free(pfx);
	if (!r)
		r = dcr_acks_list(s, policy, UINT64_MAX, &sv->latest, &sv->nlatest, e);
	if (r) {
		dcr_store_names_free(nm, nn);
		return r;
	}
	if (sv->npacks)
		qsort(sv->packs, sv->npacks, sizeof(*sv->packs), cmp_u64);
	if (sv->ndense)
		qsort(sv->dense, sv->ndense, sizeof(*sv->dense), cmp_u64);
	if (check_dense(s, policy, sv)) {
		dcr_store_names_free(nm, nn);
		return dcr_err_sys(e, ENOMEM, "policy");
	}
	/* each receiver's latest acknowledgement, and its failure report
	 * if that is newer (records of a receiver come newest first) */
	struct dcr_ack *all = sv->latest;
	size_t nall = sv->nlatest, w = 0;
	sv->latest = NULL;
	sv->nlatest = 0;
	if (nall)
		qsort(all, nall, sizeof(*all), cmp_ack);
	sv->failed = dcr_calloc(nall + 1, sizeof(*sv->failed));
	/* first which to keep, the names all still in place: a receiver's
	 * first acknowledgement, and its first record if that is a report */
	char *keep = sv->failed ? dcr_calloc(nall + 1, 1) : NULL;
	for (size_t i = 0, from = 0, acked = 0; keep && i < nall; i++) {
		if (i && strcmp(all[i].receiver, all[i - 1].receiver)) {
			from = i; /* this receiver's records start here */
			acked = 0;
		}
		if (all[i].error)
			keep[i] = i == from ? 2 : 0;
		else
			keep[i] = acked++ ? 0 : 1;
	}
	for (size_t i = 0; keep && i < nall; i++) {
		if (keep[i] == 1) {
			all[w++] = all[i];
		} else if (keep[i] == 2) {
			sv->failed[sv->nfailed++] = all[i];
		} else {
			free(all[i].receiver);
			free(all[i].error);
		}
	}
	if (!keep) {
		free(sv->failed);
		sv->failed = NULL;
	}
	free(keep);
	if (!sv->failed) {
		dcr_acks_free(all, nall);
		dcr_store_names_free(nm, nn);
		return dcr_err_sys(e, ENOMEM, "policy");
	}
	sv->latest = all;
	sv->nlatest = w;
	if (names) {
		*names = nm;
		*n = nn;
	} else {
		dcr_store_names_free(nm, nn);
	}
	return 0;
}

int dcr_policy_survey(struct dcr_store *s, const char *policy, struct dcr_policy_survey *sv,
		      struct dcr_err *e)
{
	int r = survey(s, policy, sv, NULL, NULL, e);
	if (r)
		dcr_policy_survey_release(sv);
	return r;
}

void dcr_policy_survey_release(struct dcr_policy_survey *sv)
{
	dcr_acks_free(sv->latest, sv->nlatest);
	dcr_acks_free(sv->failed, sv->nfailed);
	free(sv->packs);
	free(sv->dense);
	for (size_t i = 0; i < sv->nbad_dense; i++)
		free(sv->bad_dense[i].why);
	free(sv->bad_dense);
	memset(sv, 0, sizeof(*sv));
}

/* The newest complete dense copy of a committed version (the survey kept
 * only those that hold their version's committed state): 0, or -1 when
 * there is none. */
static int newest_dense(const struct dcr_policy_survey *sv, uint64_t *dense)
{
	for (size_t i = sv->ndense; i-- > 0;)
		if (sv->dense[i] <= sv->head.version) {
			*dense = sv->dense[i];
			return 0;
		}
	return -1;
}

/* Whom the packs are kept for, from every receiver's latest
 * acknowledgement: the oldest of those waited for (*oldest, UINT64_MAX
 * for none), and whether one further behind than max_behind was let go
 * (it catches up by the dense copy dense, when there is one:
 * have_dense). */
static int gc_receivers(const struct dcr_policy_survey *sv, const struct dcr_gc_opts *o,
			int have_dense, uint64_t dense, uint64_t *oldest, int *let_go,
			struct dcr_gc_result *res)
{
	uint64_t head = sv->head.version;
	*oldest = UINT64_MAX;
	*let_go = 0;
	for (size_t i = 0; i < sv->nlatest; i++) {
		const struct dcr_ack *l = &sv->latest[i];
		if (head > l->version && head - l->version > o->max_behind) {
			int go = have_dense && dense > l->version;
			if (o->behind)
				o->behind(o->ctx, l->receiver, l->version, go);
			if (go) {
				*let_go = 1;
				continue;
			}
		}
		if (l->version < *oldest) {
			*oldest = l->version;
			free(res->held_by);
			if (!(res->held_by = dcr_strdup(l->receiver)))
				return -ENOMEM;
			res->held_at = l->version;
		}
	}
	return 0;
}

/* 1 if the acknowledgement rest ("acks/vV/ID") of version v is of no more
 * use: its receiver has acknowledged a later version, and v is committed
 * (a trainer may still be waiting for the acknowledgements of a version
 * that is not). */
static int ack_superseded(const struct dcr_policy_survey *sv, const char *rest, uint64_t v)
{
	struct dcr_ack key = {.receiver = strchr(rest + 5, '/') + 1};
	const struct dcr_ack *l =
		sv->nlatest ? bsearch(&key, sv->latest, sv->nlatest, sizeof(key), cmp_receiver) : NULL;
	return l && v < l->version && v <= sv->head.version;
}

/* Deleting what a GC removes, on several threads: a pack is hundreds of
 * payloads, and an object store answers each DELETE in tens of ms. */
struct gc_del {
	struct dcr_store *s;
	char **names; /* the names to delete */
	size_t n, next;
	pthread_mutex_t mu;
	int r;
	struct dcr_err e;
};

static void *gc_deleter(void *arg)
{
	struct gc_del *d = arg;
	for (;;) {
		pthread_mutex_lock(&d->mu);
		size_t i = d->r ? d->n : d->next++;
		pthread_mutex_unlock(&d->mu);
		if (i >= d->n)
			return NULL;
		struct dcr_err e = {0};
		int q = dcr_store_delete(d->s, d->names[i], &e);
		if (q && q != DCR_ENOTFOUND) {
			pthread_mutex_lock(&d->mu);
			if (!d->r) {
				d->r = q;
				d->e = e;
			}
			pthread_mutex_unlock(&d->mu);
		}
	}
}

/* Delete names[0..n) with up to parallel threads: 0, or the first error. */
static int gc_delete(struct dcr_store *s, char **names, size_t n, unsigned parallel,
		     struct dcr_err *e)
{
	struct gc_del d = {.s = s, .names = names, .n = n, .mu = PTHREAD_MUTEX_INITIALIZER};
	pthread_t t[64];
	unsigned k = 0;
	if (parallel > 64)
		parallel = 64;
	while (k + 1 < parallel && k + 1 < n && !pthread_create(&t[k], NULL, gc_deleter, &d))
		k++;
	gc_deleter(&d);
	for (unsigned i = 0; i < k; i++)
		pthread_join(t[i], NULL);
	if (d.r && e)
		*e = d.e;
	return d.r;
}

int dcr_policy_gc(struct dcr_store *s, const char *policy, const struct dcr_gc_opts *o,
		  struct dcr_gc_result *res, struct dcr_err *e)
{
	struct dcr_policy_survey sv;
	char **names = NULL;
	size_t n = 0;
	memset(res, 0, sizeof(*res));
	int r = survey(s, policy, &sv, &names, &n, e);
	if (r || !sv.head.have) {
		dcr_policy_survey_release(&sv);
		dcr_store_names_free(names, n);
		return r; /* nothing committed: nothing superseded */
	}
	uint64_t head = sv.head.version;
	res->have_head = 1;
	res->head = head;
	/* the newest complete dense copy of a committed version serves every
	 * receiver an older one would, with fewer deltas after it */
	uint64_t dense = 0, oldest;
	for (size_t i = 0; i < sv.nbad_dense; i++)
		if (o->bad_dense)
			o->bad_dense(o->ctx, sv.bad_dense[i].version, sv.bad_dense[i].why);
	int have_dense = !newest_dense(&sv, &dense), let_go;
	if (gc_receivers(&sv, o, have_dense, dense, &oldest, &let_go, res))
		r = dcr_err_sys(e, ENOMEM, "gc");
	/* packs at or below limit go: none while no receiver has said where
	 * it stands; never the last keep committed versions'; none a
	 * receiver waited for still needs; none after the dense copy a
	 * receiver let go catches up by */
	int any = sv.nlatest && head >= o->keep;
	uint64_t limit = any ? head - o->keep : 0;
	if (oldest < limit)
		limit = oldest;
	if (let_go && dense < limit)
		limit = dense;
	if (res->held_by && (!any || res->held_at >= head - o->keep)) {
		free(res->held_by); /* it held back nothing --keep let go */
		res->held_by = NULL;
	}
	size_t pl = strlen(policy) + 1;
	const char *cur = NULL; /* the pack being removed, and its objects */
	size_t cur_len = 0, count = 0;
	/* what goes: manifests first (del[0..nm)), so that a reader sees a
	 * pack whole or not at all, then the rest (from the end of del) */
	char **del = r ? NULL : dcr_calloc(n + 1, sizeof(*del));
	size_t nm = 0, nrest = 0;
	if (!r && !del)
		r = dcr_err_sys(e, ENOMEM, "gc");
	for (size_t i = 0; !r && i <= n; i++) {
		const char *rest = i < n ? names[i] + pl : NULL;
		uint64_t v = 0;
		size_t len = 0;
		int man = 0;
		enum gc_kind k = rest ? gc_kind(rest, &v, &len, &man) : GC_OTHER;
		int go = (k == GC_PACK && any && v <= limit) ||
			 (k == GC_DENSE && have_dense && v < dense) ||
			 (k == GC_ACK && ack_superseded(&sv, rest, v));
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
		if (man)
			del[nm++] = names[i];
		else
			del[n - ++nrest] = names[i];
	}
	unsigned par = o->parallel ? o->parallel : 4;
	if (!r && !o->dry_run)
		r = gc_delete(s, del, nm, par, e);
	if (!r && !o->dry_run)
		r = gc_delete(s, del + n - nrest, nrest, par, e);
	free(del);
	dcr_policy_survey_release(&sv);
	dcr_store_names_free(names, n);
	return r;
}

void dcr_gc_result_release(struct dcr_gc_result *res)
{
	free(res->held_by);
	res->held_by = NULL;
}
