/* awscred.h - S3 credentials that come from somewhere else and expire:
 * a web identity token exchanged with STS (EKS IRSA: tried right after the
 * environment's keys), then, after the profile's static keys, a profile's
 * credential_process, a container's credential endpoint (ECS, EKS Pod
 * Identity) and an EC2 instance's metadata service (IMDSv2, else v1), in
 * the order the AWS CLI tries them (store-s3.c). Each answer's
 * Expiration is kept: the S3 store asks again before it comes
 * (DCR_AWS_REFRESH_S ahead), so that a receiver waiting hours for a refit
 * still signs with keys that work.
 *
 * Environment, as the AWS SDKs read it:
 *   AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN  both set: the token (read
 *                                           again at each refresh) for
 *                                           AssumeRoleWithWebIdentity
 *   AWS_ROLE_SESSION_NAME                   default dcr-PID
 *   AWS_ENDPOINT_URL_STS                    default https://sts.REGION.amazonaws.com
 *   AWS_CONTAINER_CREDENTIALS_RELATIVE_URI  path on http://169.254.170.2
 *   AWS_CONTAINER_CREDENTIALS_FULL_URI      a whole URL: https anywhere,
 *                                           http only to a loopback address
 *                                           or the ECS/EKS agents'
 *   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE  its Authorization header, read
 *   AWS_CONTAINER_AUTHORIZATION_TOKEN       from the file, else this
 *   AWS_EC2_METADATA_DISABLED=true          never ask the instance
 *   AWS_EC2_METADATA_SERVICE_ENDPOINT       default http://169.254.169.254
 * Internal to libdcr. */
#ifndef DCR_TRANSPORT_AWSCRED_H
#define DCR_TRANSPORT_AWSCRED_H

#include <stddef.h>
#include <time.h>

#include "core/error.h"

/* Ask again this long before an expiry, and at most once per
 * DCR_AWS_RETRY_S. */
#define DCR_AWS_REFRESH_S 300
#define DCR_AWS_RETRY_S 1
/* The largest answer read from a process or an endpoint. */
#define DCR_AWS_ANSWER_MAX (64u << 10)
/* Each request to an endpoint, connection included. */
#define DCR_AWS_TIMEOUT_MS 2000

enum dcr_aws_source {
	DCR_AWS_NONE,
	DCR_AWS_PROCESS,   /* credential_process */
	DCR_AWS_CONTAINER, /* AWS_CONTAINER_CREDENTIALS_* */
	DCR_AWS_IMDS,      /* the instance's metadata service */
	DCR_AWS_WEB_IDENTITY, /* AWS_WEB_IDENTITY_TOKEN_FILE through STS */
};

struct dcr_aws_creds {
	char *akid, *secret, *token; /* token may be NULL */
	time_t expires;              /* 0: never */
};

/* Parse a JSON answer: AccessKeyId, SecretAccessKey, the session token
 * under token_key ("SessionToken" from a process, "Token" from an
 * endpoint) and Expiration (ISO 8601, optional). A process's answer must
 * say "Version": 1; an instance's "Code", where present, "Success". what
 * names the source in messages. */
int dcr_aws_creds_parse(const char *txt, size_t n, enum dcr_aws_source src, const char *what,
			struct dcr_aws_creds *c, struct dcr_err *e);

/* Parse STS's answer to AssumeRoleWithWebIdentity (XML: Credentials with
 * AccessKeyId, SecretAccessKey, SessionToken, Expiration); what names the
 * source in messages. */
int dcr_aws_sts_parse(const char *xml, size_t n, const char *what, struct dcr_aws_creds *c,
		      struct dcr_err *e);

/* Whether the environment names a web identity (both variables set). */
int dcr_aws_web_identity(void);

/* "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)" as seconds since the
 * epoch; 0 or -1 when it is not such a time. */
int dcr_aws_time_parse(const char *s, time_t *out);

/* The first source configured: process (the profile's credential_process,
 * or NULL), then the container's endpoint, then the instance's unless
 * disabled. DCR_AWS_NONE when none is. */
enum dcr_aws_source dcr_aws_source_pick(const char *process);

/* Fetch credentials from src (process: the profile's credential_process;
 * region: for STS's endpoint); 0, else an error naming the source. */
int dcr_aws_creds_fetch(enum dcr_aws_source src, const char *process, const char *region,
			struct dcr_aws_creds *c, struct dcr_err *e);

/* A source's name for messages ("credential_process", ...). */
const char *dcr_aws_source_name(enum dcr_aws_source src);

/* Free c's strings, the secret wiped first. */
void dcr_aws_creds_free(struct dcr_aws_creds *c);

#endif
