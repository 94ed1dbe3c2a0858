#!/usr/bin/env node
// A loopback "CDP-style" facilitator for tests: every request must carry a CDP API-key JWT
// (Authorization: Bearer ...) that verifies against a throwaway public key; only then is it
// forwarded to the dev stack's official facilitator. Anything else gets 401.
// The JWT checks are the CDP ones (read off @coinbase/cdp-sdk generateJwt): ES256 or EdDSA as
// the key says, kid = sub = the key id, iss "cdp", uris = ["<METHOD> <host><path>"] of this very
// request, nbf/exp present with a window of at most 120 s, a 32-hex header nonce never seen.
// Verification is jose's (the library the SDK signs with), not ours.
//
//   node cdp-facilitator.mjs keys
//        -> {"key_id", "es256": {secret, sec1_secret, public}, "eddsa": {secret, public}}
//   node cdp-facilitator.mjs jwt --key-id ID --secret-file F --method M --host H --path P
//        [--expires-in S]      -> {"token"} minted by the official SDK's generateJwt
//   node cdp-facilitator.mjs serve --upstream URL --key-id ID --public-key-file F [--port 0]
//        prints {"url": "http://127.0.0.1:PORT/platform/v2/x402"} once listening; exits when
//        stdin closes (its parent is gone). GET /_verifier -> {accepted, rejected: {reason: n}}.
import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import * as jose from 'jose';

const PREFIX = '/platform/v2/x402';
const MAX_WINDOW_SECONDS = 120;

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'key-id': { type: 'string' },
    'secret-file': { type: 'string' },
    'public-key-file': { type: 'string' },
    upstream: { type: 'string' },
    method: { type: 'string' },
    host: { type: 'string' },
    path: { type: 'string' },
    'expires-in': { type: 'string' },
    port: { type: 'string', default: '0' },
  },
});

function keys() {
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const ed = crypto.generateKeyPairSync('ed25519');
  const jwk = ed.privateKey.export({ format: 'jwk' });
  const raw = Buffer.concat([Buffer.from(jwk.d, 'base64url'), Buffer.from(jwk.x, 'base64url')]);
  return {
    key_id: `organizations/${crypto.randomUUID()}/apiKeys/${crypto.randomUUID()}`,
    es256: {
      secret: ec.privateKey.export({ format: 'pem', type: 'pkcs8' }),
      sec1_secret: ec.privateKey.export({ format: 'pem', type: 'sec1' }),
      public: ec.publicKey.export({ format: 'pem', type: 'spki' }),
    },
    eddsa: {
      secret: raw.toString('base64'),
      public: ed.publicKey.export({ format: 'pem', type: 'spki' }),
    },
  };
}

async function sdkJwt() {
  const { generateJwt } = await import('@coinbase/cdp-sdk/auth');
  const token = await generateJwt({
    apiKeyId: opt['key-id'],
    apiKeySecret: fs.readFileSync(opt['secret-file'], 'utf8'),
    requestMethod: opt.method,
    requestHost: opt.host,
    requestPath: opt.path,
    expiresIn: opt['expires-in'] ? Number(opt['expires-in']) : undefined,
  });
  return { token };
}

/** Why a request's token is refused, or null when it is good. */
async function refusal(req, path, publicKey, alg, keyId, seen) {
  const auth = req.headers.authorization || '';
  if (!auth.startsWith('Bearer ')) return 'missing_bearer';
  const token = auth.slice('Bearer '.length);
  let header;
  let payload;
  try {
    ({ payload, protectedHeader: header } = await jose.jwtVerify(token, publicKey, {
      algorithms: [alg],
      issuer: 'cdp',
      subject: keyId,
      requiredClaims: ['nbf', 'exp', 'iat'],
      clockTolerance: 0,
    }));
  } catch (error) {
    return `jwt_${error.code || 'invalid'}`;
  }
  if (header.kid !== keyId) return 'wrong_kid';
  if (header.typ !== 'JWT') return 'wrong_typ';
  if (typeof header.nonce !== 'string' || !/^[0-9a-f]{32}$/.test(header.nonce)) return 'bad_nonce';
  if (payload.exp - payload.nbf > MAX_WINDOW_SECONDS) return 'window_too_long';
  const expected = `${req.method} ${req.headers.host}${path}`;
  if (!Array.isArray(payload.uris) || payload.uris.length !== 1 || payload.uris[0] !== expected) {
    return 'wrong_uri';
  }
  if (seen.has(header.nonce)) return 'nonce_replayed';
  seen.add(header.nonce);
  return null;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

async function serve() {
  const publicKey = crypto.createPublicKey(fs.readFileSync(opt['public-key-file'], 'utf8'));
  const alg = publicKey.asymmetricKeyType === 'ed25519' ? 'EdDSA' : 'ES256';
  const keyId = opt['key-id'];
  const upstream = opt.upstream.replace(/\/$/, '');
  const seen = new Set();
  const stats = { accepted: 0, rejected: {} };
  const server = http.createServer(async (req, res) => {
    const path = new URL(req.url, 'http://localhost').pathname;
    const body = await readBody(req);
    if (path === '/_verifier') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(stats));
      return;
    }
    const reason = await refusal(req, path, publicKey, alg, keyId, seen);
    if (reason) {
      stats.rejected[reason] = (stats.rejected[reason] || 0) + 1;
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ errorType: 'unauthorized', errorMessage: reason }));
      return;
    }
    if (!path.startsWith(`${PREFIX}/`)) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ errorType: 'not_found' }));
      return;
    }
    stats.accepted += 1;
    try {
      const answer = await fetch(upstream + path.slice(PREFIX.length), {
        method: req.method,
        headers: { 'content-type': req.headers['content-type'] || 'application/json' },
        body: req.method === 'GET' ? undefined : body,
      });
      const text = await answer.text();
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(text);
    } catch (error) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ errorType: 'upstream_unreachable', errorMessage: String(error) }));
    }
  });
  server.listen(Number(opt.port), '127.0.0.1', () => {
    const { port } = server.address();
    process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}${PREFIX}` })}\n`);
  });
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

const command = positionals[0];
if (command === 'keys') {
  process.stdout.write(`${JSON.stringify(keys())}\n`);
} else if (command === 'jwt') {
  process.stdout.write(`${JSON.stringify(await sdkJwt())}\n`);
} else if (command === 'serve') {
  await serve();
} else {
  process.stderr.write('usage: cdp-facilitator.mjs keys | jwt ... | serve ...\n');
  process.exit(2);
}
