/* test-store.c - unit tests of lib/store: SigV4 against AWS's published
 * examples, the AWS configuration files' syntax, object names, the directory store, the job pool. The HTTP and
 * S3 stores are tested against real servers by tests/t03*.sh. */
#include "config.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcr.h"
#include "core/bytes.h"
#include "transport/awsconf.h"
#include "transport/awscred.h"
#include "transport/names.h"
#include "transport/sigv4.h"

/* ---- AWS configuration files ------------------------------------------ */

static char *ini(const char *text, const char *section, const char *key, int *found)
{
	return dcr_aws_ini_get(text, strlen(text), section, key, found);
}

Test(awsconf, sections_keys_comments)
{
	const char *t = "# c\n[default]\nregion = us-west-2\n; x = 1\n"
			"[profile a]\r\n  aws_access_key_id =  AK  \r\nregion=eu-west-1\r\n"
			"[b]\nregion = one\nregion = two\ns3 =\n  region = nested\n";
	int f = 0;
	char *v = ini(t, "default", "region", &f);
	cr_assert_str_eq(v, "us-west-2");
	cr_assert(f);
	free(v);
	cr_assert_null(ini(t, "default", "x", NULL), "a comment is no key");
	/* an indented line is nested: not the profile's own key */
	cr_assert_null(ini(t, "profile a", "aws_access_key_id", &f));
	cr_assert(f);
	v = ini(t, "profile a", "region", NULL);
	cr_assert_str_eq(v, "eu-west-1");
	free(v);
	v = ini(t, "b", "region", NULL); /* the last wins; nested skipped */
	cr_assert_str_eq(v, "two");
	free(v);
	cr_assert_null(ini(t, "a", "region", &f), "[profile a] is not [a]");
	cr_assert_not(f);
	cr_assert_null(ini(t, "b", "s3", NULL), "an empty value is none");
}

Test(awsconf, hostile_text)
{
	/* no NUL at the end, brackets unclosed, '=' alone, a NUL inside */
	static const char t[] = {'[', 'd', '\n', '=', '\n', '[', 'd', ']', '\n', 'k', '=', 'v', '\0',
				 'w', '\n', 'k'};
	char *v = dcr_aws_ini_get(t, sizeof(t), "d", "k", NULL);
	cr_assert_not_null(v);
	cr_assert_eq(strlen(v), 1); /* "v", the NUL ends the C string */
	free(v);
	cr_assert_null(dcr_aws_ini_get("[d", 2, "d", "k", NULL));
	cr_assert_null(dcr_aws_ini_get("", 0, "d", "k", NULL));
	cr_assert_null(dcr_aws_ini_get(NULL, 0, "d", "k", NULL));
}

/* ---- SigV4 ------------------------------------------------------------ */

/* AWS's SigV4 test suite (aws-sig-v4-test-suite) credentials and time. */
#define SUITE_KEY "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_DATE "20150830T123600Z"
#define EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* The S3 developer guide's examples (sig-v4-header-based-auth). */
#define S3_KEY "AKIAIOSFODNN7EXAMPLE"
#define S3_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define S3_DATE "20130524T000000Z"

static void hex_sha(const char *s, char out[65])
{
	dcr_digest d;
	dcr_sha256(s, strlen(s), &d);
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d.b[i]);
}

static void sign_suite(const char *method, const char *uri, const char *query,
		       const struct dcr_sigv4_header *h, size_t nh, const char *payload,
		       struct dcr_sigv4_out *o)
{
	struct dcr_sigv4 in = {
		.method = method, .uri = uri, .query = query, .headers = h, .nheaders = nh,
		.payload_hash = payload, .amz_date = SUITE_DATE, .region = "us-east-1",
		.service = "service", .access_key = SUITE_KEY, .secret_key = SUITE_SECRET,
	};
	cr_assert_eq(dcr_sigv4_sign(&in, o), 0);
}

Test(sigv4, get_vanilla)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE},
	};
	struct dcr_sigv4_out o;
	sign_suite("GET", "/", NULL, h, 2, EMPTY, &o);
	cr_assert_str_eq(o.canonical_request,
			 "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
			 "host;x-amz-date\n" EMPTY);
	char crh[65];
	hex_sha(o.canonical_request, crh);
	cr_assert_str_eq(crh, "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
	cr_assert_str_eq(o.string_to_sign,
			 "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
			 "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
	cr_assert_str_eq(o.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
	cr_assert_str_eq(o.authorization,
			 "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
			 "SignedHeaders=host;x-amz-date, "
			 "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
	dcr_sigv4_out_free(&o);
}

Test(sigv4, get_vanilla_query_order_key_case)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE},
	};
	struct dcr_sigv4_out o;
	sign_suite("GET", "/", "Param2=value2&Param1=value1", h, 2, EMPTY, &o);
	cr_assert_str_eq(o.canonical_request,
			 "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\n"
			 "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY);
	char crh[65];
	hex_sha(o.canonical_request, crh);
	cr_assert_str_eq(crh, "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0");
	cr_assert_str_eq(o.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
	dcr_sigv4_out_free(&o);
}

Test(sigv4, get_vanilla_query_order_value)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE},
	};
	struct dcr_sigv4_out o;
	sign_suite("GET", "/", "Param1=value2&Param1=value1", h, 2, EMPTY, &o);
	cr_assert(strstr(o.canonical_request, "\nParam1=value1&Param1=value2\n"));
	cr_assert_str_eq(o.signature, "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694");
	dcr_sigv4_out_free(&o);
}

Test(sigv4, get_unreserved)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE},
	};
	const char *raw = "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	char *uri = dcr_uri_encode(raw, strlen(raw), 1);
	cr_assert_str_eq(uri, raw); /* nothing to escape */
	struct dcr_sigv4_out o;
	sign_suite("GET", uri, NULL, h, 2, EMPTY, &o);
	cr_assert_str_eq(o.signature, "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f");
	dcr_sigv4_out_free(&o);
	free(uri);
}

Test(sigv4, post_x_www_form_urlencoded)
{
	struct dcr_sigv4_header h[] = {
		{"Content-Type", "application/x-www-form-urlencoded"},
		{"Host", "example.amazonaws.com"},
		{"X-Amz-Date", SUITE_DATE},
	};
	char body[65];
	hex_sha("Param1=value1", body);
	cr_assert_str_eq(body, "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
	struct dcr_sigv4_out o;
	sign_suite("POST", "/", NULL, h, 3, body, &o);
	cr_assert_str_eq(o.canonical_request,
			 "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\n"
			 "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
			 "content-type;host;x-amz-date\n"
			 "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
	cr_assert_str_eq(o.string_to_sign,
			 "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
			 "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281");
	cr_assert_str_eq(o.signature, "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a");
	dcr_sigv4_out_free(&o);
}

Test(sigv4, header_values_trimmed_and_collapsed)
{
	struct dcr_sigv4_header h[] = {
		{"My-Header1", "  value1  "}, {"My-Header2", "\"a   b   c\""},
		{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE},
	};
	struct dcr_sigv4_out o;
	sign_suite("GET", "/", NULL, h, 4, EMPTY, &o);
	cr_assert(strstr(o.canonical_request, "\nmy-header1:value1\nmy-header2:\"a b c\"\n"));
	dcr_sigv4_out_free(&o);
}

static void sign_s3(const char *method, const char *uri, const char *query,
		    const struct dcr_sigv4_header *h, size_t nh, const char *payload,
		    struct dcr_sigv4_out *o)
{
	struct dcr_sigv4 in = {
		.method = method, .uri = uri, .query = query, .headers = h, .nheaders = nh,
		.payload_hash = payload, .amz_date = S3_DATE, .region = "us-east-1",
		.service = "s3", .access_key = S3_KEY, .secret_key = S3_SECRET,
	};
	cr_assert_eq(dcr_sigv4_sign(&in, o), 0);
}

/* S3 guide: GET Object, first 10 bytes of examplebucket/test.txt. */
Test(sigv4, s3_get_object_range)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"},
		{"x-amz-content-sha256", EMPTY}, {"x-amz-date", S3_DATE},
	};
	struct dcr_sigv4_out o;
	sign_s3("GET", "/test.txt", NULL, h, 4, EMPTY, &o);
	cr_assert_str_eq(o.string_to_sign,
			 "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
			 "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
	cr_assert_str_eq(o.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	dcr_sigv4_out_free(&o);
}

/* S3 guide: PUT Object "test$file.text": '$' must be escaped in the path. */
Test(sigv4, s3_put_object)
{
	char body[65];
	hex_sha("Welcome to Amazon S3.", body);
	cr_assert_str_eq(body, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
	char *uri = dcr_uri_encode("/test$file.text", 15, 1);
	cr_assert_str_eq(uri, "/test%24file.text");
	struct dcr_sigv4_header h[] = {
		{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
		{"Host", "examplebucket.s3.amazonaws.com"},
		{"x-amz-content-sha256", body}, {"x-amz-date", S3_DATE},
		{"x-amz-storage-class", "REDUCED_REDUNDANCY"},
	};
	struct dcr_sigv4_out o;
	sign_s3("PUT", uri, NULL, h, 5, body, &o);
	char crh[65];
	hex_sha(o.canonical_request, crh);
	cr_assert_str_eq(crh, "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
	cr_assert_str_eq(o.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
	dcr_sigv4_out_free(&o);
	free(uri);
}

/* S3 guide: GET Bucket lifecycle: a value-less parameter signs as "lifecycle=". */
Test(sigv4, s3_get_bucket_lifecycle)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "examplebucket.s3.amazonaws.com"},
		{"x-amz-content-sha256", EMPTY}, {"x-amz-date", S3_DATE},
	};
	struct dcr_sigv4_out o;
	sign_s3("GET", "/", "lifecycle", h, 3, EMPTY, &o);
	cr_assert(strstr(o.canonical_request, "GET\n/\nlifecycle=\n"));
	cr_assert_str_eq(o.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
	dcr_sigv4_out_free(&o);
}

/* S3 guide: GET Bucket (list objects) with max-keys=2&prefix=J. */
Test(sigv4, s3_list_objects)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "examplebucket.s3.amazonaws.com"},
		{"x-amz-content-sha256", EMPTY}, {"x-amz-date", S3_DATE},
	};
	struct dcr_sigv4_out o;
	sign_s3("GET", "/", "prefix=J&max-keys=2", h, 3, EMPTY, &o);
	cr_assert(strstr(o.canonical_request, "GET\n/\nmax-keys=2&prefix=J\n"));
	cr_assert_str_eq(o.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
	dcr_sigv4_out_free(&o);
}

Test(sigv4, a_wrong_secret_changes_the_signature)
{
	struct dcr_sigv4_header h[] = {
		{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE},
	};
	struct dcr_sigv4 in = {
		.method = "GET", .uri = "/", .headers = h, .nheaders = 2, .payload_hash = EMPTY,
		.amz_date = SUITE_DATE, .region = "us-east-1", .service = "service",
		.access_key = SUITE_KEY, .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEz",
	};
	struct dcr_sigv4_out o;
	cr_assert_eq(dcr_sigv4_sign(&in, &o), 0);
	cr_assert_str_neq(o.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
	dcr_sigv4_out_free(&o);
}

Test(sigv4, query_values_are_encoded_once)
{
	struct dcr_sigv4_header h[] = {{"Host", "h"}, {"X-Amz-Date", SUITE_DATE}};
	struct dcr_sigv4_out o;
	/* Already encoded as dcr sends it: must not become %252F. */
	sign_suite("GET", "/b", "prefix=v42%2Fpay&continuation-token=a%2Bb%3D", h, 2, EMPTY, &o);
	cr_assert(strstr(o.canonical_request, "\ncontinuation-token=a%2Bb%3D&prefix=v42%2Fpay\n"),
		  "%s", o.canonical_request);
	dcr_sigv4_out_free(&o);
}

Test(sigv4, uri_encode)
{
	char *s = dcr_uri_encode("v42/a b+c~%", 11, 1);
	cr_assert_str_eq(s, "v42/a%20b%2Bc~%25");
	free(s);
	s = dcr_uri_encode("a/b", 3, 0);
	cr_assert_str_eq(s, "a%2Fb");
	free(s);
}

/* ---- names ------------------------------------------------------------ */

Test(names, accepted)
{
	const char *ok[] = {"v42/payload-000003", "manifest", "a/b/c.d", "x..y", ".hidden", "a b"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		cr_assert_eq(dcr_store_check_name(ok[i], NULL), 0, "%s", ok[i]);
}

Test(names, rejected)
{
	const char *bad[] = {"", "/abs", "a/../b", "..", "a/..", "./a", "a//b", "a/", "a\nb",
			     "tab\there", "del\x7f"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct dcr_err e = {0};
		cr_assert_eq(dcr_store_check_name(bad[i], &e), DCR_EFORMAT, "%s", bad[i]);
		cr_assert(strstr(e.msg, "invalid object name"), "%s", e.msg);
	}
	char big[1100];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(dcr_store_check_name(big, NULL), DCR_EFORMAT);
}

Test(names, store_refuses_bad_names_before_any_io)
{
	char dir[] = "/tmp/dcr-store-XXXXXX";
	cr_assert(mkdtemp(dir));
	struct dcr_store *s;
	struct dcr_err e;
	cr_assert_eq(dcr_store_open(dir, NULL, &s, &e), 0);
	cr_assert_eq(dcr_store_put(s, "../escape", "x", 1, &e), DCR_EFORMAT);
	cr_assert_eq(access("/tmp/escape", F_OK), -1);
	cr_assert_eq(dcr_store_put(s, "/etc/x", "x", 1, &e), DCR_EFORMAT);
	uint8_t *b;
	size_t n;
	cr_assert_eq(dcr_store_get(s, "a/../../etc/passwd", &b, &n, &e), DCR_EFORMAT);
	dcr_store_close(s);
	rmdir(dir);
}

Test(open, unknown_scheme_and_missing_credentials)
{
	struct dcr_store *s;
	struct dcr_err e = {0};
	cr_assert_lt(dcr_store_open("gs://bucket/x", NULL, &s, &e), 0);
	cr_assert(strstr(e.msg, "unknown URL scheme"), "%s", e.msg);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	cr_assert_lt(dcr_store_open("s3://bucket/x", NULL, &s, &e), 0);
	cr_assert(strstr(e.msg, "AWS_ACCESS_KEY_ID"), "%s", e.msg);
	setenv("AWS_ACCESS_KEY_ID", "k", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
	cr_assert_lt(dcr_store_open("s3:///x", NULL, &s, &e), 0);
	cr_assert(strstr(e.msg, "no bucket"), "%s", e.msg);
	cr_assert_eq(dcr_store_open("s3://bucket/p/", NULL, &s, &e), 0);
	dcr_store_close(s);
}

/* ---- directory store ---------------------------------------------------- */

static char tmpdir[64];
static struct dcr_store *st;

static void dir_setup(void)
{
	strcpy(tmpdir, "/tmp/dcr-store-XXXXXX");
	cr_assert(mkdtemp(tmpdir));
	struct dcr_err e;
	char *url = dcr_asprintf("file://%s/store", tmpdir);
	cr_assert_eq(dcr_store_open(url, NULL, &st, &e), 0, "%s", e.msg);
	free(url);
}

static void dir_teardown(void)
{
	dcr_store_close(st);
	char *cmd = dcr_asprintf("rm -rf '%s'", tmpdir);
	cr_assert_eq(system(cmd), 0);
	free(cmd);
}

static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

TestSuite(dir, .init = dir_setup, .fini = dir_teardown);

static void hasher_blake3(void *ctx, const void *p, size_t n)
{
	dcr_blake3_update(ctx, p, n);
}

/* Blobs: the directory store maps objects; the hasher is fed all but the
 * tail (checked with BLAKE3 computed in one shot); a reused heap buffer
 * in the blob is released, a directory or missing object is refused. */
Test(dir, get_blob_maps_and_digests)
{
	struct dcr_err e;
	struct dcr_blob b = {0};
	size_t n = (size_t)5 << 20;
	uint8_t *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13);
	cr_assert_eq(dcr_store_put(st, "v1/big", data, n, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_store_put(st, "v1/empty", "", 0, &e), 0, "%s", e.msg);
	b.p = malloc(64); /* a recycled heap buffer: must be freed, not leaked */
	b.cap = 64;
	dcr_digest d, want;
	struct dcr_blake3 b3;
	struct dcr_hasher h = {hasher_blake3, &b3};
	dcr_blake3_init(&b3);
	cr_assert_eq(dcr_store_get_blob_hashed(st, "v1/big", &b, 32, &h, &e), 0, "%s", e.msg);
	dcr_blake3_final(&b3, &d);
	cr_assert_eq(b.len, n);
	cr_assert_not_null(b.map);
	cr_assert_eq(memcmp(b.p, data, n), 0);
	dcr_blake3(data, n - 32, &want);
	cr_assert_eq(memcmp(d.b, want.b, 32), 0);
	dcr_blob_free(&b);
	cr_assert_null(b.p);
	cr_assert_eq(dcr_store_get_blob(st, "v1/empty", &b, &e), 0, "%s", e.msg);
	cr_assert_eq(b.len, 0);
	cr_assert_not_null(b.p);
	dcr_blob_free(&b);
	cr_assert_eq(dcr_store_get_blob(st, "v1/missing", &b, &e), DCR_ENOTFOUND);
	cr_assert_null(b.p);
	cr_assert_eq(dcr_store_get_blob(st, "v1", &b, &e), DCR_ENOTFOUND, "%s", e.msg);
	/* dcr_prefault leaves the bytes it is given alone */
	uint8_t *q = malloc(n);
	memcpy(q, data, n);
	dcr_prefault(q, n);
	cr_assert_eq(memcmp(q, data, n), 0);
	free(q);
	free(data);
}

Test(dir, put_get_stat_range_overwrite)
{
	struct dcr_err e;
	uint8_t *b;
	size_t n;
	uint64_t sz;
	cr_assert_eq(dcr_store_get(st, "v1/payload-000000", &b, &n, &e), DCR_ENOTFOUND);
	cr_assert(strstr(e.msg, "v1/payload-000000"), "%s", e.msg);
	cr_assert_eq(dcr_store_stat(st, "v1/x", &sz, &e), DCR_ENOTFOUND);
	cr_assert_eq(dcr_store_put(st, "v1/payload-000000", "hello world", 11, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_store_get(st, "v1/payload-000000", &b, &n, &e), 0);
	cr_assert_eq(n, 11);
	cr_assert_str_eq((char *)b, "hello world");
	free(b);
	cr_assert_eq(dcr_store_stat(st, "v1/payload-000000", &sz, &e), 0);
	cr_assert_eq(sz, 11);
	uint8_t r[5];
	cr_assert_eq(dcr_store_get_range(st, "v1/payload-000000", 6, 5, r, &e), 0);
	cr_assert_eq(memcmp(r, "world", 5), 0);
	cr_assert_eq(dcr_store_get_range(st, "v1/payload-000000", 8, 5, r, &e), DCR_EFORMAT);
	cr_assert_eq(dcr_store_put(st, "v1/payload-000000", "", 0, &e), 0);
	cr_assert_eq(dcr_store_get(st, "v1/payload-000000", &b, &n, &e), 0);
	cr_assert_eq(n, 0);
	free(b);
	/* no temp files left behind */
	char *d = dcr_asprintf("%s/store/v1", tmpdir);
	cr_assert_eq(count_files(d), 1);
	free(d);
}

Test(dir, put_if_absent_conflicts_and_keeps_the_first)
{
	struct dcr_err e;
	cr_assert_eq(dcr_store_put_if_absent(st, "refs/policy", "v1", 2, &e), 0, "%s", e.msg);
	cr_assert_eq(dcr_store_put_if_absent(st, "refs/policy", "v1", 2, &e), 0,
		     "the same bytes again is a create that already happened");
	cr_assert_eq(dcr_store_put_if_absent(st, "refs/policy", "v2", 2, &e), DCR_ECONFLICT);
	cr_assert(strstr(e.msg, "refs/policy") && strstr(e.msg, "already exists"), "%s", e.msg);
	uint8_t *b;
	size_t n;
	cr_assert_eq(dcr_store_get(st, "refs/policy", &b, &n, &e), 0);
	cr_assert_eq(memcmp(b, "v1", 2), 0);
	free(b);
	char *d = dcr_asprintf("%s/store/refs", tmpdir);
	cr_assert_eq(count_files(d), 1, "temp file left");
	free(d);
}

struct race {
	int won;
	int conflicts;
	pthread_mutex_t mu;
	int id;
};

static void *racer(void *arg)
{
	struct race *r = arg;
	pthread_mutex_lock(&r->mu);
	int id = r->id++;
	pthread_mutex_unlock(&r->mu);
	char v[16];
	snprintf(v, sizeof(v), "w%d", id);
	struct dcr_err e;
	int rc = dcr_store_put_if_absent(st, "refs/cas", v, strlen(v), &e);
	pthread_mutex_lock(&r->mu);
	if (rc == 0)
		r->won++;
	else if (rc == DCR_ECONFLICT)
		r->conflicts++;
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

Test(dir, put_if_absent_exactly_one_winner)
{
	struct race r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, racer, &r);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(r.won, 1);
	cr_assert_eq(r.conflicts, 7);
}

Test(dir, list_prefix_sorted_without_temp_files)
{
	struct dcr_err e;
	const char *names[] = {"v2/payload-000001", "v2/payload-000000", "v2/manifest",
			       "v10/payload-000000", "v1/payload-000000", "top"};
	for (size_t i = 0; i < 6; i++)
		cr_assert_eq(dcr_store_put(st, names[i], "x", 1, &e), 0);
	/* a stray temp file, as a crash mid-put leaves */
	char *tmp = dcr_asprintf("%s/store/v2/.payload-000002.tmp-1-0", tmpdir);
	FILE *f = fopen(tmp, "w");
	cr_assert(f);
	fclose(f);
	free(tmp);
	char **l;
	size_t n;
	cr_assert_eq(dcr_store_list(st, "v2/", &l, &n, &e), 0, "%s", e.msg);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(l[0], "v2/manifest");
	cr_assert_str_eq(l[1], "v2/payload-000000");
	cr_assert_str_eq(l[2], "v2/payload-000001");
	dcr_store_names_free(l, n);
	cr_assert_eq(dcr_store_list(st, "v1", &l, &n, &e), 0);
	cr_assert_eq(n, 2); /* v1/... and v10/... */
	cr_assert_str_eq(l[0], "v1/payload-000000");
	cr_assert_str_eq(l[1], "v10/payload-000000");
	dcr_store_names_free(l, n);
	cr_assert_eq(dcr_store_list(st, "", &l, &n, &e), 0);
	cr_assert_eq(n, 6);
	cr_assert_str_eq(l[5], "v2/payload-000001");
	dcr_store_names_free(l, n);
	cr_assert_eq(dcr_store_list(st, "nothing/", &l, &n, &e), 0);
	cr_assert_eq(n, 0);
	dcr_store_names_free(l, n);
	cr_assert_eq(dcr_store_list(st, "../", &l, &n, &e), DCR_EFORMAT);
}

/* A listing's memory is bounded by its names' bytes, not only by their
 * count: 4M names of the longest length held 4 GiB. */
Test(names, listing_bytes_bounded)
{
	struct dcr_names l = {0};
	struct dcr_err e = {0};
	char name[DCR_NAME_MAX + 1];
	memset(name, 'a', DCR_NAME_MAX);
	name[DCR_NAME_MAX] = '\0';
	size_t fit = DCR_STORE_LIST_BYTES / (DCR_NAME_MAX + 1);
	int r = 0;
	while (!(r = dcr_names_add_listed(&l, strdup(name), "hostile", DCR_EREMOTE, &e)))
		cr_assert_leq(l.n, fit);
	cr_assert_eq(r, DCR_EREMOTE);
	cr_assert_eq(l.n, fit);
	cr_assert(strstr(e.msg, "MiB of names"), "%s", e.msg);
	cr_assert_eq(l.bytes, fit * (DCR_NAME_MAX + 1));
	dcr_store_names_free(l.v, l.n);
}

Test(dir, delete)
{
	struct dcr_err e;
	cr_assert_eq(dcr_store_put(st, "a/b", "x", 1, &e), 0);
	cr_assert_eq(dcr_store_delete(st, "a/b", &e), 0);
	uint64_t sz;
	cr_assert_eq(dcr_store_stat(st, "a/b", &sz, &e), DCR_ENOTFOUND);
	cr_assert_eq(dcr_store_delete(st, "a/b", &e), DCR_ENOTFOUND);
	cr_assert(strstr(e.msg, "a/b"), "%s", e.msg);
}

/* A delete that empties directories removes them, up to the root (a GC'd
 * store keeps no empty directory per version), and leaves a directory
 * that holds anything else. */
Test(dir, delete_removes_emptied_directories)
{
	struct dcr_err e;
	cr_assert_eq(dcr_store_put(st, "p/v1/x", "x", 1, &e), 0);
	cr_assert_eq(dcr_store_put(st, "p/v2/y", "y", 1, &e), 0);
	cr_assert_eq(dcr_store_delete(st, "p/v1/x", &e), 0, "%s", e.msg);
	char *d = dcr_asprintf("%s/store/p/v1", tmpdir);
	struct stat sb;
	cr_assert_eq(stat(d, &sb), -1, "'%s' is left", d);
	d[strlen(d) - 3] = '\0';
	cr_assert_eq(stat(d, &sb), 0, "'%s', which holds v2, went", d);
	cr_assert_eq(dcr_store_delete(st, "p/v2/y", &e), 0, "%s", e.msg);
	cr_assert_eq(stat(d, &sb), -1, "'%s' is left", d);
	free(d);
	d = dcr_asprintf("%s/store", tmpdir);
	cr_assert_eq(stat(d, &sb), 0, "the root went");
	free(d);
}

/* A delete that empties a directory removes it, perhaps after a writer
 * made it and before the writer's temporary file is there: every put
 * still lands. Here a thread removes the directory as fast as it can
 * while the other puts and deletes the only object in it. */
struct churn {
	const char *dir;
	volatile int stop;
};

static void *remover(void *arg)
{
	struct churn *c = arg;
	while (!c->stop)
		(void)rmdir(c->dir);
	return NULL;
}

Test(dir, puts_survive_deletes_removing_the_directory)
{
	struct dcr_err e;
	char *d = dcr_asprintf("%s/store/d", tmpdir);
	struct churn c = {d, 0};
	pthread_t t;
	pthread_create(&t, NULL, remover, &c);
	int failed = 0;
	for (int i = 0; i < 300 && !failed; i++)
		failed = dcr_store_put(st, "d/a", "x", 1, &e) || dcr_store_delete(st, "d/a", &e);
	c.stop = 1;
	pthread_join(t, NULL);
	cr_assert_eq(failed, 0, "%s", e.msg);
	free(d);
}

Test(dir, put_file_and_get_to_fd)
{
	struct dcr_err e;
	char *src = dcr_asprintf("%s/src", tmpdir), *dst = dcr_asprintf("%s/dst", tmpdir);
	size_t n = 3u << 20;
	uint8_t *p = malloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 2654435761u >> 13);
	cr_assert_eq(dcr_write_file_atomic(src, p, n, &e), 0);
	cr_assert_eq(dcr_store_put_file(st, "big", src, &e), 0, "%s", e.msg);
	int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	uint64_t got;
	cr_assert_eq(dcr_store_get_to_fd(st, "big", fd, &got, &e), 0, "%s", e.msg);
	close(fd);
	cr_assert_eq(got, n);
	uint8_t *q;
	size_t qn;
	cr_assert_eq(dcr_read_file(dst, n, &q, &qn, &e), 0);
	cr_assert_eq(qn, n);
	cr_assert_eq(memcmp(p, q, n), 0);
	/* to a pipe, where sendfile cannot seek */
	int pf[2];
	cr_assert_eq(pipe(pf), 0);
	cr_assert_eq(dcr_store_put(st, "small", "pipe me", 7, &e), 0);
	cr_assert_eq(dcr_store_get_to_fd(st, "small", pf[1], &got, &e), 0, "%s", e.msg);
	close(pf[1]);
	char buf[16] = {0};
	cr_assert_eq(read(pf[0], buf, sizeof(buf)), 7);
	close(pf[0]);
	cr_assert_str_eq(buf, "pipe me");
	free(p);
	free(q);
	free(src);
	free(dst);
}

/* Readers racing a writer that replaces the object see one whole version,
 * never a mix or a short file. */
struct flip {
	volatile int stop;
	size_t n;
};

static void *flipper(void *arg)
{
	struct flip *f = arg;
	uint8_t *a = malloc(f->n), *b = malloc(f->n);
	memset(a, 'A', f->n);
	memset(b, 'B', f->n);
	struct dcr_err e;
	for (int i = 0; !f->stop && i < 200; i++)
		cr_assert_eq(dcr_store_put(st, "flip", i & 1 ? b : a, f->n, &e), 0);
	free(a);
	free(b);
	return NULL;
}

Test(dir, put_is_never_half_visible)
{
	struct dcr_err e;
	struct flip f = {.n = 256 << 10};
	uint8_t *z = calloc(1, f.n);
	cr_assert_eq(dcr_store_put(st, "flip", z, f.n, &e), 0);
	free(z);
	pthread_t t;
	pthread_create(&t, NULL, flipper, &f);
	for (int i = 0; i < 300; i++) {
		uint8_t *b;
		size_t n;
		cr_assert_eq(dcr_store_get(st, "flip", &b, &n, &e), 0, "%s", e.msg);
		cr_assert_eq(n, f.n);
		for (size_t k = 1; k < n; k++)
			cr_assert_eq(b[k], b[0], "mixed object at byte %zu", k);
		free(b);
	}
	f.stop = 1;
	pthread_join(t, NULL);
}

Test(dir, parallel_jobs)
{
	enum { N = 64 };
	struct dcr_store_job j[N];
	char names[N][32], data[N][32];
	memset(j, 0, sizeof(j));
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "v3/payload-%06d", i);
		snprintf(data[i], sizeof(data[i]), "payload %d", i);
		j[i].op = DCR_STORE_PUT;
		j[i].name = names[i];
		j[i].data = data[i];
		j[i].len = strlen(data[i]);
	}
	struct dcr_err e;
	cr_assert_eq(dcr_store_run(st, j, N, &e), 0, "%s", e.msg);
	memset(j, 0, sizeof(j));
	for (int i = 0; i < N; i++) {
		j[i].op = DCR_STORE_GET;
		j[i].name = names[i];
		cr_assert_eq(dcr_store_submit(st, &j[i], &e), 0);
	}
	for (int i = 0; i < N; i++) {
		cr_assert_eq(dcr_store_wait(st, &j[i]), 0, "%s", j[i].err.msg);
		cr_assert_eq(j[i].buf_len, strlen(data[i]));
		cr_assert_eq(memcmp(j[i].buf, data[i], j[i].buf_len), 0);
		free(j[i].buf);
	}
	/* a failing job reports its own error */
	struct dcr_store_job bad[2] = {{.op = DCR_STORE_GET, .name = "v3/payload-000000"},
				       {.op = DCR_STORE_STAT, .name = "v3/missing"}};
	cr_assert_eq(dcr_store_run(st, bad, 2, &e), DCR_ENOTFOUND);
	cr_assert(strstr(e.msg, "v3/missing"), "%s", e.msg);
	free(bad[0].buf);
}

/* ---- URLs in messages ------------------------------------------------- */

static void redacts(const char *url, const char *want)
{
	char *got = dcr_url_redact(url);
	cr_assert(got);
	cr_expect_str_eq(got, want, "%s", url);
	free(got);
}

Test(url, redact_userinfo_and_query)
{
	redacts("http://u:p@h/base", "http://***@h/base");
	redacts("https://tok@h:8443/a/b", "https://***@h:8443/a/b");
	redacts("http://u:p@h", "http://***@h");
	redacts("http://u:p:q@h@x/b", "http://***@x/b"); /* the last '@' of the authority */
	redacts("http://h/base/a@b", "http://h/base/a@b"); /* '@' in the path stays */
	redacts("http://h/b?X-Amz-Signature=s#frag", "http://h/b?***#frag");
	redacts("http://u:p@h/b?tok=s", "http://***@h/b?***");
	redacts("s3://bucket/prefix", "s3://bucket/prefix");
	redacts("/srv/store", "/srv/store");
	redacts("/srv/a@b", "/srv/a@b");
	redacts("/srv/a?b", "/srv/a?b");
	redacts("", "");
}

/* ---- credentials that expire (awscred.h) -------------------------------- */

Test(awscred, iso8601_times)
{
	time_t t;
	cr_assert_eq(dcr_aws_time_parse("2026-12-06T15:04:05Z", &t), 0);
	cr_assert_eq(t, (time_t)1796569445);
	cr_assert_eq(dcr_aws_time_parse("2026-12-06T15:04:05.123456Z", &t), 0);
	cr_assert_eq(t, (time_t)1796569445);
	cr_assert_eq(dcr_aws_time_parse("2026-12-06T16:04:05+01:00", &t), 0);
	cr_assert_eq(t, (time_t)1796569445);
	cr_assert_eq(dcr_aws_time_parse("2026-12-06T14:34:05-00:30", &t), 0);
	cr_assert_eq(t, (time_t)1796569445);
	static const char *const bad[] = {
		"", "2026-12-06", "2026-12-06T15:04:05", "2026-13-06T15:04:05Z",
		"2026-12-06T25:04:05Z", "2026-12-06T15:04:05Zx", "2026-12-06T15:04:05+1:00",
		"2026-12-06T15:04:05.Z", "20x6-12-06T15:04:05Z", "1969-12-31T23:59:59Z",
		"2026-12-06T15:04:05+01:00:00",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_neq(dcr_aws_time_parse(bad[i], &t), 0, "%s", bad[i]);
}

static int creds_of(const char *json, enum dcr_aws_source src, struct dcr_aws_creds *c,
		    struct dcr_err *e)
{
	return dcr_aws_creds_parse(json, strlen(json), src, "src", c, e);
}

Test(awscred, answers)
{
	struct dcr_aws_creds c;
	struct dcr_err e = {0};
	/* a process's answer: Version 1, SessionToken; an expiry optional */
	cr_assert_eq(creds_of("{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S/+=\","
			      "\"SessionToken\":\"T\",\"Expiration\":\"2026-12-06T15:04:05Z\"}",
			      DCR_AWS_PROCESS, &c, &e), 0, "%s", e.msg);
	cr_assert_str_eq(c.akid, "AK");
	cr_assert_str_eq(c.secret, "S/+=");
	cr_assert_str_eq(c.token, "T");
	cr_assert_eq(c.expires, (time_t)1796569445);
	dcr_aws_creds_free(&c);
	cr_assert_eq(creds_of("{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\"}",
			      DCR_AWS_PROCESS, &c, &e), 0, "%s", e.msg);
	cr_assert_null(c.token);
	cr_assert_eq(c.expires, 0);
	dcr_aws_creds_free(&c);
	/* an endpoint's: Token, Code Success */
	cr_assert_eq(creds_of("{\"Code\":\"Success\",\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\","
			      "\"Token\":\"T\",\"Expiration\":\"2026-12-06T15:04:05Z\"}",
			      DCR_AWS_IMDS, &c, &e), 0, "%s", e.msg);
	cr_assert_str_eq(c.token, "T");
	dcr_aws_creds_free(&c);
	static const struct {
		const char *json;
		enum dcr_aws_source src;
		const char *msg;
	} bad[] = {
		{"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\"}", DCR_AWS_PROCESS, "\"Version\": 1"},
		{"{\"Version\":2,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\"}", DCR_AWS_PROCESS,
		 "\"Version\": 1"},
		{"[1]", DCR_AWS_IMDS, "no JSON object"},
		{"{\"AccessKeyId\":\"AK\"", DCR_AWS_IMDS, "no JSON object"},
		{"{\"AccessKeyId\":\"AK\",\"AccessKeyId\":\"AK2\",\"SecretAccessKey\":\"S\"}",
		 DCR_AWS_IMDS, "no JSON object"},
		{"{\"AccessKeyId\":\"AK\"}", DCR_AWS_IMDS, "without AccessKeyId and SecretAccessKey"},
		{"{\"AccessKeyId\":1,\"SecretAccessKey\":\"S\"}", DCR_AWS_IMDS, "string values"},
		{"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\",\"Token\":\"a\\r\\nX-Evil: 1\","
		 "\"Expiration\":\"2026-12-06T15:04:05Z\"}",
		 DCR_AWS_IMDS, "not printable ASCII"},
		{"{\"AccessKeyId\":\"\",\"SecretAccessKey\":\"S\"}", DCR_AWS_IMDS, "empty"},
		{"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\",\"Token\":\"T\"}", DCR_AWS_CONTAINER,
		 "without an Expiration"},
		{"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\",\"Expiration\":\"tomorrow\"}",
		 DCR_AWS_IMDS, "no ISO 8601 time"},
		{"{\"Code\":\"AssumeRoleUnauthorizedAccess\",\"Message\":\"no\\nrole\"}", DCR_AWS_IMDS,
		 "answered AssumeRoleUnauthorizedAccess: no?role"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&c, 0x55, sizeof(c));
		cr_assert_neq(creds_of(bad[i].json, bad[i].src, &c, &e), 0, "%s", bad[i].json);
		cr_assert(strstr(e.msg, bad[i].msg), "%s: %s", bad[i].json, e.msg);
		cr_assert_null(c.akid);
		cr_assert_null(c.secret);
	}
	/* a secret longer than any AWS gives */
	char big[600];
	int n = snprintf(big, sizeof(big), "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"");
	memset(big + n, 'x', 300);
	strcpy(big + n + 300, "\"}");
	cr_assert_neq(creds_of(big, DCR_AWS_IMDS, &c, &e), 0);
	cr_assert(strstr(e.msg, "too long"), "%s", e.msg);
}

Test(awscred, sts_answers)
{
	struct dcr_aws_creds c;
	struct dcr_err e = {0};
	const char *ok = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
			 "<Credentials><AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>s&amp;k</SecretAccessKey>"
			 "<SessionToken>T/+=</SessionToken><Expiration>2026-12-06T15:04:05Z</Expiration>"
			 "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
	cr_assert_eq(dcr_aws_sts_parse(ok, strlen(ok), "sts", &c, &e), 0, "%s", e.msg);
	cr_assert_str_eq(c.akid, "ASIA1");
	cr_assert_str_eq(c.secret, "s&k");
	cr_assert_str_eq(c.token, "T/+=");
	cr_assert_eq(c.expires, (time_t)1796569445);
	dcr_aws_creds_free(&c);
	static const struct {
		const char *xml, *msg;
	} bad[] = {
		{"<Response/>", "no Credentials"},
		{"<Credentials><AccessKeyId>A</AccessKeyId></Credentials>", "without AccessKeyId"},
		{"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
		 "<SessionToken>T&#10;X</SessionToken><Expiration>2026-12-06T15:04:05Z</Expiration>"
		 "</Credentials>",
		 "not printable ASCII"},
		{"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
		 "<SessionToken>a\nb</SessionToken><Expiration>2026-12-06T15:04:05Z</Expiration>"
		 "</Credentials>",
		 "not printable ASCII"},
		{"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
		 "<SessionToken>T</SessionToken><Expiration>soon</Expiration></Credentials>",
		 "no ISO 8601 time"},
		{"<Credentials><AccessKeyId>A", "no Credentials"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&c, 0x55, sizeof(c));
		cr_assert_neq(dcr_aws_sts_parse(bad[i].xml, strlen(bad[i].xml), "sts", &c, &e), 0, "%s",
			      bad[i].xml);
		cr_assert(strstr(e.msg, bad[i].msg), "%s: %s", bad[i].xml, e.msg);
		cr_assert_null(c.akid);
		cr_assert_null(c.token);
	}
}
