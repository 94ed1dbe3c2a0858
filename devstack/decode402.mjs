#!/usr/bin/env node
// Make the unpaid call of each request and hand its 402 to the official x402 v2 client
// (@x402/core x402HTTPClient + @x402/evm exact scheme): decode PAYMENT-REQUIRED the way a buyer
// does, then sign a payment payload for it offline (no chain access; nothing is sent).
// Prints ONE line of JSON: {results: [{url, status, decoded, signed, error}]}.
//
//   node devstack/decode402.mjs --requests '[{"url": "...", "body": {...}}, ...]' [--key 0x..]
import { parseArgs } from 'node:util';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client, x402HTTPClient } from '@x402/core/client';
import { ExactEvmScheme } from '@x402/evm/exact/client';

// anvil account #1: a throwaway test key; this script never sends a payment.
const TEST_KEY = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d';

async function decodeOne(http, { url, body }) {
  const out = { url, status: null, decoded: null, signed: false, error: null };
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(15000),
    });
    out.status = response.status;
    const text = await response.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const required = http.getPaymentRequiredResponse((name) => response.headers.get(name), json);
    out.decoded = required;
    const payload = await http.createPaymentPayload(required);
    out.signed = typeof payload?.payload?.signature === 'string';
  } catch (e) {
    out.error = String(e?.message ?? e);
  }
  return out;
}

async function main() {
  const { values } = parseArgs({
    options: { requests: { type: 'string' }, key: { type: 'string', default: TEST_KEY } },
  });
  const requests = JSON.parse(values.requests ?? '[]');
  const client = new x402Client().register('eip155:*', new ExactEvmScheme(privateKeyToAccount(values.key)));
  const http = new x402HTTPClient(client);
  const results = [];
  for (const request of requests) results.push(await decodeOne(http, request));
  console.log(JSON.stringify({ results }));
}

main().catch((e) => {
  console.log(JSON.stringify({ results: [], error: String(e?.message ?? e) }));
  process.exit(1);
});
