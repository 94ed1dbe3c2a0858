// A real x402 v2 seller for tests: the official @x402/express middleware (with @x402/evm's
// exact scheme and the dev stack's facilitator) behind node:https on 127.0.0.1 with a test
// certificate. Price and payTo are read per request from mutable state, changed by JSON lines on
// stdin ({"amount": "...", "pay_to": "0x..."}), each acknowledged by one JSON line on stdout.
//
//   node devstack/seller.mjs --cert PEM --key PEM --facilitator URL --pay-to 0x.. --amount N
//   -> {"port": N}
import fs from 'node:fs';
import https from 'node:https';
import readline from 'node:readline';
import { parseArgs } from 'node:util';
import express from 'express';
import { paymentMiddleware, x402ResourceServer } from '@x402/express';
import { HTTPFacilitatorClient } from '@x402/core/server';
import { ExactEvmScheme } from '@x402/evm/exact/server';

const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
const { values: opt } = parseArgs({
  options: {
    cert: { type: 'string' }, key: { type: 'string' }, facilitator: { type: 'string' },
    'pay-to': { type: 'string' }, amount: { type: 'string' },
  },
});
const state = { amount: opt.amount, payTo: opt['pay-to'] };

const server = new x402ResourceServer(new HTTPFacilitatorClient({ url: opt.facilitator }))
  .register('eip155:8453', new ExactEvmScheme());
const routes = {
  'POST /quote': {
    accepts: {
      scheme: 'exact',
      network: 'eip155:8453',
      payTo: () => state.payTo,
      price: () => ({ amount: state.amount, asset: USDC, extra: { name: 'USD Coin', version: '2' } }),
      maxTimeoutSeconds: 60,
    },
    description: 'A quote',
    mimeType: 'application/json',
  },
};
const app = express();
app.use(paymentMiddleware(routes, server));
app.post('/quote', (_req, res) => res.json({ quote: 1 }));

const tls = { cert: fs.readFileSync(opt.cert), key: fs.readFileSync(opt.key) };
const listener = https.createServer(tls, app).listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: listener.address().port }));
});
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const change = JSON.parse(line);
  if (change.amount) state.amount = change.amount;
  if (change.pay_to) state.payTo = change.pay_to;
  console.log(JSON.stringify({ ok: true, amount: state.amount, pay_to: state.payTo }));
});
process.stdin.on('end', () => process.exit(0));
