#!/usr/bin/env node
// Make ONE paid HTTP call with the official x402 v2 client (@x402/fetch + @x402/evm exact client)
// and print ONE line of JSON to stdout:
//   {status, headers:{"payment-response","payment-required","evidence-seal","content-digest",
//    "cache-control"}, body, body_text, payment_response, payment_required, payment_signature,
//    payment_payload, requests, signed, signatures_sent, elapsed_ms, error}
// payment_signature is the exact PAYMENT-SIGNATURE header value the client sent (captured in the
// fetch passed to the wrapper), so tests can replay it byte for byte. null when no payment was sent.
// signed is how many EIP-712 payment signatures the client produced (counted at the account);
// signatures_sent how many requests carried a PAYMENT-SIGNATURE (payment_signatures lists them when > 1).
// devstack/pay.py does the same with the official Python client.
//
//   node devstack/pay.mjs --url URL [--method POST] [--body JSON] [--header 'K: V']... [--key 0x..]
//                         [--state PATH] [--no-spend-controls] [--timeout-ms 30000]
//                         [--payment-id ID|auto]
//   node devstack/pay.mjs --declaration
// --payment-id makes the payment carry x402's payment-identifier `id` (ID, or one the client
// generates with `auto`), added as the official payment-identifier example does it: an
// onBeforePaymentCreation hook calls appendPaymentIdentifierToExtensions on the 402's extensions
// (it adds the id only when the server declared the extension). `id` in the output is the id the
// sent payload carries (null when none). --declaration prints {"declaration": …}, the official
// server declaration (declarePaymentIdentifierExtension(false)), and sends nothing.
// --key defaults to the state file's buyer_private_key. --body is sent as-is with
// content-type application/json (default body for POST/PUT/PATCH: none).
// --no-spend-controls disables the client's default spend controls (default assets only, <= $1).
// Exit code: 0 when the client returned a response (whatever its status), 1 when it threw (error set;
// status/headers/payment_required then describe the last response seen, e.g. the 402 it refused to pay).
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { privateKeyToAccount } from 'viem/accounts';
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { ExactEvmScheme } from '@x402/evm/exact/client'; // client-side scheme
import {
  appendPaymentIdentifierToExtensions,
  declarePaymentIdentifierExtension,
  generatePaymentId,
  PAYMENT_IDENTIFIER,
} from '@x402/extensions/payment-identifier';
import { DEFAULT_STATE_PATH } from './lib.mjs';

const out = {
  status: null,
  id: null,
  headers: { 'payment-response': null, 'payment-required': null },
  body: null,
  payment_response: null,
  payment_required: null,
  payment_signature: null,
  payment_payload: null,
  requests: 0,
  signed: 0,
  signatures_sent: 0,
  elapsed_ms: null,
  error: null,
};
const t0 = performance.now();

function decodeB64Json(v) {
  if (!v) return null;
  try {
    return JSON.parse(Buffer.from(v, 'base64').toString('utf8'));
  } catch {
    return null;
  }
}

function options() {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      method: { type: 'string', default: 'POST' },
      body: { type: 'string' },
      header: { type: 'string', multiple: true, default: [] },
      key: { type: 'string' },
      state: { type: 'string', default: process.env.FACTOMAT_DEVSTACK_STATE || DEFAULT_STATE_PATH },
      'no-spend-controls': { type: 'boolean', default: false },
      'timeout-ms': { type: 'string', default: '30000' },
      'payment-id': { type: 'string' },
      declaration: { type: 'boolean', default: false },
    },
  });
  return values;
}

// The client, with the payment-identifier hook when asked for.
function paymentClient(config, paymentId) {
  const client = x402Client.fromConfig(config);
  if (paymentId !== undefined) {
    const id = paymentId === 'auto' ? generatePaymentId() : paymentId;
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      if (!paymentRequired.extensions) paymentRequired.extensions = {};
      appendPaymentIdentifierToExtensions(paymentRequired.extensions, id);
    });
  }
  return client;
}

async function main(opt) {
  if (!opt.url) throw new Error('--url is required');
  let key = opt.key;
  if (!key) {
    const statePath = path.resolve(opt.state);
    if (!fs.existsSync(statePath)) throw new Error(`no --key and no state file at ${statePath}`);
    key = JSON.parse(fs.readFileSync(statePath, 'utf8')).buyer_private_key;
  }
  const account = privateKeyToAccount(key);
  const signTypedData = account.signTypedData;
  account.signTypedData = async (typed) => {
    out.signed += 1;
    return signTypedData(typed);
  };

  // The inner fetch sees every request the wrapper makes; record the PAYMENT-SIGNATURE exactly.
  const signatures = [];
  let last = null; // status + headers of the latest response seen (reported if the client throws)
  const capturingFetch = async (input, init) => {
    out.requests += 1;
    const req = input instanceof Request ? input : new Request(input, init);
    const sig = req.headers.get('payment-signature');
    if (sig !== null) signatures.push(sig);
    const r = await fetch(req, { signal: AbortSignal.timeout(Number(opt['timeout-ms'])) });
    last = { status: r.status, headers: r.headers };
    return r;
  };

  const config = { schemes: [{ network: 'eip155:*', client: new ExactEvmScheme(account) }] };
  if (opt['no-spend-controls']) config.spendControls = false;
  const payFetch = wrapFetchWithPayment(capturingFetch, paymentClient(config, opt['payment-id']));

  const method = opt.method.toUpperCase();
  const headers = new Headers();
  for (const h of opt.header) {
    const i = h.indexOf(':');
    if (i <= 0) throw new Error(`bad --header ${JSON.stringify(h)} (want 'Name: value')`);
    headers.append(h.slice(0, i).trim(), h.slice(i + 1).trim());
  }
  const init = { method, headers };
  if (opt.body !== undefined) {
    if (!headers.has('content-type')) headers.set('content-type', 'application/json');
    init.body = opt.body;
  }

  let res;
  try {
    res = await payFetch(opt.url, init);
  } catch (e) {
    if (last) {
      // e.g. the client refused to pay (spend controls, no matching scheme): report the 402 it got
      out.status = last.status;
      out.headers['payment-response'] = last.headers.get('payment-response');
      out.headers['payment-required'] = last.headers.get('payment-required');
      out.payment_required = decodeB64Json(out.headers['payment-required']);
    }
    throw e;
  } finally {
    out.signatures_sent = signatures.length;
    out.payment_signature = signatures.length ? signatures[signatures.length - 1] : null;
    if (signatures.length > 1) out.payment_signatures = signatures;
    out.payment_payload = decodeB64Json(out.payment_signature);
    out.id = out.payment_payload?.extensions?.[PAYMENT_IDENTIFIER]?.info?.id ?? null;
  }
  out.status = res.status;
  const pr = res.headers.get('payment-response');
  const preq = res.headers.get('payment-required');
  out.headers['payment-response'] = pr;
  out.headers['payment-required'] = preq;
  if (pr) {
    try {
      out.payment_response = decodePaymentResponseHeader(pr);
    } catch {
      out.payment_response = decodeB64Json(pr);
    }
  }
  out.payment_required = decodeB64Json(preq);
  // A signed answer's evidence (docs/evidence-signatures.md) and its body byte for byte.
  out.headers['evidence-seal'] = res.headers.get('evidence-seal');
  out.headers['content-digest'] = res.headers.get('content-digest');
  out.headers['cache-control'] = res.headers.get('cache-control');
  const text = await res.text();
  out.body_text = text;
  try {
    out.body = text === '' ? null : JSON.parse(text);
  } catch {
    out.body = text;
  }
}

let code = 0;
let printed = out;
try {
  const opt = options();
  if (opt.declaration) printed = { declaration: declarePaymentIdentifierExtension(false) };
  else await main(opt);
} catch (e) {
  out.error = String(e?.message ?? e) + (e?.cause ? `: ${e.cause.code || e.cause.message || e.cause}` : '');
  code = 1;
}
out.elapsed_ms = Math.round(performance.now() - t0);
process.stdout.write(JSON.stringify(printed) + '\n');
process.exitCode = code;
