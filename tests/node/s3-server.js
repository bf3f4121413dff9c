'use strict';
// s3rver on loopback behind a proxy that checks every request's AWS
// Signature Version 4 independently of dcr, with the npm aws4 package, and
// answers 403 SignatureDoesNotMatch (or InvalidAccessKeyId, ...) like S3 when
// it is wrong. s3rver itself does not check V4 signatures.
//   --port-file F          the proxy's port, written when ready
//   --direct-port-file F   s3rver's own port (no checks), if wanted
//   --dir D                s3rver's storage directory
//   --bucket B             bucket to create (default dcr-test)
//   --key K --secret S     the one credential accepted
//   --token T              require this x-amz-security-token, signed
//   --expired-token T      a token that was good once: S3's 400 ExpiredToken
//   --region R             default us-east-1
//   --tls-cert F --tls-key F   the proxy serves HTTPS
//   --cas                  honour "If-None-Match: *" on PUT (412 if the key
//                          exists), as S3 does since 2024; without it the
//                          header is ignored, as s3rver and older servers do
//   --torn-puts            keep s3rver's own PUT, which shows an object while
//                          it is being written (see below); by default PUT
//                          is atomic, as S3's is
//   --clock-offset S       the server's clock runs S seconds ahead of this
//                          machine's (negative: behind): requests are checked
//                          against it (S3 refuses those more than 15 minutes
//                          off with 403 RequestTimeTooSkewed) and every
//                          answer's Date header tells it, as S3's do
//   --no-date              answers carry no Date header (a proxy that drops it)
//   --moto-complete        answer CompleteMultipartUpload as moto 5.2 does,
//                          its root element CompleteMultipartUploadResponse
//                          (S3's is ...Result), after the white space S3
//                          sends to keep a slow completion alive
// plus the fault options of faults.js.
const crypto = require('crypto');
const http = require('http');
const https = require('https');
const aws4 = require('aws4');

// s3rver 3.7 makes its opaque ListObjectsV2 continuation tokens with DES,
// which OpenSSL 3 (Node >= 17) refuses. Where DES is missing, let 'des' be a
// pass-through so listing continues; the token stays opaque to clients.
try {
  crypto.createCipheriv('des', Buffer.alloc(8), Buffer.alloc(8));
} catch (e) {
  const passThrough = () => ({ update: (d) => Buffer.from(d), final: () => Buffer.alloc(0) });
  for (const f of ['createCipheriv', 'createDecipheriv']) {
    const orig = crypto[f];
    crypto[f] = (alg, ...rest) => (alg === 'des' ? passThrough() : orig.call(crypto, alg, ...rest));
  }
}
const S3rver = require('s3rver');
const FilesystemStore = require('s3rver/lib/stores/filesystem');
const fs = require('fs');
const fsp = fs.promises;
const { dirname } = require('path');
const { pipeline, Transform } = require('stream');

// s3rver writes an object's bytes straight into its file, which GET and
// ListObjectsV2 already show (Content-Length is the file's size so far): a
// reader polling for a new object, as dcr-pull --wait does, could get a
// torn object in a well-formed 200 answer. S3's PUT is atomic, so write
// beside the object (a name s3rver does not list) and rename it into place
// after its metadata.
const atomicPut = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  const tmp = `${objectPath}.uploading-${process.pid}-${crypto.randomBytes(6).toString('hex')}`;
  await fsp.mkdir(dirname(objectPath), { recursive: true });
  const md5 = crypto.createHash('md5');
  let size = 0;
  try {
    if (Buffer.isBuffer(object.content)) {
      await fsp.writeFile(tmp, object.content);
      md5.update(object.content);
      size = object.content.length;
    } else {
      await new Promise((resolve, reject) => pipeline(object.content,
        new Transform({
          transform(chunk, enc, cb) { md5.update(chunk); size += chunk.length; cb(null, chunk); },
        }),
        fs.createWriteStream(tmp), (err) => (err ? reject(err) : resolve())));
    }
    const digest = md5.digest('hex');
    await this.putMetadata(object.bucket, object.key, object.metadata, digest);
    await fsp.rename(tmp, objectPath);
    return { size, md5: digest };
  } catch (e) {
    await fsp.rm(tmp, { force: true });
    throw e;
  }
};
const { parseArgs, Faults, send, readBody, announce } = require('./faults');

const o = parseArgs(process.argv.slice(2));
const faults = new Faults(o);
if (!o.tornPuts) FilesystemStore.prototype.putObject = atomicPut;
const region = o.region || 'us-east-1';
const clockOffset = o.clockOffset ? parseInt(o.clockOffset, 10) * 1000 : 0;
const now = () => Date.now() + clockOffset;
// the Date header, on this server's clock (none with --no-date)
function dated(h) {
  delete h.date;
  if (!o.noDate) h.Date = new Date(now()).toUTCString();
  return h;
}
let upstream = 0;

function xmlError(code, message) {
  const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return Buffer.from(`<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${esc(code)}</Code>` +
    `<Message>${esc(message)}</Message></Error>`);
}

// S3 names the bucket's region in its error answers too (a request signed
// for another region is told where the bucket is).
function fail(res, req, status, code, message) {
  send(res, req, faults, status, dated({ 'Content-Type': 'application/xml', 'x-amz-bucket-region': region }),
    xmlError(code, message));
}

const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');

// null if the signature is right, else [status, code, message].
function verify(req, body) {
  const auth = req.headers.authorization;
  if (!auth) return [403, 'AccessDenied', 'Access Denied (no Authorization header)'];
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return [400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed'];
  const [, akid, date, reg, service, signed, sig] = m;
  if (akid !== o.key)
    return [403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];
  if (reg !== region || service !== 's3')
    return [400, 'AuthorizationHeaderMalformed', `the region '${reg}' is wrong; expecting '${region}'`];
  const amzDate = req.headers['x-amz-date'] || '';
  if (amzDate.slice(0, 8) !== date)
    return [403, 'SignatureDoesNotMatch', 'x-amz-date does not match the credential scope date'];
  const t = Date.UTC(+amzDate.slice(0, 4), +amzDate.slice(4, 6) - 1, +amzDate.slice(6, 8),
    +amzDate.slice(9, 11), +amzDate.slice(11, 13), +amzDate.slice(13, 15));
  if (!(Math.abs(now() - t) < 15 * 60 * 1000))
    return [403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.'];
  const names = signed.split(';');
  for (const must of ['host', 'x-amz-date', 'x-amz-content-sha256'])
    if (!names.includes(must))
      return [403, 'SignatureDoesNotMatch', `the signed headers do not include ${must}`];
  const psha = req.headers['x-amz-content-sha256'];
  if (psha !== 'UNSIGNED-PAYLOAD' && psha !== sha256(body))
    return [400, 'XAmzContentSHA256Mismatch', "The provided 'x-amz-content-sha256' header does not match what was computed."];
  if (o.expiredToken && req.headers['x-amz-security-token'] === o.expiredToken)
    return [400, 'ExpiredToken', 'The provided token has expired.'];
  if (o.token && req.headers['x-amz-security-token'] !== o.token)
    return [403, 'InvalidToken', 'The provided token is malformed or otherwise invalid.'];
  if (req.headers['x-amz-security-token'] && !names.includes('x-amz-security-token'))
    return [403, 'SignatureDoesNotMatch', 'x-amz-security-token is not signed'];
  const headers = {}, include = {};
  for (const n of names) {
    if (req.headers[n] === undefined) return [403, 'SignatureDoesNotMatch', `signed header ${n} is missing`];
    headers[n] = req.headers[n];
    include[n] = true;
  }
  const signer = new aws4.RequestSigner({
    service: 's3', region, method: req.method, host: req.headers.host, path: req.url,
    headers, extraHeadersToInclude: include,
  }, { accessKeyId: akid, secretAccessKey: o.secret });
  signer.prepareRequest();
  if (signer.signature() !== sig)
    return [403, 'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. Check your key and signing method.'];
  return null;
}

function forward(req, body, method, headers) {
  return new Promise((resolve, reject) => {
    const up = http.request({ host: '127.0.0.1', port: upstream, method, path: req.url, headers }, (r) => {
      const parts = [];
      r.on('data', (c) => parts.push(c));
      r.on('end', () => resolve({ status: r.statusCode, headers: r.headers, body: Buffer.concat(parts) }));
      r.on('error', reject);
    });
    up.on('error', reject);
    up.end(method === 'HEAD' ? undefined : body);
  });
}

const locks = new Map(); // key -> promise: conditional PUTs one at a time

async function handle(req, res) {
  if (o.noDate) res.sendDate = false;
  const body = await readBody(req);
  if (faults.shouldFail(req)) return fail(res, req, 500, 'InternalError', 'We encountered an internal error. Please try again.');
  const bad = verify(req, body);
  if (bad) return fail(res, req, ...bad);
  const headers = { ...req.headers };
  // s3rver checks the request's time against its own clock, the real one
  if (clockOffset && headers['x-amz-date'])
    headers['x-amz-date'] = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '');
  const conditional = req.method === 'PUT' && req.headers['if-none-match'] === '*' && o.cas;
  let release = null;
  if (conditional) {
    const path = req.url.split('?')[0];
    const prev = locks.get(path) || Promise.resolve();
    let done;
    const mine = new Promise((r) => { done = r; });
    locks.set(path, prev.then(() => mine));
    await prev;
    release = () => { done(); if (locks.get(path) === mine) locks.delete(path); };
    const h = { ...headers };
    delete h['content-length'];
    delete h['if-none-match'];
    const head = await forward({ url: path }, null, 'HEAD', h);
    if (head.status === 200) {
      release();
      return fail(res, req, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold');
    }
  }
  try {
    const r = await forward(req, body, req.method, headers);
    const out = { ...r.headers };
    delete out['transfer-encoding'];
    delete out.connection;
    dated(out);
    let rb = r.body;
    if (o.motoComplete && req.method === 'POST' && /[?&]uploadId=/.test(req.url) && r.status === 200) {
      rb = Buffer.from('  \n' + rb.toString().replace(/CompleteMultipartUploadResult/g,
        'CompleteMultipartUploadResponse'));
    }
    if (req.method !== 'HEAD') out['content-length'] = rb.length;
    send(res, req, faults, r.status, out, rb);
  } finally {
    if (release) release();
  }
}

(async () => {
  const s3 = new S3rver({
    port: 0, address: '127.0.0.1', silent: true, directory: o.dir,
    configureBuckets: [{ name: o.bucket || 'dcr-test' }], vhostBuckets: false,
    // virtual-hosted requests to BUCKET.s3.localhost (curl resolves *.localhost)
    serviceEndpoint: 'localhost',
  });
  const addr = await s3.run();
  upstream = addr.port;
  const onReq = (req, res) => handle(req, res).catch((e) => {
    res.statusCode = 502;
    res.end(String(e));
  });
  const proxy = o.tlsCert
    ? https.createServer({ cert: fs.readFileSync(o.tlsCert), key: fs.readFileSync(o.tlsKey) }, onReq)
    : http.createServer(onReq);
  proxy.listen(0, '127.0.0.1', () => {
    if (o.directPortFile) announce(o.directPortFile, upstream);
    announce(o.portFile, proxy.address().port);
  });
})().catch((e) => { console.error(e); process.exit(1); });
