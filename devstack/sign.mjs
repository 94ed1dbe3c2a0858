#!/usr/bin/env node
// Build ONE x402 v2 PAYMENT-SIGNATURE header value (exact / EIP-3009) from a PAYMENT-REQUIRED header value,
// WITHOUT sending any request, and print ONE line of JSON to stdout:
//   {"header": "<standard padded base64 of the payload JSON>", "payload": {…}, "nonce": "0x…", "from": "0x…"}
// Tests use it to present deliberately wrong payments to a server, and to replay exact copies.
//
//   node devstack/sign.mjs --required <base64 PAYMENT-REQUIRED> [--state PATH] [--key 0x..] [mutations...]
//
// It signs for accepts[0] only. --key defaults to the state file's buyer_private_key (state path: --state, else
// $FACTOMAT_DEVSTACK_STATE, else /work/main/.devstack/state.json). The state file is read only when --key is absent,
// and nothing talks to the network.
//
// Without mutations the payload comes from the OFFICIAL client: x402Client (+ x402HTTPClient for the header) with
// the @x402/evm ExactEvmScheme registered for eip155:*, spend controls allowing accepts[0]'s asset with no cap.
// This is the same as what @x402/fetch sends: key order x402Version, payload, extensions (when the 402 has
// them), resource, accepted (= accepts[0] verbatim); authorization {from, to: getAddress(payTo), value: amount,
// validAfter "0", validBefore now+maxTimeoutSeconds, nonce: 32 random bytes}.
//
// With any mutation the same payload is built by hand and signed with viem signTypedData. The EIP-712 domain
// always comes from the UNMUTATED accepts[0]: name/version from extra, chainId from network, verifyingContract = asset.
// The signature is always valid over the authorization that is emitted, unless --corrupt-signature is given.
// Each flag changes exactly one thing:
//   --signed-value N        authorization.value = N (accepted unchanged)
//   --to 0xADDR             authorization.to = ADDR, exactly as typed (accepted unchanged)
//   --accepted-network S    accepted.network = S (the domain still uses the chain id of the real network)
//   --accepted-asset 0x..   accepted.asset = that (domain verifyingContract stays the real asset)
//   --accepted-amount N     accepted.amount = N and authorization.value = N (--signed-value still overrides the value)
//   --valid-before N        authorization.validBefore = N (unix seconds; may be in the past)
//   --valid-after N         authorization.validAfter = N
//   --corrupt-signature     XOR 0xff into byte 32 of the 65-byte signature (first byte of s; length unchanged)
//   --x402-version N        top-level x402Version = N
//   --nonce 0x..            use this 32-byte nonce (emitted exactly as typed)
//   --resource-url URL      paymentPayload.resource.url = URL (the other resource fields echoed as received)
//   --extension-info NAME=JSON   paymentPayload.extensions[NAME].info = JSON (replaced whole; repeatable;
//                           creates extensions[NAME] when the 402 did not declare it)
//   --accepted-extra KEY=VALUE   an additive key in accepted.extra (VALUE parsed as JSON when it is JSON,
//                           else the string; repeatable; the EIP-712 domain is unchanged)
//   --no-echo               omit resource and extensions from the payload (x402Version, payload, accepted only)
// Echo: like the official client, the payload carries the 402's extensions (when present) and resource
// verbatim, in the key order x402Version, payload, extensions, resource, accepted.
// Bad arguments: message on stderr, exit code 2. Signing failure: message on stderr, exit code 1.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
// Narrow viem entry points, and @x402 only on the default path: importing 'viem' (or lib.mjs, which imports
// it) costs about 0.3 s of the run time.
import { getAddress } from 'viem/utils';
import { privateKeyToAccount } from 'viem/accounts';

// same as lib.mjs DEFAULT_STATE_PATH (not imported, see above)
const DEFAULT_STATE_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '.devstack', 'state.json');

const USAGE =
  'usage: node devstack/sign.mjs --required <base64 PAYMENT-REQUIRED> [--state PATH] [--key 0x..] ' +
  '[--signed-value N] [--to 0xADDR] [--accepted-network S] [--accepted-asset 0xADDR] [--accepted-amount N] ' +
  '[--valid-before N] [--valid-after N] [--corrupt-signature] [--x402-version N] [--nonce 0x..32 bytes] ' +
  '[--resource-url URL] [--extension-info NAME=JSON]... [--accepted-extra KEY=VALUE]... [--no-echo]';

class UsageError extends Error {}
const usage = (msg) => {
  throw new UsageError(msg);
};

const AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
};
const UINT256_MAX = (1n << 256n) - 1n;
const ADDRESS_RE = /^0x[0-9a-fA-F]{40}$/;
const BYTES32_RE = /^0x[0-9a-fA-F]{64}$/;
const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;

const MUTATIONS = [
  'signed-value',
  'to',
  'accepted-network',
  'accepted-asset',
  'accepted-amount',
  'valid-before',
  'valid-after',
  'corrupt-signature',
  'x402-version',
  'nonce',
  'resource-url',
  'extension-info',
  'accepted-extra',
  'no-echo',
];

function uint256Arg(name, v) {
  if (!/^\d+$/.test(v) || BigInt(v) > UINT256_MAX) usage(`--${name} must be a decimal uint256, got ${JSON.stringify(v)}`);
  return v;
}
function addressArg(name, v) {
  if (!ADDRESS_RE.test(v)) usage(`--${name} must be a 0x-prefixed 20-byte hex address, got ${JSON.stringify(v)}`);
  return v;
}
function toB64(obj) {
  return Buffer.from(JSON.stringify(obj), 'utf8').toString('base64');
}

function parseCli() {
  let values;
  try {
    ({ values } = parseArgs({
      strict: true,
      allowPositionals: false,
      options: {
        required: { type: 'string' },
        state: { type: 'string', default: process.env.FACTOMAT_DEVSTACK_STATE || DEFAULT_STATE_PATH },
        key: { type: 'string' },
        'signed-value': { type: 'string' },
        to: { type: 'string' },
        'accepted-network': { type: 'string' },
        'accepted-asset': { type: 'string' },
        'accepted-amount': { type: 'string' },
        'valid-before': { type: 'string' },
        'valid-after': { type: 'string' },
        'corrupt-signature': { type: 'boolean' },
        'x402-version': { type: 'string' },
        nonce: { type: 'string' },
        'resource-url': { type: 'string' },
        'extension-info': { type: 'string', multiple: true },
        'accepted-extra': { type: 'string', multiple: true },
        'no-echo': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    usage(e.message);
  }
  if (values.help) {
    const src = fs.readFileSync(new URL(import.meta.url), 'utf8').split('\n');
    console.log(src.slice(1, src.findIndex((l) => l.startsWith('import'))).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
    process.exit(0);
  }
  if (values.required === undefined || values.required === '') usage('--required is missing');
  if (values['signed-value'] !== undefined) uint256Arg('signed-value', values['signed-value']);
  if (values['accepted-amount'] !== undefined) uint256Arg('accepted-amount', values['accepted-amount']);
  if (values['valid-before'] !== undefined) uint256Arg('valid-before', values['valid-before']);
  if (values['valid-after'] !== undefined) uint256Arg('valid-after', values['valid-after']);
  if (values.to !== undefined) addressArg('to', values.to);
  if (values['accepted-asset'] !== undefined) addressArg('accepted-asset', values['accepted-asset']);
  if (values['accepted-network'] !== undefined && values['accepted-network'] === '') usage('--accepted-network must not be empty');
  if (values['x402-version'] !== undefined && !/^-?\d+$/.test(values['x402-version'])) {
    usage(`--x402-version must be an integer, got ${JSON.stringify(values['x402-version'])}`);
  }
  if (values.nonce !== undefined && !BYTES32_RE.test(values.nonce)) {
    usage(`--nonce must be 0x followed by 64 hex digits (32 bytes), got ${JSON.stringify(values.nonce)}`);
  }
  if (values.key !== undefined && !BYTES32_RE.test(values.key)) usage('--key must be 0x followed by 64 hex digits');
  if (values['resource-url'] === '') usage('--resource-url must not be empty');
  values.extensionInfo = (values['extension-info'] ?? []).map((pair) => {
    const [name, json] = splitPair('extension-info', pair);
    try {
      return [name, JSON.parse(json)];
    } catch (e) {
      return usage(`--extension-info ${name}: the value is not JSON (${e.message})`);
    }
  });
  values.acceptedExtra = (values['accepted-extra'] ?? []).map((pair) => {
    const [key, raw] = splitPair('accepted-extra', pair);
    if (key === 'name' || key === 'version') usage('--accepted-extra adds a key; extra.name and extra.version are the EIP-712 domain');
    try {
      return [key, JSON.parse(raw)];
    } catch {
      return [key, raw];
    }
  });
  return values;
}

// "NAME=VALUE" -> [NAME, VALUE] (VALUE may contain '=').
function splitPair(flag, pair) {
  const i = pair.indexOf('=');
  if (i <= 0) usage(`--${flag} wants NAME=VALUE, got ${JSON.stringify(pair)}`);
  return [pair.slice(0, i), pair.slice(i + 1)];
}

function decodeRequired(b64) {
  const s = b64.trim();
  if (!BASE64_RE.test(s)) usage('--required is not standard base64 (want the raw PAYMENT-REQUIRED header value)');
  let pr;
  try {
    pr = JSON.parse(Buffer.from(s, 'base64').toString('utf8'));
  } catch (e) {
    usage(`--required does not decode to JSON: ${e.message}`);
  }
  if (pr === null || typeof pr !== 'object' || Array.isArray(pr)) usage('--required: PaymentRequired is not a JSON object');
  if (!Array.isArray(pr.accepts) || pr.accepts.length === 0) usage('--required: PaymentRequired.accepts is missing or empty');
  const req = pr.accepts[0];
  if (req === null || typeof req !== 'object' || Array.isArray(req)) usage('--required: accepts[0] is not an object');
  for (const k of ['scheme', 'network', 'amount', 'asset', 'payTo']) {
    if (typeof req[k] !== 'string') usage(`--required: accepts[0].${k} is not a string`);
  }
  if (!Number.isSafeInteger(req.maxTimeoutSeconds)) usage('--required: accepts[0].maxTimeoutSeconds is not an integer');
  if (!/^eip155:\d+$/.test(req.network)) usage(`--required: accepts[0].network ${JSON.stringify(req.network)} is not eip155:<chain id>`);
  if (!ADDRESS_RE.test(req.asset)) usage(`--required: accepts[0].asset ${JSON.stringify(req.asset)} is not an address`);
  if (!ADDRESS_RE.test(req.payTo)) usage(`--required: accepts[0].payTo ${JSON.stringify(req.payTo)} is not an address`);
  if (!/^\d+$/.test(req.amount)) usage(`--required: accepts[0].amount ${JSON.stringify(req.amount)} is not a decimal integer`);
  if (typeof req.extra?.name !== 'string' || typeof req.extra?.version !== 'string') {
    usage('--required: accepts[0].extra.name / extra.version (the EIP-712 domain) are missing');
  }
  return pr;
}

function loadAccount(opt) {
  let key = opt.key;
  if (key === undefined) {
    const statePath = path.resolve(opt.state);
    if (!fs.existsSync(statePath)) usage(`no --key and no state file at ${statePath}`);
    key = JSON.parse(fs.readFileSync(statePath, 'utf8')).buyer_private_key;
    if (typeof key !== 'string' || !BYTES32_RE.test(key)) usage(`state file ${statePath} has no valid buyer_private_key`);
  }
  return privateKeyToAccount(key);
}

// Default path: exactly what the official client library produces.
async function officialPayload(pr, account) {
  const { x402Client, x402HTTPClient } = await import('@x402/core/client');
  const { ExactEvmScheme } = await import('@x402/evm/exact/client'); // client-side scheme
  const req = pr.accepts[0];
  const client = x402Client.fromConfig({
    schemes: [{ network: 'eip155:*', client: new ExactEvmScheme(account) }],
    // allow accepts[0]'s asset (the default USDC or any other), without the default $1 cap
    spendControls: { maxAmountPerPayment: false, allowedAssets: [{ network: req.network, asset: req.asset }] },
  });
  const http = new x402HTTPClient(client);
  // only accepts[0] is offered, so the client's selector cannot pick another entry
  const payload = await http.createPaymentPayload({ ...pr, accepts: [req] });
  const headers = http.encodePaymentSignatureHeader(payload);
  const header = headers['PAYMENT-SIGNATURE'];
  if (typeof header !== 'string') throw new Error(`official client returned no PAYMENT-SIGNATURE: ${JSON.stringify(headers)}`);
  if (JSON.stringify(payload.accepted) !== JSON.stringify(req)) throw new Error('official client did not echo accepts[0] verbatim');
  return { header, payload };
}

// Mutation path: the same structure by hand, signed with viem.
async function mutatedPayload(pr, account, opt) {
  const req = pr.accepts[0];
  const now = Math.floor(Date.now() / 1000);

  const accepted = JSON.parse(JSON.stringify(req)); // same key order; assignments keep each key's position
  if (opt['accepted-network'] !== undefined) accepted.network = opt['accepted-network'];
  if (opt['accepted-asset'] !== undefined) accepted.asset = opt['accepted-asset'];
  if (opt['accepted-amount'] !== undefined) accepted.amount = opt['accepted-amount'];
  for (const [key, value] of opt.acceptedExtra) accepted.extra = { ...accepted.extra, [key]: value };

  const nonce = opt.nonce ?? '0x' + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex');
  const authorization = {
    from: account.address,
    to: opt.to ?? getAddress(req.payTo),
    value: opt['signed-value'] ?? opt['accepted-amount'] ?? req.amount,
    validAfter: opt['valid-after'] ?? '0',
    validBefore: opt['valid-before'] ?? String(now + req.maxTimeoutSeconds),
    nonce,
  };

  // domain from the unmutated requirements
  const domain = {
    name: req.extra.name,
    version: req.extra.version,
    chainId: Number(req.network.slice('eip155:'.length)),
    verifyingContract: getAddress(req.asset),
  };
  let signature = await account.signTypedData({
    domain,
    types: AUTHORIZATION_TYPES,
    primaryType: 'TransferWithAuthorization',
    message: {
      from: getAddress(authorization.from),
      to: getAddress(authorization.to.toLowerCase()), // any casing of --to signs the same address
      value: BigInt(authorization.value),
      validAfter: BigInt(authorization.validAfter),
      validBefore: BigInt(authorization.validBefore),
      nonce: authorization.nonce,
    },
  });
  if (opt['corrupt-signature']) {
    const bytes = Buffer.from(signature.slice(2), 'hex');
    if (bytes.length !== 65) throw new Error(`unexpected signature length ${bytes.length}`);
    bytes[32] ^= 0xff;
    signature = '0x' + bytes.toString('hex');
  }

  const payload = {
    x402Version: opt['x402-version'] !== undefined ? Number(opt['x402-version']) : pr.x402Version ?? 2,
    payload: { authorization, signature },
  };
  if (!opt['no-echo']) {
    let extensions = pr.extensions === undefined ? undefined : JSON.parse(JSON.stringify(pr.extensions));
    for (const [name, info] of opt.extensionInfo) {
      extensions = extensions ?? {};
      extensions[name] = { ...(extensions[name] ?? {}), info };
    }
    if (extensions !== undefined) payload.extensions = extensions;
    let resource = pr.resource;
    if (opt['resource-url'] !== undefined) resource = { ...(resource ?? {}), url: opt['resource-url'] };
    if (resource !== undefined) payload.resource = resource;
  }
  payload.accepted = accepted;
  return { header: toB64(payload), payload };
}

async function main() {
  const opt = parseCli();
  const pr = decodeRequired(opt.required);
  const account = loadAccount(opt);
  const mutated = MUTATIONS.some((m) => opt[m] !== undefined && opt[m] !== false);
  const { header, payload } = mutated ? await mutatedPayload(pr, account, opt) : await officialPayload(pr, account);
  const auth = payload.payload.authorization;
  process.stdout.write(JSON.stringify({ header, payload, nonce: auth.nonce, from: auth.from }) + '\n');
}

try {
  await main();
} catch (e) {
  process.stderr.write(`sign.mjs: ${e?.message ?? e}\n${e instanceof UsageError ? USAGE + '\n' : ''}`);
  process.exitCode = e instanceof UsageError ? 2 : 1;
}
