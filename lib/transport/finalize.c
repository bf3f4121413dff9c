/* finalize.c - the manifest of a pack that N producers pushed, joined from
 * their summaries (see finalize.h). It moves the summaries and 32 bytes of
 * each payload, never the payloads. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/manifest.h"
#include "core/summary.h"
#include "core/util.h"
#include "transport/finalize.h"
#include "transport/names.h"

struct got {
	struct dcr_summary s;
	int ok;
	char *what;	  /* its name in the store, for messages */
	char why[256]; /* why it is not in yet */
};

/* Every payload the summary lists is in the store and ends with the
 * trailer the summary names: 0, 1 when one is not (yet), or an error. */
static int check_payloads(struct dcr_store *s, const char *name, struct got *g,
			  uint64_t *bytes, struct dcr_err *e)
{
	const struct dcr_summary *sm = &g->s;
	size_t n = sm->npayloads;
	struct dcr_store_job *jobs = dcr_calloc(n + 1, sizeof(*jobs));
	char **on = dcr_calloc(n + 1, sizeof(*on));
	uint8_t (*tr)[32] = dcr_calloc(n + 1, 32);
	int r = 0;
	if (!jobs || !on || !tr) {
		r = dcr_err_sys(e, ENOMEM, "finalize");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		on[i] = dcr_asprintf("%s/payload-%06u.dcrp", name, sm->pindex[i]);
		if (!on[i]) {
			r = dcr_err_sys(e, ENOMEM, "finalize");
			goto out;
		}
		jobs[i].op = DCR_STORE_GET_RANGE;
		jobs[i].name = on[i];
		jobs[i].off = sm->psize[i] - 32;
		jobs[i].len = 32;
		jobs[i].dst = tr[i];
	}
	struct dcr_err e2;
	if (n)
		dcr_store_run(s, jobs, n, &e2);
	for (size_t i = 0; i < n && !r; i++) {
		if (jobs[i].rc == DCR_ENOTFOUND || jobs[i].rc == DCR_EFORMAT) {
			snprintf(g->why, sizeof(g->why), "payload %u is %s", sm->pindex[i],
				 jobs[i].rc == DCR_ENOTFOUND ? "not in the store"
							     : "shorter than its summary says");
			r = 1;
		} else if (jobs[i].rc) {
			*e = jobs[i].err;
			r = jobs[i].rc;
		} else if (memcmp(tr[i], sm->pdigest[i].b, 32)) {
			snprintf(g->why, sizeof(g->why), "payload %u is not the one its summary names",
				 sm->pindex[i]);
			r = 1;
		}
		*bytes += 32;
	}
out:
	for (size_t i = 0; on && i < n; i++)
		free(on[i]);
	free(on);
	free(jobs);
	free(tr);
	return r;
}

/* Producer p's summary: 0 when it is in, 1 when not yet, or an error. */
static int fetch_summary(struct dcr_store *s, const char *name, uint32_t p, uint32_t n,
			 struct got *g, struct dcr_finalize_stats *st, struct dcr_err *e)
{
	char *sn = dcr_summary_name(p);
	char *on = sn ? dcr_asprintf("%s/%s", name, sn) : NULL;
	uint8_t *buf;
	size_t len;
	int r;
	free(sn);
	if (!on)
		return dcr_err_sys(e, ENOMEM, "finalize");
	free(g->what);
	g->what = dcr_asprintf("%s/%s", dcr_store_url(s), on);
	if (!g->what) {
		free(on);
		return dcr_err_sys(e, ENOMEM, "finalize");
	}
	r = dcr_store_get(s, on, &buf, &len, e);
	free(on);
	if (r == DCR_ENOTFOUND) {
		snprintf(g->why, sizeof(g->why), "no summary");
		return 1;
	}
	if (r)
		return r;
	st->summary_bytes += len;
	r = dcr_summary_parse(buf, len, g->what, &g->s, e);
	free(buf); /* the parsed summary holds copies of what it needs */
	if (r)
		goto drop;
	if (g->s.producer != p) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s holds producer %u's summary (a duplicated summary)",
				g->what, g->s.producer);
		goto drop;
	}
	if (g->s.nproducers != n) {
		r = dcr_err_set(e, DCR_EFORMAT, "%s is from a pack of %u producers, not %u", g->what,
				g->s.nproducers, n);
		goto drop;
	}
	if (!(r = check_payloads(s, name, g, &st->check_bytes, e))) {
		g->ok = 1;
		return 0;
	}
drop:
	dcr_summary_release(&g->s);
	return r;
}

/* Names of summaries of producers at or past n: an error. */
static int check_listing(struct dcr_store *s, const char *name, uint32_t n, struct dcr_err *e)
{
	char **names = NULL;
	size_t k = 0;
	char *pfx = dcr_asprintf("%s/summary-", name);
	int r = pfx ? dcr_store_list(s, pfx, &names, &k, e) : dcr_err_sys(e, ENOMEM, "finalize");
	for (size_t i = 0; i < k && !r; i++) {
		const char *b = strrchr(names[i], '/');
		uint32_t p;
		if (b && dcr_summary_name_parse(b + 1, &p) && p >= n)
			r = dcr_err_set(e, DCR_EFORMAT,
					"'%s' in '%s' is from producer %u, but the pack has %u producers",
					names[i], dcr_store_url(s), p, n);
	}
	dcr_store_names_free(names, k);
	free(pfx);
	return r;
}

static int wait_summaries(struct dcr_store *s, const char *name, const struct dcr_finalize_opts *o,
			  struct got *g, struct dcr_finalize_stats *st, struct dcr_err *e)
{
	uint32_t n = o->producers, have = 0;
	double t0 = dcr_now_s(), deadline = t0 + o->timeout_s;
	int r;
	for (;;) {
		if ((r = check_listing(s, name, n, e)))
			return r;
		for (uint32_t p = 0; p < n; p++) {
			if (g[p].ok)
				continue;
			if ((r = fetch_summary(s, name, p, n, &g[p], st, e)) < 0)
				return r;
			if (!r) {
				have++;
				if (o->progress)
					o->progress(o->progress_ctx, have, n);
			}
		}
		if (have == n)
			break;
		if (dcr_now_s() >= deadline) {
			char list[512] = "";
			size_t at = 0, shown = 0;
			for (uint32_t p = 0; p < n && at < sizeof(list) - 80; p++)
				if (!g[p].ok && shown++ < 8)
					at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u (%s)",
							       at ? ", " : "", p, g[p].why);
			st->wait_s = dcr_now_s() - t0;
			return dcr_err_set(e, DCR_ENOTFOUND,
					   "pack '%s' in '%s': %u of %u producers not in after %.0f s: %s%s; no manifest written",
					   name, dcr_store_url(s), n - have, n, o->timeout_s, list,
					   n - have > 8 ? ", ..." : "");
		}
		usleep(200 * 1000);
	}
	st->wait_s = dcr_now_s() - t0;
	return 0;
}

/* The manifest goes up last; one already there must be these bytes. */
static int put_manifest(struct dcr_store *s, const char *name, const struct dcr_finalize_opts *o,
			const struct dcr_buf *man, struct dcr_finalize_stats *st, struct dcr_err *e)
{
	char *mo = dcr_asprintf("%s/%s", name, DCR_MANIFEST_NAME);
	char *so = dcr_asprintf("%s/%s", name, DCR_MANIFEST_SIG_NAME);
	uint8_t *old = NULL;
	size_t ol = 0;
	char *sig = NULL;
	size_t sl = 0;
	int r = 0;
	if (!mo || !so) {
		r = dcr_err_sys(e, ENOMEM, "finalize");
		goto out;
	}
	r = dcr_store_get(s, mo, &old, &ol, e);
	if (!r) {
		if (ol != man->len || memcmp(old, man->p, ol))
			r = dcr_err_set(e, DCR_ECONFLICT,
					"pack '%s' in '%s' already has another manifest: it is final",
					name, dcr_store_url(s));
		goto out; /* finalized before: the same manifest */
	}
	if (r != DCR_ENOTFOUND)
		goto out;
	r = 0;
	if (o->sign) {
		if ((r = dcr_sign(o->sign, man->p, man->len, o->sign_pub, &sig, &sl, e)))
			goto out;
		dcr_fault_point(o->fault);
		if ((r = dcr_store_put(s, so, sig, sl, e)))
			goto out;
		st->written_bytes += sl;
	}
	dcr_fault_point(o->fault);
	if (!(r = dcr_store_put(s, mo, man->p, man->len, e)))
		st->written_bytes += man->len;
out:
	free(old);
	free(sig);
	free(mo);
	free(so);
	return r;
}

int dcr_finalize(struct dcr_store *s, const char *name, const struct dcr_finalize_opts *o,
		 struct dcr_finalize_stats *st, struct dcr_err *e)
{
	uint32_t n = o->producers;
	struct dcr_finalize_stats st0 = {0};
	struct dcr_manifest m = {0};
	struct dcr_buf man = {0};
	if (!st)
		st = &st0;
	memset(st, 0, sizeof(*st));
	if (!n || n > DCR_PRODUCERS_MAX)
		return dcr_err_set(e, -EINVAL, "finalize: %u producers (1 to %d)", n,
				   DCR_PRODUCERS_MAX);
	if (o->sign && !o->have_version)
		return dcr_err_set(e, -EINVAL, "a signed pack must name the version it reaches");
	struct got *g = dcr_calloc(n, sizeof(*g));
	const char **names = dcr_calloc(n, sizeof(*names));
	struct dcr_summary *v = dcr_calloc(n, sizeof(*v));
	int r;
	if (!g || !names || !v) {
		r = dcr_err_sys(e, ENOMEM, "finalize");
		goto out;
	}
	if ((r = wait_summaries(s, name, o, g, st, e)))
		goto out;
	for (uint32_t p = 0; p < n; p++) {
		v[p] = g[p].s;
		names[p] = g[p].what;
	}
	if ((r = dcr_summaries_join(v, names, n, &m, e)))
		goto out;
	if (o->have_version) {
		m.have_version = 1;
		m.version = o->version;
		if (o->policy && !(m.policy = strdup(o->policy))) {
			r = dcr_err_sys(e, ENOMEM, "finalize");
			goto out;
		}
	}
	if ((r = dcr_manifest_build(&m, &man, e)))
		goto out;
	struct dcr_manifest check;
	if ((r = dcr_manifest_parse(man.p, man.len, "the joined manifest", &check, e)))
		goto out;
	dcr_manifest_release(&check);
	st->payloads = m.npayloads;
	st->tensors = m.ntensors;
	st->target = m.target;
	for (uint32_t i = 0; i < m.npayloads; i++)
		st->delta_bytes += m.psize[i];
	r = put_manifest(s, name, o, &man, st, e);
out:
	for (uint32_t p = 0; g && p < n; p++) {
		dcr_summary_release(&g[p].s);
		free(g[p].what);
	}
	free(g);
	free(names);
	free(v);
	dcr_manifest_release(&m);
	dcr_buf_free(&man);
	return r;
}
