'use strict';
// An HTTP object store on loopback for dcr's tests, in memory, speaking the
// convention of lib/store.h: PUT/GET/HEAD/DELETE of BASE/NAME, Range and
// If-Match on GET, "If-None-Match: *" on PUT (412 if the object exists), and
// GET BASE/?prefix=P listing the names under BASE that start with P, one per
// line. Options (plus those of faults.js):
//   --port-file F            write the port here when ready
//   --no-list                answer listings with 404
//   --deny METHOD            answer every METHOD request with 403 (a key
//                            without the right to it, s3:DeleteObject)
//   --deny-match REGEX       answer every request whose URL matches with 403
//                            (a key that may not read some objects)
//   --ignore-if-none-match   overwrite even with "If-None-Match: *"
//   --bearer TOKEN           answer 401 to a request without
//                            "Authorization: Bearer TOKEN"
//   --tls-cert F --tls-key F serve HTTPS
const crypto = require('crypto');
const http = require('http');
const https = require('https');
const fs = require('fs');
const { parseArgs, Faults, send, readBody, announce } = require('./faults');

const o = parseArgs(process.argv.slice(2));
const faults = new Faults(o);
const objects = new Map(); // decoded path -> { data, etag }

function text(res, req, status, msg) {
  send(res, req, faults, status, { 'Content-Type': 'text/plain' }, Buffer.from(msg + '\n'));
}

async function handle(req, res) {
  const body = await readBody(req);
  const u = new URL(req.url, 'http://x');
  const p = decodeURIComponent(u.pathname);
  if (faults.shouldFail(req)) return text(res, req, 500, 'internal error (injected)');
  if (faults.shouldStall(req)) return faults.log(req, 0, 'STALL');
  if (o.deny === req.method) return text(res, req, 403, `${req.method} denied here`);
  if (o.denyMatch && new RegExp(o.denyMatch).test(req.url)) return text(res, req, 403, 'denied here');
  if (o.bearer && req.headers.authorization !== `Bearer ${o.bearer}`) return text(res, req, 401, 'a bearer token is wanted');
  const obj = objects.get(p);
  switch (req.method) {
    case 'PUT': {
      if (req.headers['if-none-match'] === '*' && obj && !o.ignoreIfNoneMatch)
        return text(res, req, 412, 'precondition failed: object exists');
      const etag = '"' + crypto.createHash('md5').update(body).digest('hex') + '"';
      objects.set(p, { data: body, etag });
      if (faults.shouldDrop(req)) {
        faults.log(req, 0, 'DROPPED');
        return req.socket.destroy();
      }
      return send(res, req, faults, 200, { ETag: etag, 'Content-Length': 0 });
    }
    case 'GET':
    case 'HEAD': {
      if (req.method === 'GET' && p.endsWith('/') && u.searchParams.has('prefix')) {
        if (o.noList) return text(res, req, 404, 'no listing here');
        const pfx = p + u.searchParams.get('prefix');
        const names = [...objects.keys()].filter((k) => k.startsWith(pfx)).map((k) => k.slice(p.length));
        return send(res, req, faults, 200, { 'Content-Type': 'text/plain' },
          Buffer.from(names.map((n) => n + '\n').join('')));
      }
      if (!obj) return text(res, req, 404, `no such object: ${p}`);
      const im = req.headers['if-match'];
      if (im && im !== obj.etag && im !== '*') return text(res, req, 412, 'precondition failed: ETag changed');
      const size = obj.data.length;
      const range = req.method === 'GET' && /^bytes=(\d+)-(\d*)$/.exec(req.headers.range || '');
      if (range) {
        const a = parseInt(range[1], 10);
        const b = range[2] ? Math.min(parseInt(range[2], 10), size - 1) : size - 1;
        if (a >= size || b < a)
          return send(res, req, faults, 416, { 'Content-Range': `bytes */${size}`, 'Content-Length': 0 });
        const part = obj.data.subarray(a, b + 1);
        return send(res, req, faults, 206, {
          'Content-Length': part.length, 'Content-Range': `bytes ${a}-${b}/${size}`, ETag: obj.etag,
        }, part);
      }
      return send(res, req, faults, 200, { 'Content-Length': size, ETag: obj.etag, 'Accept-Ranges': 'bytes' },
        req.method === 'GET' ? obj.data : null);
    }
    case 'DELETE':
      if (!obj) return text(res, req, 404, `no such object: ${p}`);
      objects.delete(p);
      faults.log(req, 204);
      res.writeHead(204);
      return res.end();
    default:
      return text(res, req, 405, 'method not allowed');
  }
}

const onReq = (req, res) => handle(req, res).catch((e) => { res.statusCode = 500; res.end(String(e)); });
const server = o.tlsCert
  ? https.createServer({ cert: fs.readFileSync(o.tlsCert), key: fs.readFileSync(o.tlsKey) }, onReq)
  : http.createServer(onReq);
server.listen(0, '127.0.0.1', () => announce(o.portFile, server.address().port));
