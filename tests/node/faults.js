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
const fs = require('fs');

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
    this.seen = new Map();
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
  faults.log(req, status, cut ? 'CUT' : '');
  res.writeHead(status, headers);
  if (req.method === 'HEAD') return res.end();
  if (!cut) return res.end(body);
  res.write(body.subarray(0, body.length >> 1), () => res.socket.destroy());
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
