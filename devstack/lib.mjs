// Shared helpers and constants for the factomat dev stack scripts (ESM).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { defineChain, keccak256, toBytes } from 'viem';
import { mnemonicToAccount, privateKeyToAccount } from 'viem/accounts';

export const DEVSTACK_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(DEVSTACK_DIR, '..');
export const DEFAULT_STATE_PATH = path.join(REPO_ROOT, '.devstack', 'state.json');
export const require = createRequire(import.meta.url);

// Base mainnet USDC address: the official x402 clients treat it as a default asset on eip155:8453
// (EIP-712 domain name "USD Coin", version "2", 6 decimals), so LocalUSDC is placed exactly there.
export const USDC_ADDRESS = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
export const MULTICALL3_ADDRESS = '0xcA11bde05977b3631167028862bE2a173976CA11';
export const BASE_CHAIN_ID = 8453;
export const MAINNET_CHAIN_ID = 1;
export const ANVIL_MNEMONIC = 'test test test test test test test test test test test junk';
export const BUYER_PRIVATE_KEY = keccak256(toBytes('factomat-dev-buyer'));
export const BUYER_FUNDS = 1_000_000_000n; // 1000 USDC (6 decimals)

// anvil default accounts derived from the mnemonic (never typed by hand).
//   #0 settler: used ONLY by the facilitator (its nonce manager must own this account)
//   #1 admin: deploys, mints, funds (start.mjs, chain.mjs)
//   #2 pay_to: the seller's receiving address
export const anvilAccount = (index, opts) => mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: index, ...opts });
export const anvilPrivateKey = (index) =>
  '0x' + Buffer.from(mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: index }).getHdKey().privateKey).toString('hex');
export const buyerAccount = () => privateKeyToAccount(BUYER_PRIVATE_KEY);

export function localChain(id, rpcUrl) {
  return defineChain({
    id,
    name: id === BASE_CHAIN_ID ? 'Local Base (anvil)' : id === MAINNET_CHAIN_ID ? 'Local Ethereum (anvil)' : `Local ${id}`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
    contracts: { multicall3: { address: MULTICALL3_ADDRESS } },
  });
}

export function loadArtifact(name) {
  const p = path.join(DEVSTACK_DIR, 'build', `${name}.json`);
  if (!fs.existsSync(p)) throw new Error(`missing ${p}: run node devstack/compile.cjs`);
  return JSON.parse(fs.readFileSync(p, 'utf8'));
}

export function anvilBinary() {
  return require.resolve('@foundry-rs/anvil-linux-amd64/bin/anvil');
}

export function readState(statePath = DEFAULT_STATE_PATH) {
  if (!fs.existsSync(statePath)) {
    throw new Error(`no dev stack state file at ${statePath} (start one with scripts/dev-stack)`);
  }
  return JSON.parse(fs.readFileSync(statePath, 'utf8'));
}

export function writeFileAtomic(p, text, mode = 0o600) {
  fs.mkdirSync(path.dirname(p), { recursive: true });
  const tmp = `${p}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, text, { mode });
  fs.renameSync(tmp, p);
}

export function pidAlive(pid) {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
  } catch (e) {
    return e.code === 'EPERM';
  }
  // a zombie (exited child not yet reaped) still answers kill(0)
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const st = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    if (st === 'Z' || st === 'X') return false;
  } catch {
    /* no /proc: trust kill(0) */
  }
  return true;
}

export function pidCmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
  } catch {
    return null;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// JSON.stringify that renders bigint as decimal strings
export const jsonLine = (obj) => JSON.stringify(obj, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
