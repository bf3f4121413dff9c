'use strict';
// The two credential endpoints AWS gives a machine, on loopback, as AWS
// documents them, for dcr's tests:
//   EC2 instance metadata (IMDSv2): PUT /latest/api/token with
//     X-aws-ec2-metadata-token-ttl-seconds gives a session token; GET
//     /latest/meta-data/iam/security-credentials/ (the role's name) and
//     .../ROLE (its keys, JSON) want it in X-aws-ec2-metadata-token (401
//     without it, as IMDSv2-only instances answer);
//   the container endpoint (ECS, EKS Pod Identity): GET /creds with the
//     Authorization header --auth gives the keys as JSON;
//   STS (EKS IRSA): POST / with the form Action=AssumeRoleWithWebIdentity,
//     Version, RoleArn (--role-arn), RoleSessionName and WebIdentityToken
//     (--web-token) gives the keys as STS's XML; else STS's XML error.
// Options:
//   --port-file F     write the port here when ready
//   --key K --secret S --token T   the keys handed out
//   --ttl N           Expiration this many seconds after each answer (3600)
//   --auth A          the container endpoint's Authorization value
//   --v1              no session tokens: PUT answers 405 and GETs want none
//   --put-lost        v1, and PUT's answer never comes (an instance's hop
//                     limit of 1 seen from a container: the answer dies on
//                     the way)
//   --no-role         the instance has no role: the listing answers 404
//   --bad-json        the keys' answer is not JSON (STS: no Credentials)
//   --role-arn A --web-token W   what STS accepts
//   --log FILE        append "METHOD PATH" per request
const http = require('http');
const fs = require('fs');
const { parseArgs, announce } = require('./faults');

const o = parseArgs(process.argv.slice(2));
const ttl = parseInt(o.ttl || '3600', 10);
const role = 'dcr-test-role';
const sessions = new Set();
let n = 0;

function keys(tokenName) {
  const exp = new Date(Date.now() + ttl * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
  const k = { AccessKeyId: o.key, SecretAccessKey: o.secret, Expiration: exp };
  k[tokenName] = o.token;
  return k;
}

function answer(res, status, body, type) {
  res.writeHead(status, { 'Content-Type': type || 'text/plain', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function sts(res, body) {
  const f = new URLSearchParams(body);
  if (o.log) fs.appendFileSync(o.log, `STS ${f.get('Action')} ${f.get('RoleSessionName')}\n`);
  const err = (status, code, msg) => answer(res, status,
    `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>${code}</Code><Message>${msg}</Message></Error><RequestId>1</RequestId></ErrorResponse>`,
    'text/xml');
  if (f.get('Action') !== 'AssumeRoleWithWebIdentity' || f.get('Version') !== '2011-06-15')
    return err(400, 'InvalidAction', 'Could not find operation');
  if (f.get('RoleArn') !== o.roleArn) return err(403, 'AccessDenied', 'Not authorized to perform sts:AssumeRoleWithWebIdentity');
  if (f.get('WebIdentityToken') !== o.webToken) return err(400, 'InvalidIdentityToken', 'Couldn&apos;t retrieve verification key from your identity provider');
  if (!/^[\w+=,.@-]{2,64}$/.test(f.get('RoleSessionName') || '')) return err(400, 'ValidationError', 'RoleSessionName');
  const k = keys('Token');
  if (o.badJson) return answer(res, 200, '<AssumeRoleWithWebIdentityResponse/>', 'text/xml');
  return answer(res, 200,
    `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Audience>sts.amazonaws.com</Audience>
    <Credentials>
      <AccessKeyId>${k.AccessKeyId}</AccessKeyId>
      <SecretAccessKey>${k.SecretAccessKey}</SecretAccessKey>
      <SessionToken>${k.Token}</SessionToken>
      <Expiration>${k.Expiration}</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>`, 'text/xml');
}

const server = http.createServer((req, res) => {
  if (req.method === 'POST') {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => sts(res, body));
    return;
  }
  if (o.log) fs.appendFileSync(o.log, `${req.method} ${req.url}\n`);
  const path = req.url.split('?')[0];
  if (path === '/latest/api/token') {
    if (o.putLost) return; /* held open, never answered */
    if (req.method !== 'PUT' || o.v1) return answer(res, 405, 'Method Not Allowed');
    if (!req.headers['x-aws-ec2-metadata-token-ttl-seconds']) return answer(res, 400, 'Missing TTL');
    const t = `imds-session-${++n}-${Date.now()}`;
    sessions.add(t);
    return answer(res, 200, t);
  }
  if (path.startsWith('/latest/meta-data/iam/security-credentials/')) {
    if (req.method !== 'GET') return answer(res, 405, 'Method Not Allowed');
    if (!o.v1 && !o.putLost && !sessions.has(req.headers['x-aws-ec2-metadata-token'])) return answer(res, 401, 'Unauthorized');
    const rest = path.slice('/latest/meta-data/iam/security-credentials/'.length);
    if (o.noRole) return answer(res, 404, 'Not Found');
    if (rest === '') return answer(res, 200, role);
    if (rest !== role) return answer(res, 404, 'Not Found');
    if (o.badJson) return answer(res, 200, '<html>captive portal</html>', 'text/html');
    const k = keys('Token');
    k.Code = 'Success';
    k.Type = 'AWS-HMAC';
    k.LastUpdated = new Date().toISOString();
    return answer(res, 200, JSON.stringify(k, null, 2), 'application/json');
  }
  if (path === '/creds') {
    if (o.auth && req.headers.authorization !== o.auth) return answer(res, 403, 'Forbidden');
    if (o.badJson) return answer(res, 200, 'not json');
    return answer(res, 200, JSON.stringify(keys('Token')), 'application/json');
  }
  answer(res, 404, 'Not Found');
});
server.listen(0, '127.0.0.1', () => announce(o.portFile, server.address().port));
