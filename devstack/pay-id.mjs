#!/usr/bin/env node
// Make ONE paid HTTP call with the official x402 v2 client (@x402/fetch + @x402/evm exact client) whose payment
// carries a payment-identifier `id` (@x402/extensions/payment-identifier), and print ONE line of JSON to stdout:
//   {status, id, headers:{"payment-response","payment-required","evidence-seal","content-digest","cache-control"},
//    body, body_text, payment_response, payment_required, payment_signature, payment_payload, requests, signed,
//    signatures_sent, elapsed_ms, error}
// The id is added as the official payment-identifier client example does it: an onBeforePaymentCreation hook of
// the x402Client calls appendPaymentIdentifierToExtensions on the 402's extensions, which adds the id only when
// the server declared the extension (then the client's createPaymentPayload echoes it in the payload).
// `id` is the id the sent payload carries (null when none was sent); payment_signature is the exact
// PAYMENT-SIGNATURE header value sent (captured in the fetch passed to the wrapper), so tests can replay it byte
// for byte; signed/signatures_sent count as in pay.mjs.
//
//   node devstack/pay-id.mjs --url URL [--body JSON] [--id ID] [--key 0x..] [--state PATH] [--timeout-ms 30000]
//   node devstack/pay-id.mjs --declaration
// POST with content-type application/json; --body is sent as-is. --id forces the id (the client refuses one
// outside 16-128 characters of [A-Za-z0-9_-]); without it the client generates one (generatePaymentId()).
// --key defaults to the state file's buyer_private_key. The client's default spend controls apply.
// --declaration prints {"declaration": …}, the official server declaration of the extension
// (declarePaymentIdentifierExtension(false): {info: {required: false}, schema}), and sends nothing.
// Exit code: 0 when the client returned a response (whatever its status), 1 when it threw (error set).
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
      body: { type: 'string' },
      id: { type: 'string' },
      key: { type: 'string' },
      state: { type: 'string', default: process.env.FACTOMAT_DEVSTACK_STATE || DEFAULT_STATE_PATH },
      'timeout-ms': { type: 'string', default: '30000' },
      declaration: { type: 'boolean', default: false },
    },
  });
  return values;
}

function buyerKey(opt) {
  if (opt.key) return opt.key;
  const statePath = path.resolve(opt.state);
  if (!fs.existsSync(statePath)) throw new Error(`no --key and no state file at ${statePath}`);
  return JSON.parse(fs.readFileSync(statePath, 'utf8')).buyer_private_key;
}

// Records the response headers and body the client returned.
async function report(res) {
  out.status = res.status;
  for (const name of ['payment-response', 'payment-required', 'evidence-seal', 'content-digest', 'cache-control']) {
    out.headers[name] = res.headers.get(name);
  }
  const pr = out.headers['payment-response'];
  if (pr) {
    try {
      out.payment_response = decodePaymentResponseHeader(pr);
    } catch {
      out.payment_response = decodeB64Json(pr);
    }
  }
  out.payment_required = decodeB64Json(out.headers['payment-required']);
  const text = await res.text();
  out.body_text = text;
  try {
    out.body = text === '' ? null : JSON.parse(text);
  } catch {
    out.body = text;
  }
}

async function main(opt) {
  if (!opt.url) throw new Error('--url is required');
  const account = privateKeyToAccount(buyerKey(opt));
  const signTypedData = account.signTypedData;
  account.signTypedData = async (typed) => {
    out.signed += 1;
    return signTypedData(typed);
  };

  // The inner fetch sees every request the wrapper makes; record the PAYMENT-SIGNATURE exactly.
  const signatures = [];
  let last = null; // the latest response seen (reported if the client throws)
  const capturingFetch = async (input, init) => {
    out.requests += 1;
    const req = input instanceof Request ? input : new Request(input, init);
    const sig = req.headers.get('payment-signature');
    if (sig !== null) signatures.push(sig);
    const r = await fetch(req, { signal: AbortSignal.timeout(Number(opt['timeout-ms'])) });
    last = r;
    return r;
  };

  const client = x402Client.fromConfig({ schemes: [{ network: 'eip155:*', client: new ExactEvmScheme(account) }] });
  const paymentId = opt.id ?? generatePaymentId();
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    if (!paymentRequired.extensions) paymentRequired.extensions = {};
    appendPaymentIdentifierToExtensions(paymentRequired.extensions, paymentId);
  });
  const payFetch = wrapFetchWithPayment(capturingFetch, client);

  const init = { method: 'POST', headers: { 'content-type': 'application/json' } };
  if (opt.body !== undefined) init.body = opt.body;
  try {
    await report(await payFetch(opt.url, init));
  } catch (e) {
    if (last && out.status === null) {
      out.status = last.status;
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
