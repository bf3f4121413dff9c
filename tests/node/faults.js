'use strict';
// Fault injection and request logging shared by dcr's loopback test servers.
//   --fail-first N   answer the first N requests of each METHOD+URL with 500
//   --cut-first N    send only half the body of the first N successful GETs
//                    of each URL, then close the connection
//   --always-cut     cut every successful GET with a body
//   --drop-first N   carry out the first N requests of each METHOD+URL, then
//                    close the connection without an answer (the answer is
//                    lost, the effect is not)
//   --stall-first N  never answer the first N requests of each METHOD+URL
//   --match REGEX    faults only for URLs matching REGEX
//   --log FILE       append "METHOD URL STATUS [range=...] [CUT]" per request
//   --corrupt-first N  flip one bit in the middle of the body of the first N
//                    successful GETs of each URL (logged CORRUPT)
//   --rate BYTES     send bodies at most this many bytes per second in all,
//                    every response sharing one token bucket: a slow link
//                    that whatever crosses it shares (K, M suffixes)
//   --bytes-file F   keep F holding the total body bytes sent by GETs
const fs = require('fs');

function parseSize(v) {
  const m = /^(\d+)([KkMmGg]?)$/.exec(v);
  if (!m) throw new Error(`bad size ${v}`);
  return parseInt(m[1], 10) * { '': 1, k: 1024, m: 1 << 20, g: 1 << 30 }[m[2].toLowerCase()];
}

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}`);
    const k = a.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) o[k] = argv[++i];
    else o[k] = true;
  }
  return o;
}

class Faults {
  constructor(o) {
    this.failFirst = parseInt(o.failFirst || '0', 10);
    this.cutFirst = parseInt(o.cutFirst || '0', 10);
    this.alwaysCut = !!o.alwaysCut;
    this.dropFirst = parseInt(o.dropFirst || '0', 10);
    this.stallFirst = parseInt(o.stallFirst || '0', 10);
    this.match = o.match ? new RegExp(o.match) : null;
    this.logFile = o.log || null;
    this.corruptFirst = parseInt(o.corruptFirst || '0', 10);
    this.rate = o.rate ? parseSize(o.rate) : 0;
    this.bytesFile = o.bytesFile || null;
    this.sent = 0;
    this.nextFree = 0; // when the shared link is free again (ms)
    this.seen = new Map();
    if (this.bytesFile) this.countBytes(0);
  }
  shouldCorrupt(req, status, len) {
    if (req.method !== 'GET' || (status !== 200 && status !== 206) || len < 2 || !this.applies(req))
      return false;
    return this.corruptFirst > 0 && this.count('corrupt', req) <= this.corruptFirst;
  }
  countBytes(n, partial) {
    this.sent += n;
    if (!this.bytesFile) return;
    const now = Date.now();
    if (partial && now - (this.lastWrite || 0) < 50) return;
    this.lastWrite = now;
    fs.writeFileSync(this.bytesFile + '.tmp', String(this.sent) + '\n');
    fs.renameSync(this.bytesFile + '.tmp', this.bytesFile);
  }
  // Wait until n more bytes may cross the link: each chunk books the next
  // free slot of the shared link, so all responses share the rate.
  linkWait(n) {
    const now = Date.now();
    const start = Math.max(now, this.nextFree);
    this.nextFree = start + (n * 1000) / this.rate;
    const wait = this.nextFree - now;
    return wait > 1 ? new Promise((r) => setTimeout(r, wait)) : Promise.resolve();
  }
  applies(req) { return !this.match || this.match.test(req.url); }
  count(kind, req) {
    const k = `${kind} ${req.method} ${req.url}`;
    const n = (this.seen.get(k) || 0) + 1;
    this.seen.set(k, n);
    return n;
  }
  shouldFail(req) {
    return this.failFirst > 0 && this.applies(req) && this.count('fail', req) <= this.failFirst;
  }
  shouldDrop(req) {
    return this.dropFirst > 0 && this.applies(req) && this.count('drop', req) <= this.dropFirst;
  }
  shouldStall(req) {
    return this.stallFirst > 0 && this.applies(req) && this.count('stall', req) <= this.stallFirst;
  }
  shouldCut(req, status, len) {
    if (req.method !== 'GET' || (status !== 200 && status !== 206) || len < 2 || !this.applies(req))
      return false;
    return this.alwaysCut || (this.cutFirst > 0 && this.count('cut', req) <= this.cutFirst);
  }
  log(req, status, extra) {
    if (!this.logFile) return;
    const r = req.headers.range ? ` range=${req.headers.range}` : '';
    fs.appendFileSync(this.logFile, `${req.method} ${req.url} ${status}${r}${extra ? ' ' + extra : ''}\n`);
  }
}

// Send status, headers and body; when cut, half the body, then reset.
function send(res, req, faults, status, headers, body) {
  body = body || Buffer.alloc(0);
  const cut = faults.shouldCut(req, status, body.length);
  const bad = faults.shouldCorrupt(req, status, body.length);
  if (bad) {
    body = Buffer.from(body);
    body[body.length >> 1] ^= 0x10;
  }
  faults.log(req, status, [cut ? 'CUT' : '', bad ? 'CORRUPT' : ''].filter((x) => x).join(' '));
  res.writeHead(status, headers);
  if (req.method === 'HEAD') return res.end();
  const ok = req.method === 'GET' && (status === 200 || status === 206);
  const end = cut ? body.length >> 1 : body.length;
  if (!faults.rate) {
    if (ok) faults.countBytes(end);
    if (!cut) return res.end(body);
    return res.write(body.subarray(0, end), () => res.socket.destroy());
  }
  // through the shared slow link, 16 KiB at a time
  (async () => {
    for (let at = 0; at < end;) {
      const n = Math.min(16384, end - at);
      await faults.linkWait(n);
      if (res.destroyed || res.socket === null) return;
      const more = res.write(body.subarray(at, at + n));
      if (ok) faults.countBytes(n, true);
      at += n;
      if (!more) await new Promise((r) => res.once('drain', r));
    }
    if (ok) faults.countBytes(0);
    if (cut) res.socket.destroy();
    else res.end();
  })().catch(() => res.destroy());
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

// Write the port atomically once listening: tests poll for the file.
function announce(file, port) {
  fs.writeFileSync(file + '.tmp', String(port) + '\n');
  fs.renameSync(file + '.tmp', file);
}

module.exports = { parseArgs, Faults, send, readBody, announce };
