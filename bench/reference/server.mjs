#!/usr/bin/env node
// The reference for the 402 row: node + Express 5 + the official @x402/express v2 middleware,
// protecting the same route shape at the same price for the same payTo as factomat's VM02.
// The packages come from devstack/node_modules (@x402/express 2.27.0, express 5.3.0), loaded
// through one CommonJS require so every @x402 package shares one @x402/core instance.
//
//   node server.mjs --devstack DIR --facilitator URL --pay-to 0x.. [--port 0]
// Prints "LISTENING http://127.0.0.1:PORT" once the middleware is ready.
import { createRequire } from 'node:module';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    devstack: { type: 'string' },
    facilitator: { type: 'string' },
    'pay-to': { type: 'string' },
    port: { type: 'string', default: '0' },
  },
});
const require = createRequire(path.join(path.resolve(opt.devstack), 'package.json'));
const express = require('express');
const { paymentMiddleware, x402ResourceServer } = require('@x402/express');
const { ExactEvmScheme } = require('@x402/evm/exact/server');
const { HTTPFacilitatorClient } = require('@x402/core/server');

const resourceServer = new x402ResourceServer(
  new HTTPFacilitatorClient({ url: opt.facilitator })
).register('eip155:8453', new ExactEvmScheme());

const app = express();
app.use(
  paymentMiddleware(
    {
      'POST /v1/allowance-exposure': {
        accepts: [{ scheme: 'exact', price: '$0.01', network: 'eip155:8453', payTo: opt['pay-to'] }],
        description:
          "Compare one ERC-20 allowance (owner, token, spender) with the owner's balance at the same block on eip155:8453.",
        mimeType: 'application/json',
      },
    },
    resourceServer
  )
);
app.use(express.json());
app.post('/v1/allowance-exposure', (_req, res) => res.json({ status: 'OK' }));
app.get('/health', (_req, res) => res.json({ ok: true }));

const server = app.listen(Number(opt.port), '127.0.0.1', () => {
  console.log(`LISTENING http://127.0.0.1:${server.address().port}`);
});
