/* awsconf.h - the AWS shared configuration and credentials files
 * (~/.aws/config and ~/.aws/credentials), read as the AWS CLI and SDKs
 * read them, for the s3:// store: a profile's keys, session token, region,
 * endpoint and credential_process (run by awscred.h, which also asks a
 * container's or an EC2 instance's credential endpoint, and STS for a web
 * identity). No SSO, no role_arn (AssumeRole) in a profile. */
#ifndef DCR_TRANSPORT_AWSCONF_H
#define DCR_TRANSPORT_AWSCONF_H

#include <stddef.h>

#include "core/error.h"

/* The largest file read; a larger one is refused. */
#define DCR_AWS_FILE_MAX (1u << 20)

struct dcr_aws_profile {
	char *name;		      /* the profile read */
	char *akid, *secret, *token;  /* the credentials file's, else config's */
	char *region, *endpoint;      /* the config file's, else credentials' */
	char *process;                /* credential_process: config's, else credentials' */
	char *ca_bundle;              /* ca_bundle: config's, else credentials' */
	/* what the AWS CLI would do and dcr does not: role_arn (AssumeRole,
	 * or a web identity named in the profile), else an SSO setting; NULL
	 * when neither */
	char *unsupported;
};

/* The value of key in section [section] of INI text[0..n) (malloc'd), or
 * NULL when it has none. Lines are "key = value", white space around both
 * trimmed; a line starting with '#' or ';' is a comment; an indented line
 * (a nested setting, as under "s3 =") is skipped; the last value of a key
 * wins. The config file names a profile "[profile NAME]" (but "[default]"),
 * the credentials file "[NAME]": section is the whole name between the
 * brackets. Also *found (may be NULL) is set when the section exists. */
char *dcr_aws_ini_get(const char *text, size_t n, const char *section, const char *key,
		      int *found);

/* Read the profile $AWS_PROFILE (else $AWS_DEFAULT_PROFILE, else
 * "default") from $AWS_SHARED_CREDENTIALS_FILE (else ~/.aws/credentials)
 * and $AWS_CONFIG_FILE (else ~/.aws/config). Files that do not exist hold
 * nothing; one that cannot be read, or is larger than DCR_AWS_FILE_MAX, is
 * an error. A profile named in the environment that neither file has is
 * DCR_ENOTFOUND; the default profile may be absent (p is then empty). */
int dcr_aws_profile_load(struct dcr_aws_profile *p, struct dcr_err *e);
void dcr_aws_profile_free(struct dcr_aws_profile *p);

#endif
