#!/usr/bin/env node
// Start factomat's local x402 dev stack and write a JSON state file.
//
//   node devstack/start.mjs [--state PATH] [--port N] [--facilitator-port N] [--mainnet-anvil]
//                           [--mainnet-port N] [--block-time S] [--foreground] [--quiet]
//
//   1. anvil (binary spawned directly) on 127.0.0.1, chain id 8453 (port 0 = any free port)
//   2. LocalUSDC deployed normally, its runtime code (eth_getCode) copied with anvil_setCode to
//      Base USDC's address; Multicall3Shim likewise to 0xcA11bde05977b3631167028862bE2a173976CA11
//   3. 1000 USDC (1_000_000_000 atomic) minted to the buyer key (which holds 0 ETH)
//   4. the facilitator (facilitator.mjs) on 127.0.0.1
//   5. optional second anvil with chain id 1 (--mainnet-anvil), Multicall3Shim placed there too
// Default: children are detached and keep running after this script exits (stop with stop.mjs).
// --foreground: stay attached; SIGINT/SIGTERM stops the children and removes the state file.
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { createPublicClient, createWalletClient, http, hashDomain, getAddress } from 'viem';
import {
  DEFAULT_STATE_PATH,
  DEVSTACK_DIR,
  USDC_ADDRESS,
  MULTICALL3_ADDRESS,
  BASE_CHAIN_ID,
  MAINNET_CHAIN_ID,
  BUYER_PRIVATE_KEY,
  BUYER_FUNDS,
  anvilAccount,
  buyerAccount,
  localChain,
  loadArtifact,
  anvilBinary,
  writeFileAtomic,
  pidAlive,
  sleep,
} from './lib.mjs';

const { values: opt } = parseArgs({
  options: {
    state: { type: 'string', default: process.env.FACTOMAT_DEVSTACK_STATE || DEFAULT_STATE_PATH },
    port: { type: 'string', default: '0' },
    'facilitator-port': { type: 'string', default: '0' },
    'mainnet-anvil': { type: 'boolean', default: false },
    'mainnet-port': { type: 'string', default: '0' },
    'block-time': { type: 'string' },
    foreground: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  const src = fs.readFileSync(new URL(import.meta.url), 'utf8').split('\n');
  console.log(src.slice(1, src.findIndex((l) => l.startsWith('import'))).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}

const statePath = path.resolve(opt.state);
const stateDir = path.dirname(statePath);
const logDir = path.join(stateDir, 'logs');
const T0 = Date.now();
const children = []; // {name, proc}
const say = (...a) => console.error(`[dev-stack +${Date.now() - T0}ms]`, ...a);

// Refuse to start over a live stack recorded in the same state file.
if (fs.existsSync(statePath)) {
  let old;
  try {
    old = JSON.parse(fs.readFileSync(statePath, 'utf8'));
  } catch {
    old = null;
  }
  const live = Object.entries(old?.pids || {}).filter(([, pid]) => pidAlive(pid));
  if (live.length) {
    console.error(
      `dev-stack: a stack is already running per ${statePath} (${live.map(([n, p]) => `${n}=${p}`).join(', ')}).\n` +
        `Stop it first: node ${path.relative(process.cwd(), path.join(DEVSTACK_DIR, 'stop.mjs')) || 'stop.mjs'} --state ${statePath}`
    );
    process.exit(1);
  }
}

function killChildren(signal = 'SIGTERM') {
  for (const { proc } of children) {
    if (proc.exitCode === null && proc.signalCode === null) {
      try {
        process.kill(proc.pid, signal);
      } catch {
        /* gone */
      }
    }
  }
}

// Spawn `cmd args`, stdout+stderr to a log file; resolve with the first regex match found in the log.
async function spawnAndWait(name, cmd, args, readyRe, { timeoutMs = 15_000, env } = {}) {
  fs.mkdirSync(logDir, { recursive: true });
  const logPath = path.join(logDir, `${name}.log`);
  const fd = fs.openSync(logPath, 'w');
  const proc = spawn(cmd, args, {
    cwd: DEVSTACK_DIR,
    detached: true, // own process group: terminal Ctrl-C reaches only this script, which stops children in order
    stdio: ['ignore', fd, fd],
    env: env ?? process.env,
  });
  fs.closeSync(fd);
  children.push({ name, proc, logPath });
  let exited = null;
  proc.on('exit', (code, sig) => (exited = { code, sig }));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const text = fs.readFileSync(logPath, 'utf8');
    const m = text.match(readyRe);
    if (m) return { proc, match: m, logPath };
    if (exited) break;
    await sleep(10);
  }
  const tail = fs.readFileSync(logPath, 'utf8').split('\n').slice(-15).join('\n');
  throw new Error(
    `${name} ${exited ? `exited (code ${exited.code}, signal ${exited.sig})` : 'did not become ready'}; log ${logPath}:\n${tail}`
  );
}

async function startAnvil(name, chainId, port) {
  // --block-time is applied once the stack's contracts are placed (startInterval): deploying
  // at one block per interval made a stack take seconds per transaction to start.
  const args = ['--host', '127.0.0.1', '--port', String(port), '--chain-id', String(chainId)];
  const { proc, match, logPath } = await spawnAndWait(name, anvilBinary(), args, /Listening on 127\.0\.0\.1:(\d+)/);
  const rpcUrl = `http://127.0.0.1:${match[1]}`;
  const pub = createPublicClient({ chain: localChain(chainId, rpcUrl), transport: http(rpcUrl) });
  const got = await pub.getChainId();
  if (got !== chainId) throw new Error(`${name}: eth_chainId ${got}, expected ${chainId}`);
  say(`${name} pid ${proc.pid} on ${rpcUrl} (chain ${chainId})`);
  return { proc, rpcUrl, logPath, pub };
}

// --block-time S: from now on anvil mines one block every S seconds instead of one per transaction.
async function startInterval(pub) {
  if (!opt['block-time']) return;
  const seconds = Number(opt['block-time']);
  if (!Number.isInteger(seconds) || seconds <= 0) throw new Error('--block-time must be a positive integer of seconds');
  await pub.request({ method: 'evm_setIntervalMining', params: [seconds] });
}

// Deploy normally (constructor runs), read the runtime code back, place it at `target`.
async function placeContract(pub, wallet, artifactName, target) {
  const art = loadArtifact(artifactName);
  const hash = await wallet.deployContract({ abi: art.abi, bytecode: art.bytecode, args: [] });
  const rcpt = await pub.waitForTransactionReceipt({ hash });
  if (rcpt.status !== 'success' || !rcpt.contractAddress) throw new Error(`deploy ${artifactName} failed`);
  const code = await pub.getCode({ address: rcpt.contractAddress });
  if (!code || code === '0x') throw new Error(`deploy ${artifactName}: no runtime code`);
  await pub.request({ method: 'anvil_setCode', params: [target, code] });
  const placed = await pub.getCode({ address: target });
  if (placed !== code) throw new Error(`anvil_setCode ${artifactName} at ${target} did not stick`);
  return art;
}

async function main() {
  const admin = anvilAccount(1);
  const settler = anvilAccount(0);
  const payTo = anvilAccount(2).address;
  const buyer = buyerAccount();

  // 1. anvil (Base)
  const base = await startAnvil('anvil', BASE_CHAIN_ID, opt.port);
  const chain = localChain(BASE_CHAIN_ID, base.rpcUrl);
  const wallet = createWalletClient({ account: admin, chain, transport: http(base.rpcUrl) });

  // 2. token + multicall
  const usdcArt = await placeContract(base.pub, wallet, 'LocalUSDC', USDC_ADDRESS);
  await placeContract(base.pub, wallet, 'Multicall3Shim', MULTICALL3_ADDRESS);

  // 3. buyer funds (also mines a block, see devstack.md G4)
  const mintHash = await wallet.writeContract({
    address: USDC_ADDRESS,
    abi: usdcArt.abi,
    functionName: 'mint',
    args: [buyer.address, BUYER_FUNDS],
  });
  const mintRcpt = await base.pub.waitForTransactionReceipt({ hash: mintHash });
  if (mintRcpt.status !== 'success') throw new Error('mint to buyer failed');

  // checks: domain separator, metadata, balance, multicall
  const read = (functionName, args = []) =>
    base.pub.readContract({ address: USDC_ADDRESS, abi: usdcArt.abi, functionName, args });
  const [ds, nm, ver, dec, bal] = await Promise.all([
    read('DOMAIN_SEPARATOR'),
    read('name'),
    read('version'),
    read('decimals'),
    read('balanceOf', [buyer.address]),
  ]);
  const wantDs = hashDomain({
    domain: { name: 'USD Coin', version: '2', chainId: BASE_CHAIN_ID, verifyingContract: USDC_ADDRESS },
    types: {
      EIP712Domain: [
        { name: 'name', type: 'string' },
        { name: 'version', type: 'string' },
        { name: 'chainId', type: 'uint256' },
        { name: 'verifyingContract', type: 'address' },
      ],
    },
  });
  if (ds !== wantDs || nm !== 'USD Coin' || ver !== '2' || dec !== 6 || bal < BUYER_FUNDS) {
    throw new Error(`LocalUSDC self-check failed: ${JSON.stringify({ ds, wantDs, nm, ver, dec, bal: String(bal) })}`);
  }
  const mc = await base.pub.multicall({
    contracts: [{ address: USDC_ADDRESS, abi: usdcArt.abi, functionName: 'symbol' }],
    multicallAddress: MULTICALL3_ADDRESS,
  });
  if (mc[0]?.result !== 'USDC') throw new Error(`Multicall3Shim self-check failed: ${JSON.stringify(mc)}`);
  say(`LocalUSDC at ${USDC_ADDRESS}, Multicall3Shim at ${MULTICALL3_ADDRESS}, buyer ${buyer.address} holds ${bal}`);
  await startInterval(base.pub);

  // 4. facilitator
  const facArgs = [path.join(DEVSTACK_DIR, 'facilitator.mjs'), '--rpc-url', base.rpcUrl, '--port', opt['facilitator-port']];
  if (opt.foreground) facArgs.push('--parent-pid', String(process.pid));
  const fac = await spawnAndWait('facilitator', process.execPath, facArgs, /FACILITATOR_LISTENING (http:\/\/127\.0\.0\.1:\d+)/);
  const facilitatorUrl = fac.match[1];
  const supported = await (await fetch(`${facilitatorUrl}/supported`)).json();
  const kindOk = supported.kinds?.some((k) => k.x402Version === 2 && k.scheme === 'exact' && k.network === 'eip155:8453');
  if (!kindOk) throw new Error(`facilitator /supported lacks exact on eip155:8453: ${JSON.stringify(supported)}`);
  say(`facilitator pid ${fac.proc.pid} on ${facilitatorUrl}`);

  // 5. optional mainnet anvil
  let main1 = null;
  if (opt['mainnet-anvil']) {
    main1 = await startAnvil('anvil-mainnet', MAINNET_CHAIN_ID, opt['mainnet-port']);
    const w1 = createWalletClient({ account: admin, chain: localChain(MAINNET_CHAIN_ID, main1.rpcUrl), transport: http(main1.rpcUrl) });
    await placeContract(main1.pub, w1, 'Multicall3Shim', MULTICALL3_ADDRESS);
    await startInterval(main1.pub);
  }

  const state = {
    version: 1,
    started_at: new Date().toISOString(),
    mode: opt.foreground ? 'foreground' : 'detached',
    network: `eip155:${BASE_CHAIN_ID}`,
    chain_id: BASE_CHAIN_ID,
    rpc_url: base.rpcUrl,
    rpc_url_eip155_8453: base.rpcUrl,
    rpc_url_eip155_1: main1 ? main1.rpcUrl : null,
    facilitator_url: facilitatorUrl,
    usdc: USDC_ADDRESS,
    multicall3: MULTICALL3_ADDRESS,
    buyer_private_key: BUYER_PRIVATE_KEY,
    buyer_address: buyer.address,
    buyer_initial_balance: BUYER_FUNDS.toString(),
    pay_to: getAddress(payTo),
    settler_address: settler.address,
    admin_address: admin.address,
    pids: {
      anvil: base.proc.pid,
      facilitator: fac.proc.pid,
      ...(main1 ? { anvil_mainnet: main1.proc.pid } : {}),
    },
    logs: Object.fromEntries(children.map((c) => [c.name, c.logPath])),
  };
  writeFileAtomic(statePath, JSON.stringify(state, null, 2) + '\n');
  say(`state written to ${statePath} (ready in ${Date.now() - T0} ms)`);
  if (!opt.quiet) printInstructions(state);
  return state;
}

function printInstructions(s) {
  const rel = (p) => {
    const r = path.relative(process.cwd(), p);
    return r && !r.startsWith('..') ? r : p;
  };
  const pay = rel(path.join(DEVSTACK_DIR, 'pay.mjs'));
  const stop = rel(path.join(DEVSTACK_DIR, 'stop.mjs'));
  const stateArg = path.resolve(statePath) === DEFAULT_STATE_PATH ? '' : ` --state ${statePath}`;
  const lines = [
    '',
    `factomat dev stack is up (${s.mode}). State file: ${statePath}`,
    `  anvil (eip155:8453)   ${s.rpc_url}`,
    ...(s.rpc_url_eip155_1 ? [`  anvil (eip155:1)      ${s.rpc_url_eip155_1}`] : []),
    `  facilitator           ${s.facilitator_url}   (GET /supported, POST /verify, POST /settle)`,
    `  USDC (LocalUSDC)      ${s.usdc}`,
    `  buyer                 ${s.buyer_address}  (1000 USDC, 0 ETH)`,
    `  pay_to                ${s.pay_to}`,
    '',
    'Run factomat against it:',
    `  export FACTOMAT_FACILITATOR_URL=${s.facilitator_url}`,
    `  export FACTOMAT_PAY_TO=${s.pay_to}`,
    `  export FACTOMAT_RPC_URL_EIP155_8453=${s.rpc_url}`,
    ...(s.rpc_url_eip155_1 ? [`  export FACTOMAT_RPC_URL_EIP155_1=${s.rpc_url_eip155_1}`] : []),
    '  export FACTOMAT_BASE_URL=http://127.0.0.1:8402    # the default listen address (FACTOMAT_LISTEN)',
    '',
    'Make one paid call with the official x402 client (prints one JSON line):',
    `  node ${pay}${stateArg} --url http://127.0.0.1:8402/v1/allowance-exposure --body '{"owner":"${s.buyer_address}","token":"${USDC_ADDRESS}","spender":"${s.pay_to}"}'`,
    `Check balances:  node ${rel(path.join(DEVSTACK_DIR, 'chain.mjs'))}${stateArg} balance usdc ${s.pay_to}`,
    s.mode === 'foreground'
      ? `Stop:            Ctrl-C / SIGTERM to pid ${process.pid} (or node ${stop}${stateArg})`
      : `Stop:            node ${stop}${stateArg}`,
    '',
  ];
  console.log(lines.join('\n'));
}

let shuttingDown = false;
async function shutdown(code, why) {
  if (shuttingDown) return;
  shuttingDown = true;
  if (why) say(why);
  killChildren('SIGTERM');
  const deadline = Date.now() + 3000;
  while (Date.now() < deadline && children.some(({ proc }) => proc.exitCode === null && proc.signalCode === null)) {
    await sleep(20);
  }
  killChildren('SIGKILL');
  try {
    const s = JSON.parse(fs.readFileSync(statePath, 'utf8'));
    if (s.pids?.anvil === children[0]?.proc.pid) fs.rmSync(statePath);
  } catch {
    /* no state */
  }
  process.exit(code);
}

try {
  await main();
} catch (e) {
  console.error(`dev-stack: start failed: ${e?.stack || e}`);
  await shutdown(1);
}

if (opt.foreground) {
  // If this launcher is SIGKILLed, the watchdog stops the children (they are in their own groups).
  const wd = spawn(
    process.execPath,
    [path.join(DEVSTACK_DIR, 'watchdog.mjs'), '--parent', String(process.pid), '--pids', children.map((c) => c.proc.pid).join(','), '--state', statePath],
    { detached: true, stdio: 'ignore' }
  );
  wd.unref();
  process.on('exit', () => {
    try {
      process.kill(wd.pid, 'SIGTERM');
    } catch {
      /* gone */
    }
  });
  process.on('SIGINT', () => shutdown(0, 'SIGINT: stopping children'));
  process.on('SIGTERM', () => shutdown(0, 'SIGTERM: stopping children'));
  for (const { name, proc } of children) {
    proc.on('exit', (code, sig) => shutdown(1, `${name} exited unexpectedly (code ${code}, signal ${sig}); stopping`));
  }
  say('foreground: press Ctrl-C to stop');
} else {
  for (const { proc } of children) proc.unref();
  process.exit(0);
}
