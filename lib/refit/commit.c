/* commit.c - a receiver's HEAD, its applied record and its commit log.
 * See commit.h and dcr(7), COMMIT PROTOCOL. */
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

#include "core/file.h"
#include "core/state.h"
#include "core/util.h"
#include "refit/apply.h"
#include "refit/commit.h"
#include "refit/record.h"

#define LOG_MAX (256u << 20)

/* The version of a record (buf) of magic's kind ("dcr-head 2": "dcr-head
 * N") past magic's own, written by a newer dcr; else 0. */
static unsigned record_newer(const char *buf, size_t len, const char *magic)
{
	const char *sp = strchr(magic, ' ');
	size_t kl = sp ? (size_t)(sp - magic + 1) : 0;
	unsigned long v = 0, have = sp ? strtoul(sp + 1, NULL, 10) : 0;
	if (!sp || len <= kl || memcmp(buf, magic, kl))
		return 0;
	size_t i = kl;
	while (i < len && i < kl + 9 && buf[i] >= '0' && buf[i] <= '9')
		v = v * 10 + (unsigned long)(buf[i++] - '0');
	if (i == kl || i == len || buf[i] != '\n')
		return 0;
	return v > have ? (unsigned)v : 0;
}

/* .dcr/NAME at p read, once: 1 absent, 0 *buf holds it, or an error; a
 * record of an older dcr (old_magic, may be NULL), whose state ids were
 * SHA-256 (see dcr(7), UPGRADING), and one of a newer dcr, are refused
 * with what to do; *damaged when it is there but is none of these. */
static int record_read(struct dcr_receiver *rc, const char *p, const char *magic,
		       const char *old_magic, char **buf, int *damaged, struct dcr_err *e)
{
	size_t len;
	int r = kv_read_any(p, buf, &len, e);
	unsigned v;
	*damaged = 0;
	if (r || kv_is(*buf, len, magic))
		return r;
	if (old_magic && kv_is(*buf, len, old_magic))
		r = dcr_err_set(e, DCR_EFORMAT,
				"'%s' was written by an older dcr (version 1 state ids): remove '%s/.dcr/HEAD' and '%s/.dcr/applied'; the next delta is checked against the files as always (dcr(7), UPGRADING)",
				p, rc->dir, rc->dir);
	else if ((v = record_newer(*buf, len, magic)))
		r = dcr_err_set(e, DCR_EFORMAT,
				"'%s' was written by a newer dcr (a version %u record; this one reads %s): upgrade dcr here",
				p, v, magic);
	else {
		*damaged = 1;
		r = dcr_err_set(e, DCR_EFORMAT, "'%s' is not a %s file", p, magic);
	}
	free(*buf);
	*buf = NULL;
	return r;
}

/* The error of a damaged record (a disk's damage, an edit by hand), with
 * the way out. */
static int damaged_record(const char *p, const char *magic, const char *way, struct dcr_err *e)
{
	return dcr_err_set(e, DCR_EFORMAT, "'%s' is damaged (not a %s record): move it aside; %s", p,
			   magic, way);
}

int dcr_head_read(struct dcr_receiver *rc, struct dcr_head *h, struct dcr_err *e)
{
	memset(h, 0, sizeof(*h));
	char *p = dcr_receiver_path(rc, "HEAD"), *buf = NULL;
	int damaged = 0;
	int r = p ? record_read(rc, p, "dcr-head 2", "dcr-head 1", &buf, &damaged, e)
		  : dcr_err_sys(e, ENOMEM, "HEAD");
	if (r == 1)
		r = 0;
	else if (!r && (kv_u64(buf, "version", &h->version) || kv_digest(buf, "state", &h->state)))
		damaged = 1;
	else if (!r)
		h->have = 1;
	if (damaged)
		r = damaged_record(p, "dcr-head 2",
				   "the receiver then counts as never committed, and its next dcr-apply and dcr-commit go on as before (each delta is checked against the files, not against HEAD; give dcr-commit --version V the version they reach)",
				   e);
	free(buf);
	free(p);
	return r;
}

int dcr_policy_read(struct dcr_receiver *rc, char *out, size_t n, struct dcr_err *e)
{
	char *p = dcr_receiver_path(rc, "policy"), *buf = NULL;
	int damaged = 0;
	int r = p ? record_read(rc, p, "dcr-policy 1", NULL, &buf, &damaged, e)
		  : dcr_err_sys(e, ENOMEM, "policy");
	*out = '\0';
	if (r == 1)
		r = 0;
	else if (!r && (kv_get(buf, "policy", out, n) || !*out))
		damaged = 1;
	if (damaged)
		r = damaged_record(p, "dcr-policy 1",
				   "the receiver then follows the policy its next signed pack names, or --policy",
				   e);
	free(buf);
	free(p);
	return r;
}

int dcr_policy_write(struct dcr_receiver *rc, const char *policy, struct dcr_err *e)
{
	char *text = dcr_asprintf("dcr-policy 1\npolicy %s\n", policy);
	char *p = dcr_receiver_path(rc, "policy");
	int r = text && p ? kv_write(p, text, NULL, e) : dcr_err_sys(e, ENOMEM, "policy");
	free(text);
	free(p);
	return r;
}

int dcr_applied_read(struct dcr_receiver *rc, struct dcr_applied *a, struct dcr_err *e)
{
	memset(a, 0, sizeof(*a));
	char *p = dcr_receiver_path(rc, "applied"), *buf = NULL;
	int damaged = 0;
	int r = p ? record_read(rc, p, "dcr-applied 2", "dcr-applied 1", &buf, &damaged, e)
		  : dcr_err_sys(e, ENOMEM, "applied");
	if (r == 1)
		r = 0;
	else if (!r) {
		char at[40], ver[32];
		if (kv_digest(buf, "base", &a->base) || kv_digest(buf, "target", &a->target) ||
		    kv_get(buf, "attempt", at, sizeof(at)) || kv_attempt(at, a->attempt) ||
		    kv_get(buf, "version", ver, sizeof(ver)) ||
		    (strcmp(ver, "-") && kv_u64(buf, "version", &a->version)))
			damaged = 1;
		else {
			a->have = 1;
			a->have_version = strcmp(ver, "-") != 0;
		}
	}
	if (damaged)
		r = damaged_record(p, "dcr-applied 2",
				   "then apply the last delta again (one whose target the files hold already is recorded, not applied twice) and commit",
				   e);
	free(buf);
	free(p);
	return r;
}

int dcr_applied_write(struct dcr_receiver *rc, const struct dcr_applied *a, struct dcr_fault *fault,
		      struct dcr_err *e)
{
	char b[65], t[65], at[33], ver[32];
	dcr_digest_hex(&a->base, b);
	dcr_digest_hex(&a->target, t);
	dcr_hex(a->attempt, 16, at);
	if (a->have_version)
		snprintf(ver, sizeof(ver), "%llu", (unsigned long long)a->version);
	else
		strcpy(ver, "-");
	char *text = dcr_asprintf("dcr-applied 2\nbase %s\ntarget %s\nattempt %s\nversion %s\n", b,
				  t, at, ver);
	char *p = dcr_receiver_path(rc, "applied");
	int r = text && p ? kv_write(p, text, fault, e) : dcr_err_sys(e, ENOMEM, "applied");
	free(text);
	free(p);
	return r;
}

int dcr_applied_record(struct dcr_receiver *rc, const struct dcr_apply_result *res,
		       int have_version, uint64_t version, struct dcr_fault *fault,
		       struct dcr_err *e)
{
	struct dcr_applied ap = {.have = 1, .base = res->base, .target = res->target,
				 .have_version = have_version, .version = version};
	memcpy(ap.attempt, res->attempt, 16);
	if (res->already) {
		struct dcr_applied old;
		struct dcr_err ignored;
		/* keep the record of the apply that got here, when it is this one */
		if (!dcr_applied_read(rc, &old, &ignored) && old.have &&
		    !memcmp(old.target.b, res->target.b, 32)) {
			ap.base = old.base;
			if (!have_version && old.have_version) {
				ap.have_version = 1;
				ap.version = old.version;
			}
		}
	}
	return dcr_applied_write(rc, &ap, fault, e);
}

int dcr_commit_log(struct dcr_receiver *rc, struct dcr_commit_entry **v, size_t *n,
		   struct dcr_err *e)
{
	*v = NULL;
	*n = 0;
	char *p = dcr_receiver_path(rc, "commits");
	uint8_t *buf = NULL;
	size_t len = 0;
	if (!p)
		return dcr_err_sys(e, ENOMEM, "commits");
	if (access(p, F_OK)) {
		free(p);
		return 0;
	}
	int r = dcr_read_file(p, LOG_MAX, &buf, &len, e);
	size_t cap = 0;
	char *save = NULL;
	for (char *ln = r ? NULL : strtok_r((char *)buf, "\n", &save); ln;
	     ln = strtok_r(NULL, "\n", &save)) {
		struct dcr_commit_entry ce = {0};
		char st[80], at[40];
		unsigned long long ver;
		if (sscanf(ln, "%llu\t%79s\t%39s\t%lld", &ver, st, at, &ce.time) != 4 ||
		    dcr_digest_parse_hex(st, &ce.state) || kv_attempt(at, ce.attempt))
			continue; /* a torn last line from a crash: ignored */
		ce.version = ver;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			struct dcr_commit_entry *nv = realloc(*v, cap * sizeof(**v));
			if (!nv) {
				r = dcr_err_sys(e, ENOMEM, "commits");
				break;
			}
			*v = nv;
		}
		(*v)[(*n)++] = ce;
	}
	free(buf);
	free(p);
	return r;
}

/* Append the HEAD commit to .dcr/commits unless it is already the last line. */
static int log_commit(struct dcr_receiver *rc, const struct dcr_commit_result *c,
		      struct dcr_fault *st, struct dcr_err *e)
{
	struct dcr_commit_entry *v;
	size_t n;
	int r = dcr_commit_log(rc, &v, &n, e);
	if (r)
		return r;
	int have = n && v[n - 1].version == c->version && !memcmp(v[n - 1].state.b, c->state.b, 32);
	free(v);
	if (have)
		return 0;
	char s[65], at[33];
	dcr_digest_hex(&c->state, s);
	dcr_hex(c->attempt, 16, at);
	char *line = dcr_asprintf("%llu\t%s\t%s\t%lld\n", (unsigned long long)c->version, s, at,
				  (long long)time(NULL));
	char *p = dcr_receiver_path(rc, "commits");
	int fd = p ? open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
	if (!line || fd < 0)
		r = dcr_err_sys(e, line ? errno : ENOMEM, "cannot open '%s'", p ? p : "commits");
	else {
		/* a torn line left by a crash is ended first, so it stays alone */
		struct stat sb;
		char last = '\n';
		if (!fstat(fd, &sb) && sb.st_size > 0)
			dcr_pread_full(fd, &last, 1, (uint64_t)sb.st_size - 1);
		dcr_fault_point(st);
		if ((last != '\n' && dcr_write_full(fd, "\n", 1)) ||
		    dcr_write_full(fd, line, strlen(line)))
			r = dcr_err_sys(e, errno, "cannot write '%s'", p);
		else {
			dcr_fault_point(st);
			if (fsync(fd))
				r = dcr_err_sys(e, errno, "cannot fsync '%s'", p);
		}
	}
	if (fd >= 0)
		close(fd);
	free(line);
	free(p);
	return r;
}

int dcr_commit_status(struct dcr_receiver *rc, struct dcr_commit_status *st, struct dcr_err *e)
{
	memset(st, 0, sizeof(*st));
	int r = dcr_head_read(rc, &st->head, e);
	if (r || (r = dcr_applied_read(rc, &st->applied, e)))
		return r;
	char *jp = dcr_receiver_path(rc, "journal");
	if (!jp)
		return dcr_err_sys(e, ENOMEM, "journal");
	st->journal = !access(jp, F_OK);
	free(jp);
	st->uncommitted = st->applied.have &&
			  (!st->head.have ||
			   memcmp(st->applied.target.b, st->head.state.b, 32));
	return 0;
}

int dcr_commit_local(struct dcr_receiver *rc, const struct dcr_commit_opts *o,
		     struct dcr_commit_result *res, struct dcr_err *e)
{
	struct dcr_fault *st = o ? o->fault : NULL;
	struct dcr_commit_status cs;
	struct dcr_ckpt *c = NULL;
	dcr_digest cur;
	char ch[65], want[65];
	memset(res, 0, sizeof(*res));
	int r = dcr_commit_status(rc, &cs, e);
	if (r)
		return r;
	const struct dcr_head h = cs.head;
	const struct dcr_applied a = cs.applied;
	if (cs.journal)
		return dcr_err_set(e, DCR_EBASE,
				   "receiver '%s' has an interrupted apply; run dcr-apply --recover first",
				   rc->dir);
	if (!a.have)
		return dcr_err_set(e, DCR_EBASE,
				   "receiver '%s' has no applied delta to commit (run dcr-apply first)",
				   rc->dir);
	uint64_t version;
	if (o && o->have_version) {
		if (a.have_version && a.version != o->version)
			return dcr_err_set(e, DCR_EBASE,
					   "receiver '%s' applied version %llu, not %llu", rc->dir,
					   (unsigned long long)a.version,
					   (unsigned long long)o->version);
		version = o->version;
	} else if (a.have_version) {
		version = a.version;
	} else {
		/* nothing names the version: the next one after HEAD, unless HEAD
		 * holds the applied state already (a rerun, or one cut by a crash) */
		res->from_head = 1;
		if (h.have && !memcmp(h.state.b, a.target.b, 32))
			version = h.version;
		else if (h.have && h.version == UINT64_MAX)
			return dcr_err_set(e, DCR_EBASE, "receiver '%s': HEAD is at the last version",
					   rc->dir);
		else
			version = h.have ? h.version + 1 : 1;
	}
	dcr_digest_hex(&a.target, want);
	res->version = version;
	res->state = a.target;
	memcpy(res->attempt, a.attempt, 16);
	if (h.have && h.version == version && !memcmp(h.state.b, a.target.b, 32)) {
		res->already = 1;
		r = log_commit(rc, res, st, e); /* repair a log cut by a crash */
		return r;
	}
	/* a new attempt of HEAD's version: applied from HEAD's state, and named
	 * that version when it was applied (not only now) */
	if (h.have && (h.version > version ||
		       (h.version == version &&
			(memcmp(a.base.b, h.state.b, 32) || !a.have_version))))
		return dcr_err_set(e, DCR_EBASE,
				   "receiver '%s' is already at version %llu; version %llu would not move it forward",
				   rc->dir, (unsigned long long)h.version, (unsigned long long)version);
	/* the files must hold exactly the applied target, now */
	if ((r = dcr_ckpt_open(rc->dir, &c, e)))
		return r;
	if (o && o->full) {
		dcr_digest *dg = dcr_calloc(c->ntensors, sizeof(*dg));
		if (!dg) {
			dcr_ckpt_close(c);
			return dcr_err_sys(e, ENOMEM, "commit");
		}
		r = dcr_ckpt_digests_progress(c, dg, NULL, rc->threads, o->progress, o->progress_ctx);
		if (r)
			r = dcr_err_sys(e, -r, "cannot hash '%s'", c->path);
		else
			dcr_ckpt_state_from(c, dg, &cur);
		if (!r && !memcmp(cur.b, a.target.b, 32))
			dcr_receiver_save_state(rc, c, &cur, dg, e); /* best effort */
		free(dg);
	} else {
		r = dcr_receiver_state(rc, c, 1, &cur, NULL, NULL, e);
	}
	dcr_ckpt_close(c);
	if (r)
		return r;
	if (memcmp(cur.b, a.target.b, 32)) {
		dcr_digest_hex(&cur, ch);
		return dcr_err_set(e, DCR_EBASE,
				   "receiver '%s' does not hold the applied target (files %.12s, applied %.12s); nothing committed",
				   rc->dir, ch, want);
	}
	char *text = dcr_asprintf("dcr-head 2\nversion %llu\nstate %s\n",
				  (unsigned long long)version, want);
	char *p = dcr_receiver_path(rc, "HEAD");
	r = text && p ? kv_write(p, text, st, e) : dcr_err_sys(e, ENOMEM, "HEAD");
	free(text);
	free(p);
	if (!r)
		r = log_commit(rc, res, st, e);
	if (!r)
		dcr_receiver_log(rc, "committed version %llu, state %s", (unsigned long long)version,
				 want);
	return r;
}

