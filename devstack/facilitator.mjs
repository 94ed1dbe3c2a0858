#!/usr/bin/env node
// Local x402 v2 facilitator for the dev stack: the official logic (@x402/core x402Facilitator +
// @x402/evm ExactEvmScheme, facilitator side) behind a plain node:http server on 127.0.0.1.
// Registered ONLY for exact on eip155:8453.
//
//   node facilitator.mjs --rpc-url http://127.0.0.1:PORT [--port 0] [--poll-ms 50]
//                        [--confirmation-timeout-ms 30000] [--simulate-in-settle] [--parent-pid PID]
//
// Routes:
//   POST /verify   {x402Version:2, paymentPayload, paymentRequirements} -> VerifyResponse (200)
//   POST /settle   same body                                           -> SettleResponse (200)
//   GET  /supported                                                    -> {kinds, extensions, signers}
//   GET  /health                                                       -> {ok:true, ...}
//   POST /_dev/reset-nonce  forget the nonce manager's cache (after evm_revert / anvil_reset)
// Malformed bodies -> 400 {error:"invalid_request", message}; core throws -> 500 {error:"facilitator_error", message}.
// Prints "FACILITATOR_LISTENING http://127.0.0.1:PORT" on stdout once listening.
import http from 'node:http';
import { parseArgs } from 'node:util';
import { createWalletClient, http as viemHttp, publicActions, nonceManager } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Facilitator } from '@x402/core/facilitator';
import { isPaymentPayloadV2, isPaymentRequirementsV2 } from '@x402/core/schemas';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator'; // facilitator-side scheme (not the client one)
import { toFacilitatorEvmSigner } from '@x402/evm';
import { anvilPrivateKey, localChain, BASE_CHAIN_ID } from './lib.mjs';

const NETWORK = `eip155:${BASE_CHAIN_ID}`;
const MAX_BODY = 1 << 20;

const { values: opt } = parseArgs({
  options: {
    'rpc-url': { type: 'string' },
    port: { type: 'string', default: '0' },
    'poll-ms': { type: 'string', default: '50' },
    'confirmation-timeout-ms': { type: 'string', default: '30000' },
    'simulate-in-settle': { type: 'boolean', default: false },
    'parent-pid': { type: 'string' },
  },
});
const RPC_URL = opt['rpc-url'] || process.env.RPC_URL;
if (!RPC_URL) {
  console.error('facilitator: --rpc-url is required');
  process.exit(2);
}
// Settler = anvil account #0 derived from the default mnemonic (or SETTLER_PRIVATE_KEY).
const SETTLER_KEY = process.env.SETTLER_PRIVATE_KEY || anvilPrivateKey(0);

const log = (obj) => process.stdout.write(JSON.stringify({ t: new Date().toISOString(), ...obj }) + '\n');

// nonceManager: concurrent settles would otherwise reuse a nonce ("nonce too low").
const account = privateKeyToAccount(SETTLER_KEY, { nonceManager });
const chain = localChain(BASE_CHAIN_ID, RPC_URL);
const client = createWalletClient({
  account,
  chain,
  transport: viemHttp(RPC_URL),
  pollingInterval: Number(opt['poll-ms']),
}).extend(publicActions);

// One transaction sent at a time. A write whose gas estimate reverts (a nonce burned before
// its settle) gives its account nonce back only once it has failed; a write that took the next
// nonce meanwhile would wait in anvil's pool for a transaction that never comes.
let writing = Promise.resolve();
function oneAtATime(send) {
  const sent = writing.then(send, send);
  writing = sent.catch(() => {});
  return sent;
}

// viem clients have no .address and toFacilitatorEvmSigner spreads its input: pass explicit wrappers.
const signer = toFacilitatorEvmSigner(
  {
    address: account.address,
    getCode: (a) => client.getCode(a),
    readContract: (a) => client.readContract({ ...a, args: a.args ?? [] }),
    verifyTypedData: (a) => client.verifyTypedData(a),
    writeContract: (a) => oneAtATime(() => client.writeContract({ ...a, args: a.args ?? [] })),
    sendTransaction: (a) => oneAtATime(() => client.sendTransaction(a)),
    waitForTransactionReceipt: (a) => client.waitForTransactionReceipt(a),
  },
  { confirmationTimeoutMs: Number(opt['confirmation-timeout-ms']) }
);

const facilitator = new x402Facilitator().register(
  NETWORK,
  new ExactEvmScheme(signer, { simulateInSettle: opt['simulate-in-settle'] })
);

function send(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > MAX_BODY) {
        reject(Object.assign(new Error('request body too large'), { status: 413 }));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parseFacilitatorBody(text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return { error: 'body is not valid JSON' };
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) return { error: 'body must be a JSON object' };
  if (body.x402Version !== 2) return { error: 'x402Version must be 2' };
  if (!isPaymentPayloadV2(body.paymentPayload)) return { error: 'paymentPayload is not a valid x402 v2 PaymentPayload' };
  if (!isPaymentRequirementsV2(body.paymentRequirements)) {
    return { error: 'paymentRequirements is not a valid x402 v2 PaymentRequirements' };
  }
  return { paymentPayload: body.paymentPayload, paymentRequirements: body.paymentRequirements };
}

const server = http.createServer(async (req, res) => {
  const t0 = performance.now();
  const url = new URL(req.url, 'http://127.0.0.1');
  const route = `${req.method} ${url.pathname}`;
  let status = 500;
  let note;
  try {
    if (route === 'GET /supported') {
      status = 200;
      return send(res, status, facilitator.getSupported());
    }
    if (route === 'GET /health') {
      status = 200;
      return send(res, status, { ok: true, network: NETWORK, settler: account.address, rpc_url: RPC_URL });
    }
    if (route === 'POST /_dev/reset-nonce') {
      account.nonceManager.reset({ address: account.address, chainId: BASE_CHAIN_ID });
      status = 200;
      return send(res, status, { ok: true });
    }
    if (route === 'POST /verify' || route === 'POST /settle') {
      let text;
      try {
        text = await readBody(req);
      } catch (e) {
        status = e.status || 400;
        return send(res, status, { error: 'invalid_request', message: e.message });
      }
      const parsed = parseFacilitatorBody(text);
      if (parsed.error) {
        status = 400;
        note = parsed.error;
        return send(res, status, { error: 'invalid_request', message: parsed.error });
      }
      try {
        const result =
          route === 'POST /verify'
            ? await facilitator.verify(parsed.paymentPayload, parsed.paymentRequirements)
            : await facilitator.settle(parsed.paymentPayload, parsed.paymentRequirements);
        status = 200;
        note = result.isValid ?? result.success ? 'ok' : result.invalidReason || result.errorReason;
        return send(res, status, result);
      } catch (e) {
        status = 500;
        note = e?.message;
        return send(res, status, { error: 'facilitator_error', message: String(e?.message ?? e) });
      }
    }
    status = 404;
    return send(res, status, { error: 'not_found', message: `no route ${route}` });
  } catch (e) {
    status = 500;
    note = e?.message;
    if (!res.headersSent) send(res, 500, { error: 'facilitator_error', message: String(e?.message ?? e) });
  } finally {
    log({ route, status, ms: Math.round(performance.now() - t0), ...(note ? { note } : {}) });
  }
});

server.keepAliveTimeout = 5_000;
server.listen(Number(opt.port), '127.0.0.1', () => {
  const { port } = server.address();
  process.stdout.write(`FACILITATOR_LISTENING http://127.0.0.1:${port}\n`);
  log({ event: 'listening', port, network: NETWORK, settler: account.address, rpc_url: RPC_URL });
});

function shutdown(sig) {
  log({ event: 'shutdown', signal: sig });
  server.close();
  server.closeAllConnections?.();
  setTimeout(() => process.exit(0), 200).unref();
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

// In foreground mode the launcher passes its pid: exit if it disappears (e.g. SIGKILLed).
if (opt['parent-pid']) {
  const ppid = Number(opt['parent-pid']);
  setInterval(() => {
    try {
      process.kill(ppid, 0);
    } catch {
      shutdown('parent-gone');
    }
  }, 1000).unref();
}
