/* commit.c - HEAD, applied and commits on a receiver; acks, refs and GC in
 * a store. See commit.h and dcr(7), COMMIT PROTOCOL. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "commit.h"

#define SMALL_MAX (1u << 20)
#define LOG_MAX (256u << 20)

struct steps {
	int fault_at, n;
};

static void step(struct steps *s)
{
	if (s && s->fault_at && ++s->n == s->fault_at)
		raise(SIGKILL);
}

int dcr_version_parse(const char *s, size_t n, uint64_t *v)
{
	if (n < 2 || s[0] != 'v' || (s[1] == '0' && n > 2) || n > 21)
		return -1;
	uint64_t x = 0;
	for (size_t i = 1; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

static int attempt_parse(const char *s, uint8_t a[16])
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		a[i] = (uint8_t)v;
	}
	return 0;
}

/* Atomic replace with a fault step between each durable action. */
static int write_small(const char *path, const char *text, struct steps *st, struct dcr_err *e)
{
	char *tmp = dcr_asprintf("%s.tmp", path);
	char *dir = dcr_dirname(path);
	int fd = -1, r = 0;
	if (!tmp || !dir) {
		r = dcr_err_sys(e, ENOMEM, "%s", path);
		goto out;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = dcr_err_sys(e, errno, "cannot create '%s'", tmp);
		goto out;
	}
	step(st);
	if ((r = dcr_write_full(fd, text, strlen(text)))) {
		r = dcr_err_sys(e, r, "cannot write '%s'", tmp);
		goto out;
	}
	step(st);
	if (fsync(fd)) {
		r = dcr_err_sys(e, errno, "cannot fsync '%s'", tmp);
		goto out;
	}
	close(fd);
	fd = -1;
	step(st);
	if (rename(tmp, path)) {
		r = dcr_err_sys(e, errno, "cannot rename '%s' to '%s'", tmp, path);
		goto out;
	}
	step(st);
	if ((r = dcr_fsync_dir(dir)))
		r = dcr_err_sys(e, r, "cannot fsync '%s'", dir);
out:
	if (fd >= 0)
		close(fd);
	if (r && tmp)
		unlink(tmp);
	free(tmp);
	free(dir);
	return r;
}

/* Read a small key-value file: "magic\nkey value\n...". Missing file: 1. */
static int read_kv(const char *path, const char *magic, char **buf, struct dcr_err *e)
{
	uint8_t *b;
	size_t len;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		return dcr_err_sys(e, errno, "cannot open '%s'", path);
	}
	close(fd);
	int r = dcr_read_file(path, SMALL_MAX, &b, &len, e);
	if (r)
		return r;
	size_t ml = strlen(magic);
	if (len < ml + 1 || memcmp(b, magic, ml) || b[ml] != '\n' || memchr(b, 0, len)) {
		free(b);
		return dcr_err_set(e, DCR_EFORMAT, "'%s' is not a %s file", path, magic);
	}
	*buf = (char *)b;
	return 0;
}

/* Value of "key " in a kv buffer, copied into out (at most n-1 chars). */
static int kv_get(const char *buf, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);
	for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, key, kl) && p[kl] == ' ') {
			const char *v = p + kl + 1, *end = strchr(v, '\n');
			size_t l = end ? (size_t)(end - v) : strlen(v);
			if (l >= n)
				return -1;
			memcpy(out, v, l);
			out[l] = '\0';
			return 0;
		}
	}
	return -1;
}

static int kv_u64(const char *buf, const char *key, uint64_t *v)
{
	char s[32], *end;
	if (kv_get(buf, key, s, sizeof(s)) || !s[0] || s[0] == '-')
		return -1;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*v = x;
	return 0;
}

static int kv_digest(const char *buf, const char *key, dcr_digest *d)
{
	char s[80];
	return kv_get(buf, key, s, sizeof(s)) || dcr_digest_parse_hex(s, d) ? -1 : 0;
}

int dcr_head_read(struct dcr_receiver *rc, struct dcr_head *h, struct dcr_err *e)
{
	memset(h, 0, sizeof(*h));
	char *p = dcr_receiver_path(rc, "HEAD"), *buf = NULL;
	int r = p ? read_kv(p, "dcr-head 1", &buf, e) : dcr_err_sys(e, ENOMEM, "HEAD");
	if (r == 1)
		r = 0;
	else if (!r) {
		if (kv_u64(buf, "version", &h->version) || kv_digest(buf, "state", &h->state))
			r = dcr_err_set(e, DCR_EFORMAT, "'%s' is malformed", p);
		else
			h->have = 1;
	}
	free(buf);
	free(p);
	return r;
}

int dcr_applied_read(struct dcr_receiver *rc, struct dcr_applied *a, struct dcr_err *e)
{
	memset(a, 0, sizeof(*a));
	char *p = dcr_receiver_path(rc, "applied"), *buf = NULL;
	int r = p ? read_kv(p, "dcr-applied 1", &buf, e) : dcr_err_sys(e, ENOMEM, "applied");
	if (r == 1)
		r = 0;
	else if (!r) {
		char at[40], ver[32];
		if (kv_digest(buf, "base", &a->base) || kv_digest(buf, "target", &a->target) ||
		    kv_get(buf, "attempt", at, sizeof(at)) || attempt_parse(at, a->attempt) ||
		    kv_get(buf, "version", ver, sizeof(ver)))
			r = dcr_err_set(e, DCR_EFORMAT, "'%s' is malformed", p);
		else {
			a->have = 1;
			if (strcmp(ver, "-")) {
				if (kv_u64(buf, "version", &a->version))
					r = dcr_err_set(e, DCR_EFORMAT, "'%s' is malformed", p);
				a->have_version = 1;
			}
		}
	}
	free(buf);
	free(p);
	return r;
}

int dcr_applied_write(struct dcr_receiver *rc, const struct dcr_applied *a, int fault_at,
		      struct dcr_err *e)
{
	struct steps st = {.fault_at = fault_at};
	char b[65], t[65], at[33], ver[32];
	dcr_digest_hex(&a->base, b);
	dcr_digest_hex(&a->target, t);
	dcr_hex(a->attempt, 16, at);
	if (a->have_version)
		snprintf(ver, sizeof(ver), "%llu", (unsigned long long)a->version);
	else
		strcpy(ver, "-");
	char *text = dcr_asprintf("dcr-applied 1\nbase %s\ntarget %s\nattempt %s\nversion %s\n", b,
				  t, at, ver);
	char *p = dcr_receiver_path(rc, "applied");
	int r = text && p ? write_small(p, text, &st, e) : dcr_err_sys(e, ENOMEM, "applied");
	free(text);
	free(p);
	return r;
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
		    dcr_digest_parse_hex(st, &ce.state) || attempt_parse(at, ce.attempt))
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
		      struct steps *st, struct dcr_err *e)
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
		step(st);
		if ((last != '\n' && dcr_write_full(fd, "\n", 1)) ||
		    dcr_write_full(fd, line, strlen(line)))
			r = dcr_err_sys(e, errno, "cannot write '%s'", p);
		else {
			step(st);
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

int dcr_commit_local(struct dcr_receiver *rc, const struct dcr_commit_opts *o,
		     struct dcr_commit_result *res, struct dcr_err *e)
{
	struct steps st = {.fault_at = o ? o->fault_at : 0};
	struct dcr_head h;
	struct dcr_applied a;
	struct dcr_ckpt *c = NULL;
	dcr_digest cur;
	char ch[65], want[65];
	memset(res, 0, sizeof(*res));
	int r = dcr_head_read(rc, &h, e);
	if (r || (r = dcr_applied_read(rc, &a, e)))
		return r;
	char *jp = dcr_receiver_path(rc, "journal");
	int pending = jp && !access(jp, F_OK);
	free(jp);
	if (pending)
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
		return dcr_err_set(e, DCR_EBASE,
				   "receiver '%s': the applied delta names no version; give --version",
				   rc->dir);
	}
	dcr_digest_hex(&a.target, want);
	res->version = version;
	res->state = a.target;
	memcpy(res->attempt, a.attempt, 16);
	if (h.have && h.version == version && !memcmp(h.state.b, a.target.b, 32)) {
		res->already = 1;
		r = log_commit(rc, res, &st, e); /* repair a log cut by a crash */
		res->steps = st.n;
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
		r = dcr_ckpt_state_id(c, &cur, dg, e);
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
	char *text = dcr_asprintf("dcr-head 1\nversion %llu\nstate %s\n",
				  (unsigned long long)version, want);
	char *p = dcr_receiver_path(rc, "HEAD");
	r = text && p ? write_small(p, text, &st, e) : dcr_err_sys(e, ENOMEM, "HEAD");
	free(text);
	free(p);
	if (!r)
		r = log_commit(rc, res, &st, e);
	if (!r)
		dcr_receiver_log(rc, "committed version %llu, state %s", (unsigned long long)version,
				 want);
	res->steps = st.n;
	return r;
}

/* ---- store ---- */

int dcr_ack_put(struct dcr_store *s, const char *policy, uint64_t version, const char *receiver,
		const dcr_digest *state, struct dcr_err *e)
{
	if (!receiver[0] || strchr(receiver, '/'))
		return dcr_err_set(e, DCR_EFORMAT, "receiver id '%s' must be one name component",
				   receiver);
	char hex[65];
	dcr_digest_hex(state, hex);
	char *name = dcr_asprintf("%s/acks/v%llu/%s", policy, (unsigned long long)version, receiver);
	char *text = dcr_asprintf("dcr-ack 1\nversion %llu\nstate %s\nreceiver %s\n",
				  (unsigned long long)version, hex, receiver);
	int r = !name || !text ? dcr_err_sys(e, ENOMEM, "ack") : dcr_store_check_name(name, e);
	if (!r)
		r = dcr_store_put(s, name, text, strlen(text), e);
	free(name);
	free(text);
	return r;
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
		int q = dcr_store_get(s, names[i], &buf, &len, e);
		if (q == DCR_ENOTFOUND)
			continue;
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
	int r = name ? dcr_store_get(s, name, &buf, &len, e) : dcr_err_sys(e, ENOMEM, "ref");
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

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int dcr_policy_commit(struct dcr_store *s, const char *policy,
		      const struct dcr_policy_commit_opts *o, unsigned *acks_seen,
		      struct dcr_err *e)
{
	struct steps st = {.fault_at = o->fault_at};
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
	double deadline = now_s() + o->timeout_s;
	unsigned good = 0;
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
		if (now_s() >= deadline)
			return dcr_err_set(e, DCR_ENOTFOUND,
					   "policy '%s': %u of %u receivers acknowledged version %llu (state %.12s) after %.0f s; nothing committed",
					   policy, good, o->expect, (unsigned long long)o->version, hex,
					   o->timeout_s);
		usleep(100 * 1000);
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
	step(&st);
	r = dcr_store_put_if_absent(s, name, text, strlen(text), e);
	step(&st);
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

struct latest {
	char *receiver;
	uint64_t version;
};

int dcr_policy_gc(struct dcr_store *s, const char *policy, uint64_t keep, int dry_run,
		  void (*cb)(void *ctx, uint64_t version, size_t objects), void *ctx,
		  uint64_t *removed, struct dcr_err *e)
{
	struct dcr_head h;
	struct dcr_ack *acks = NULL;
	size_t nacks = 0;
	char **names = NULL;
	size_t n = 0;
	char *pfx = NULL;
	*removed = 0;
	int r = dcr_policy_head(s, policy, &h, e);
	if (r || !h.have || h.version < keep)
		return r;
	if ((r = dcr_acks_list(s, policy, UINT64_MAX, &acks, &nacks, e)))
		return r;
	if (!nacks) {
		dcr_acks_free(acks, nacks);
		return 0; /* no receiver has said where it stands: keep everything */
	}
	/* the oldest of every receiver's latest acknowledgement */
	uint64_t oldest = UINT64_MAX;
	for (size_t i = 0; i < nacks; i++) {
		uint64_t latest = 0;
		for (size_t k = 0; k < nacks; k++)
			if (!strcmp(acks[k].receiver, acks[i].receiver) && acks[k].version > latest)
				latest = acks[k].version;
		if (latest < oldest)
			oldest = latest;
	}
	dcr_acks_free(acks, nacks);
	uint64_t limit = h.version - keep;
	if (oldest < limit)
		limit = oldest;
	pfx = dcr_asprintf("%s/", policy);
	r = pfx ? dcr_store_list(s, pfx, &names, &n, e) : dcr_err_sys(e, ENOMEM, "gc");
	size_t pl = pfx ? strlen(pfx) : 0;
	uint64_t cur = UINT64_MAX;
	size_t count = 0;
	for (size_t i = 0; !r && i <= n; i++) {
		uint64_t v = UINT64_MAX;
		int is_pack = 0, is_ack = 0;
		if (i < n) {
			const char *rest = names[i] + pl, *sl = strchr(rest, '/');
			if (sl && !dcr_version_parse(rest, (size_t)(sl - rest), &v))
				is_pack = 1;
			else if (!strncmp(rest, "acks/", 5) && (sl = strchr(rest + 5, '/')) &&
				 !dcr_version_parse(rest + 5, (size_t)(sl - rest - 5), &v))
				is_ack = 1;
		}
		if (is_pack && v != cur) {
			if (cur != UINT64_MAX && count) {
				(*removed)++;
				if (cb)
					cb(ctx, cur, count);
			}
			cur = v;
			count = 0;
		}
		if (i == n && cur != UINT64_MAX && count) {
			(*removed)++;
			if (cb)
				cb(ctx, cur, count);
		}
		if (i == n)
			break;
		if ((is_pack && v <= limit) || (is_ack && v < oldest)) {
			if (is_pack)
				count++;
			if (!dry_run) {
				int q = dcr_store_delete(s, names[i], e);
				if (q && q != DCR_ENOTFOUND)
					r = q;
			}
		}
	}
	dcr_store_names_free(names, n);
	free(pfx);
	return r;
}
