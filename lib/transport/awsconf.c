/* awsconf.c - see awsconf.h. */
#include "config.h"

#include "transport/awsconf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/util.h"

static int blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* [a, b) without white space at either end */
static void trim(const char **a, const char **b)
{
	while (*a < *b && blank(**a))
		(*a)++;
	while (*b > *a && blank((*b)[-1]))
		(*b)--;
}

char *dcr_aws_ini_get(const char *text, size_t n, const char *section, const char *key,
		      int *found)
{
	const char *p = text, *end = text + n;
	size_t sl = strlen(section), kl = strlen(key);
	int in = 0;
	const char *va = NULL, *vb = NULL;
	if (found)
		*found = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *a = p, *b = nl ? nl : end;
		p = nl ? nl + 1 : end;
		if (a < b && blank(*a) && *a != '\r') /* indented: nested */
			continue;
		trim(&a, &b);
		if (a == b || *a == '#' || *a == ';')
			continue;
		if (*a == '[') {
			const char *c = memchr(a, ']', (size_t)(b - a));
			const char *na = a + 1, *nb = c ? c : a + 1;
			trim(&na, &nb);
			in = c && (size_t)(nb - na) == sl && !memcmp(na, section, sl);
			if (in && found)
				*found = 1;
			continue;
		}
		if (!in)
			continue;
		const char *eq = memchr(a, '=', (size_t)(b - a));
		if (!eq)
			continue;
		const char *ka = a, *kb = eq, *xa = eq + 1, *xb = b;
		trim(&ka, &kb);
		trim(&xa, &xb);
		if ((size_t)(kb - ka) == kl && !memcmp(ka, key, kl)) {
			va = xa;
			vb = xb;
		}
	}
	return va && vb > va ? strndup(va, (size_t)(vb - va)) : NULL;
}

/* The file named by env, else ~/.aws/name: its text, or none (*len 0,
 * *out NULL) when it does not exist. */
static int read_conf(const char *env, const char *name, uint8_t **out, size_t *len,
		     struct dcr_err *e)
{
	*out = NULL;
	*len = 0;
	const char *v = getenv(env), *home = getenv("HOME");
	char *path;
	if (v && *v)
		path = dcr_strdup(v);
	else if (home && *home)
		path = dcr_asprintf("%s/.aws/%s", home, name);
	else
		return 0;
	if (!path)
		return dcr_err_sys(e, ENOMEM, "cannot read the AWS %s file", name);
	int r = dcr_read_file(path, DCR_AWS_FILE_MAX, out, len, e);
	if (r == -ENOENT || r == -ENOTDIR) { /* no such file: nothing in it */
		if (e)
			e->code = 0;
		r = 0;
	}
	free(path);
	return r;
}

int dcr_aws_profile_load(struct dcr_aws_profile *p, struct dcr_err *e)
{
	memset(p, 0, sizeof(*p));
	const char *named = getenv("AWS_PROFILE");
	if (!named || !*named)
		named = getenv("AWS_DEFAULT_PROFILE");
	int explicit = named && *named;
	uint8_t *cred = NULL, *conf = NULL;
	size_t cred_n = 0, conf_n = 0;
	int r = read_conf("AWS_SHARED_CREDENTIALS_FILE", "credentials", &cred, &cred_n, e);
	if (!r)
		r = read_conf("AWS_CONFIG_FILE", "config", &conf, &conf_n, e);
	p->name = dcr_strdup(explicit ? named : "default");
	char *csec = p->name ? (!strcmp(p->name, "default") ? dcr_strdup("default")
							    : dcr_asprintf("profile %s", p->name))
			     : NULL;
	if (!r && (!p->name || !csec))
		r = dcr_err_sys(e, ENOMEM, "cannot read the AWS profile");
	if (!r) {
		int in_cred = 0, in_conf = 0;
		const char *ct = (const char *)cred, *ft = (const char *)conf;
		static const char *const keys[] = {"aws_access_key_id", "aws_secret_access_key",
						   "aws_session_token"};
		char **dst[] = {&p->akid, &p->secret, &p->token};
		for (int i = 0; i < 3; i++) {
			*dst[i] = dcr_aws_ini_get(ct, cred_n, p->name, keys[i], &in_cred);
			if (!*dst[i])
				*dst[i] = dcr_aws_ini_get(ft, conf_n, csec, keys[i], &in_conf);
		}
		/* the settings: the config file's, else the credentials file's;
		 * the last three only to say what dcr does not follow */
		static const char *const sets[] = {"region", "endpoint_url", "credential_process",
						   "ca_bundle", "role_arn", "sso_session",
						   "sso_start_url"};
		char *unsup[3] = {NULL, NULL, NULL};
		char **sdst[] = {&p->region, &p->endpoint, &p->process, &p->ca_bundle,
				 &unsup[0], &unsup[1], &unsup[2]};
		for (int i = 0; i < 7; i++) {
			*sdst[i] = dcr_aws_ini_get(ft, conf_n, csec, sets[i], &in_conf);
			if (!*sdst[i])
				*sdst[i] = dcr_aws_ini_get(ct, cred_n, p->name, sets[i], NULL);
		}
		for (int i = 0; i < 3; i++) {
			if (unsup[i] && !p->unsupported)
				p->unsupported = dcr_strdup(sets[4 + i]);
			free(unsup[i]);
		}
		if (explicit && !in_cred && !in_conf)
			r = dcr_err_set(e, DCR_ENOTFOUND,
					"the AWS profile '%s' is in neither the credentials nor the config file",
					p->name);
	}
	free(csec);
	free(cred);
	free(conf);
	if (r)
		dcr_aws_profile_free(p);
	return r;
}

void dcr_aws_profile_free(struct dcr_aws_profile *p)
{
	free(p->name);
	free(p->akid);
	free(p->secret);
	free(p->token);
	free(p->region);
	free(p->endpoint);
	free(p->process);
	free(p->ca_bundle);
	free(p->unsupported);
	memset(p, 0, sizeof(*p));
}
