#!/usr/bin/env node
// Small chain CLI for tests (viem against the dev stack's anvil). Each command prints ONE JSON line;
// uint256 values are decimal strings. Exit 1 with {"error": ...} on failure.
//
//   node devstack/chain.mjs [--state PATH] [--chain-id 8453|1] [--rpc-url URL] <command> ...
//     balance <token|usdc|eth> <address>            ERC-20 balanceOf (or native balance for "eth")
//     allowance <token|usdc> <owner> <spender>
//     mint <address> <amount> [--token T]             mint atomic units (default token: usdc)
//     approve --from-key K <token|usdc> <spender> <amount>   gives K's address ETH first (anvil_setBalance)
//     deploy-erc20 <name> <symbol> <decimals> [eip712-version]   deploy TestERC20 (ERC-20 + EIP-2612 + EIP-3009)
//     auth-state <authorizer> <nonce> [--token T]     EIP-3009 authorizationState
//     set-eth <address> <wei>                         anvil_setBalance
//     block                                           latest block number and timestamp
//     deploy <Artifact>                               deploy a build/ artifact without constructor args (e.g. RevertProbe)
//     deploy-erc20-many <count> <symbol-prefix> <decimals> [--mint-to A --amount N]
//                                                     deploy <count> TestERC20s (symbols PREFIX1..PREFIXn), optionally minting N to A
//     aave-setup <provider-address>                   MockAavePool deployed, MockPoolAddressesProvider placed (anvil_setCode)
//                                                     at <provider-address> with setPool(pool)
//     aave-set-reserve <pool> <asset> <liquidity-rate-ray> <variable-borrow-rate-ray> <a-token>
//     burn-nonce --from-key K <nonce> [--token T]      K signs an EIP-3009 TransferWithAuthorization K -> K, value 0,
//                                                     this 32-byte nonce, validAfter 0, validBefore now + 1 year; the
//                                                     admin gets it mined. Prints {transaction, block_number, authorizer, nonce}
//     sweep --from-key K <to> [--amount N] [--token T]   K signs an EIP-3009 TransferWithAuthorization of its whole balance
//                                                     (or N atomic units) to <to>
//                                                     (a random nonce); the admin gets it mined. Prints {transaction, block_number, from, to, moved}
//     batch-authorizations --burn-key K --burn-nonce X --execute '<json>' [--token T]
//                                                     ONE transaction (AuthorizationBatch, deployed on first use) that first
//                                                     burns nonce X (K -> K, value 0) and then executes the given signed
//                                                     authorization; <json> is {authorization, signature} (a payment's
//                                                     payload.payload, or the whole payment payload). Prints {transaction, ...}
//     execute-authorization '<json>' [--token T]     the admin gets this signed authorization ({authorization, signature},
//                                                     or a whole payment payload) mined. Prints {transaction, block_number, authorizer, nonce}
//     new-buyer <amount>                              a fresh random key with <amount> atomic USDC minted to it (0 ETH);
//                                                     prints {key, address, balance}
//     advance-time <seconds>                          evm_increaseTime + evm_mine; prints the new block {number, timestamp}
//     receipt <hash>                                  {transaction, status, block_number, logs:[{log_index, address, topics,
//                                                     data, event?, args?}]}; event/args for Transfer, AuthorizationUsed,
//                                                     AuthorizationCanceled, Approval. Waits (bounded) for the receipt.
// --chain-id 1 selects the state's rpc_url_eip155_1 (start with --mainnet-anvil); "usdc" only exists on 8453.
// Transactions are sent by anvil account #1 ("admin"); account #0 belongs to the facilitator.
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { createPublicClient, createWalletClient, http, getAddress, isHex, pad, parseEther, decodeEventLog } from 'viem';
import { privateKeyToAccount, generatePrivateKey } from 'viem/accounts';
import {
  DEFAULT_STATE_PATH,
  USDC_ADDRESS,
  BASE_CHAIN_ID,
  anvilAccount,
  localChain,
  loadArtifact,
  readState,
  jsonLine,
} from './lib.mjs';

const ERC20_ABI = loadArtifact('TestERC20').abi; // superset of LocalUSDC's ABI
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

function fail(msg) {
  console.log(jsonLine({ error: msg }));
  process.exit(1);
}

let opt, pos;
try {
  ({ values: opt, positionals: pos } = parseArgs({
  allowPositionals: true,
  options: {
    state: { type: 'string', default: process.env.FACTOMAT_DEVSTACK_STATE || DEFAULT_STATE_PATH },
    'chain-id': { type: 'string', default: String(BASE_CHAIN_ID) },
    'rpc-url': { type: 'string' },
    'from-key': { type: 'string' },
    token: { type: 'string', default: 'usdc' },
    'mint-to': { type: 'string' },
    amount: { type: 'string' },
    'burn-key': { type: 'string' },
    'burn-nonce': { type: 'string' },
    execute: { type: 'string' },
  },
  }));
} catch (e) {
  fail(`${e.message}; see the header of devstack/chain.mjs`);
}

async function main() {
  const chainId = Number(opt['chain-id']);
  let rpcUrl = opt['rpc-url'];
  if (!rpcUrl) {
    const st = readState(path.resolve(opt.state));
    rpcUrl = chainId === BASE_CHAIN_ID ? st.rpc_url : st[`rpc_url_eip155_${chainId}`];
    if (!rpcUrl) throw new Error(`state file has no rpc_url_eip155_${chainId} (start with --mainnet-anvil?)`);
  }
  const chain = localChain(chainId, rpcUrl);
  // A short polling interval: with --block-time the receipt comes at the next block, not at once.
  const pub = createPublicClient({ chain, transport: http(rpcUrl), pollingInterval: 100 });
  const admin = createWalletClient({ account: anvilAccount(1), chain, transport: http(rpcUrl) });

  const token = (t) => {
    if (String(t).toLowerCase() === 'usdc') return USDC_ADDRESS;
    return getAddress(t);
  };
  const uint = (v, what) => {
    if (!/^\d+$/.test(String(v ?? ''))) throw new Error(`${what} must be a non-negative integer (atomic units), got ${v}`);
    return BigInt(v);
  };
  const wait = async (hash) => {
    const r = await pub.waitForTransactionReceipt({ hash });
    if (r.status !== 'success') throw new Error(`transaction ${hash} reverted`);
    return r;
  };
  const read = (address, functionName, args) => pub.readContract({ address, abi: ERC20_ABI, functionName, args });
  const nonceArg = (v, what) => {
    if (!/^0x[0-9a-fA-F]{64}$/.test(String(v ?? ''))) throw new Error(`${what} must be 0x followed by 64 hex digits (32 bytes)`);
    return v;
  };
  // K signs TransferWithAuthorization(K -> to, value, validAfter 0, validBefore now + 1 year, nonce)
  // for token t; K -> K of 0 unless told.
  const selfAuthorization = async (t, key, nonce, to = null, value = 0n) => {
    const acct = privateKeyToAccount(key);
    const [name, version] = await Promise.all([read(t, 'name', []), read(t, 'version', [])]);
    const message = {
      from: acct.address,
      to: to ?? acct.address,
      value,
      validAfter: 0n,
      validBefore: BigInt(Math.floor(Date.now() / 1000) + 365 * 24 * 3600),
      nonce,
    };
    const signature = await acct.signTypedData({
      domain: { name, version, chainId, verifyingContract: t },
      types: AUTHORIZATION_TYPES,
      primaryType: 'TransferWithAuthorization',
      message,
    });
    return { ...message, signature };
  };
  // The admin gets a signed authorization of token t mined (transferWithAuthorization).
  const execute = async (t, auth) => {
    const hash = await admin.writeContract({
      address: t,
      abi: ERC20_ABI,
      functionName: 'transferWithAuthorization',
      args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, auth.signature],
    });
    return { hash, r: await wait(hash) };
  };
  const authTuple = (a) => ({
    from: getAddress(a.from),
    to: getAddress(a.to),
    value: BigInt(a.value),
    validAfter: BigInt(a.validAfter),
    validBefore: BigInt(a.validBefore),
    nonce: a.nonce,
    signature: a.signature,
  });
  // {authorization, signature} from its JSON, or from a whole payment payload's.
  const signedAuthorization = (json, flag) => {
    let given = JSON.parse(json);
    if (given?.payload?.authorization) given = given.payload;
    if (!given?.authorization || typeof given.signature !== 'string') throw new Error(`${flag} must hold {authorization, signature}`);
    return authTuple({ ...given.authorization, signature: given.signature });
  };

  const [cmd, ...a] = pos;
  switch (cmd) {
    case 'balance': {
      if (a.length !== 2) throw new Error('usage: balance <token|usdc|eth> <address>');
      const who = getAddress(a[1]);
      if (a[0].toLowerCase() === 'eth') {
        return { token: 'eth', address: who, balance: await pub.getBalance({ address: who }) };
      }
      const t = token(a[0]);
      return { token: t, address: who, balance: await read(t, 'balanceOf', [who]) };
    }
    case 'allowance': {
      if (a.length !== 3) throw new Error('usage: allowance <token|usdc> <owner> <spender>');
      const t = token(a[0]);
      const [owner, spender] = [getAddress(a[1]), getAddress(a[2])];
      return { token: t, owner, spender, allowance: await read(t, 'allowance', [owner, spender]) };
    }
    case 'mint': {
      if (a.length !== 2) throw new Error('usage: mint <address> <amount> [--token T]');
      const t = token(opt.token);
      const to = getAddress(a[0]);
      const amount = uint(a[1], 'amount');
      const hash = await admin.writeContract({ address: t, abi: ERC20_ABI, functionName: 'mint', args: [to, amount] });
      await wait(hash);
      return { token: t, to, amount, tx: hash, balance: await read(t, 'balanceOf', [to]) };
    }
    case 'approve': {
      if (!opt['from-key'] || a.length !== 3) throw new Error('usage: approve --from-key K <token|usdc> <spender> <amount>');
      const acct = privateKeyToAccount(opt['from-key']);
      const t = token(a[0]);
      const spender = getAddress(a[1]);
      const amount = uint(a[2], 'amount');
      const eth = await pub.getBalance({ address: acct.address });
      if (eth < parseEther('1')) {
        await pub.request({ method: 'anvil_setBalance', params: [acct.address, `0x${parseEther('10').toString(16)}`] });
      }
      const w = createWalletClient({ account: acct, chain, transport: http(rpcUrl) });
      const hash = await w.writeContract({ address: t, abi: ERC20_ABI, functionName: 'approve', args: [spender, amount] });
      await wait(hash);
      return { token: t, owner: acct.address, spender, amount, tx: hash, allowance: await read(t, 'allowance', [acct.address, spender]) };
    }
    case 'deploy-erc20': {
      if (a.length < 3 || a.length > 4) throw new Error('usage: deploy-erc20 <name> <symbol> <decimals> [eip712-version]');
      const dec = Number(uint(a[2], 'decimals'));
      if (dec > 255) throw new Error('decimals must be <= 255');
      const art = loadArtifact('TestERC20');
      const version = a[3] ?? '1';
      const hash = await admin.deployContract({ abi: art.abi, bytecode: art.bytecode, args: [a[0], a[1], dec, version] });
      const r = await wait(hash);
      return { address: getAddress(r.contractAddress), name: a[0], symbol: a[1], decimals: dec, version, chain_id: chainId, tx: hash };
    }
    case 'auth-state': {
      if (a.length !== 2) throw new Error('usage: auth-state <authorizer> <nonce> [--token T]');
      const t = token(opt.token);
      if (!isHex(a[1]) || a[1].length > 66) throw new Error('nonce must be 0x-hex, at most 32 bytes');
      const authorizer = getAddress(a[0]);
      const nonce = pad(a[1], { size: 32 });
      return { token: t, authorizer, nonce, used: await read(t, 'authorizationState', [authorizer, nonce]) };
    }
    case 'set-eth': {
      if (a.length !== 2) throw new Error('usage: set-eth <address> <wei>');
      const who = getAddress(a[0]);
      const wei = uint(a[1], 'wei');
      await pub.request({ method: 'anvil_setBalance', params: [who, `0x${wei.toString(16)}`] });
      return { address: who, balance: await pub.getBalance({ address: who }) };
    }
    case 'block': {
      const b = await pub.getBlock();
      return { chain_id: chainId, number: b.number, timestamp: b.timestamp, base_fee_per_gas: b.baseFeePerGas };
    }
    case 'deploy': {
      if (a.length !== 1) throw new Error('usage: deploy <Artifact>');
      const art = loadArtifact(a[0]);
      const r = await wait(await admin.deployContract({ abi: art.abi, bytecode: art.bytecode, args: [] }));
      return { address: getAddress(r.contractAddress), artifact: a[0], chain_id: chainId };
    }
    case 'deploy-erc20-many': {
      if (a.length !== 3) throw new Error('usage: deploy-erc20-many <count> <symbol-prefix> <decimals> [--mint-to A --amount N]');
      const count = Number(uint(a[0], 'count'));
      const dec = Number(uint(a[2], 'decimals'));
      const art = loadArtifact('TestERC20');
      const mintTo = opt['mint-to'] ? getAddress(opt['mint-to']) : null;
      const amount = mintTo ? uint(opt.amount, 'amount') : 0n;
      const tokens = [];
      for (let i = 1; i <= count; i++) {
        const symbol = `${a[1]}${i}`;
        const r = await wait(await admin.deployContract({ abi: art.abi, bytecode: art.bytecode, args: [`${symbol} Token`, symbol, dec, '1'] }));
        const address = getAddress(r.contractAddress);
        if (mintTo) {
          await wait(await admin.writeContract({ address, abi: ERC20_ABI, functionName: 'mint', args: [mintTo, amount] }));
        }
        tokens.push(address);
      }
      return { tokens, decimals: dec, minted_to: mintTo, amount, chain_id: chainId };
    }
    case 'aave-setup': {
      if (a.length !== 1) throw new Error('usage: aave-setup <provider-address>');
      const target = getAddress(a[0]);
      const poolArt = loadArtifact('MockAavePool');
      const providerArt = loadArtifact('MockPoolAddressesProvider');
      const pool = getAddress((await wait(await admin.deployContract({ abi: poolArt.abi, bytecode: poolArt.bytecode, args: [] }))).contractAddress);
      const deployed = (await wait(await admin.deployContract({ abi: providerArt.abi, bytecode: providerArt.bytecode, args: [] }))).contractAddress;
      const code = await pub.getCode({ address: deployed });
      await pub.request({ method: 'anvil_setCode', params: [target, code] });
      await wait(await admin.writeContract({ address: target, abi: providerArt.abi, functionName: 'setPool', args: [pool] }));
      const got = await pub.readContract({ address: target, abi: providerArt.abi, functionName: 'getPool', args: [] });
      if (getAddress(got) !== pool) throw new Error(`getPool() at ${target} returned ${got}, expected ${pool}`);
      return { provider: target, pool, chain_id: chainId };
    }
    case 'aave-set-reserve': {
      if (a.length !== 5) throw new Error('usage: aave-set-reserve <pool> <asset> <liquidity-rate-ray> <variable-borrow-rate-ray> <a-token>');
      const art = loadArtifact('MockAavePool');
      const [pool, asset, aToken] = [getAddress(a[0]), getAddress(a[1]), getAddress(a[4])];
      const liquidity = uint(a[2], 'liquidity rate');
      const borrow = uint(a[3], 'variable borrow rate');
      const hash = await admin.writeContract({ address: pool, abi: art.abi, functionName: 'setReserve', args: [asset, liquidity, borrow, aToken] });
      await wait(hash);
      return { pool, asset, liquidity_rate_ray: liquidity, variable_borrow_rate_ray: borrow, a_token: aToken, tx: hash };
    }
    case 'burn-nonce': {
      if (!opt['from-key'] || a.length !== 1) throw new Error('usage: burn-nonce --from-key K <nonce> [--token T]');
      const t = token(opt.token);
      const auth = await selfAuthorization(t, opt['from-key'], nonceArg(a[0], 'nonce'));
      const { hash, r } = await execute(t, auth);
      return { transaction: hash, block_number: r.blockNumber, token: t, authorizer: auth.from, nonce: auth.nonce };
    }
    case 'sweep': {
      if (!opt['from-key'] || a.length !== 1) throw new Error('usage: sweep --from-key K <to> [--amount N] [--token T]');
      const t = token(opt.token);
      const owner = privateKeyToAccount(opt['from-key']).address;
      const moved = opt.amount !== undefined ? BigInt(opt.amount) : await read(t, 'balanceOf', [owner]);
      const nonce = `0x${randomBytes(32).toString('hex')}`;
      const auth = await selfAuthorization(t, opt['from-key'], nonce, getAddress(a[0]), moved);
      const { hash, r } = await execute(t, auth);
      return { transaction: hash, block_number: r.blockNumber, token: t, from: owner, to: auth.to, moved };
    }
    case 'batch-authorizations': {
      if (!opt['burn-key'] || !opt['burn-nonce'] || !opt.execute || a.length !== 0) {
        throw new Error("usage: batch-authorizations --burn-key K --burn-nonce X --execute '<json {authorization, signature}>' [--token T]");
      }
      const t = token(opt.token);
      const given = signedAuthorization(opt.execute, '--execute');
      const burn = await selfAuthorization(t, opt['burn-key'], nonceArg(opt['burn-nonce'], '--burn-nonce'));
      const art = loadArtifact('AuthorizationBatch');
      const deployed = await wait(await admin.deployContract({ abi: art.abi, bytecode: art.bytecode, args: [] }));
      const batch = getAddress(deployed.contractAddress);
      const hash = await admin.writeContract({
        address: batch,
        abi: art.abi,
        functionName: 'executeTwo',
        args: [t, authTuple(burn), given],
      });
      const r = await wait(hash);
      return {
        transaction: hash,
        block_number: r.blockNumber,
        batch_contract: batch,
        burned: { authorizer: burn.from, nonce: burn.nonce },
        executed: { authorizer: given.from, nonce: given.nonce },
      };
    }
    case 'execute-authorization': {
      if (a.length !== 1) throw new Error("usage: execute-authorization '<json {authorization, signature}>' [--token T]");
      const t = token(opt.token);
      const given = signedAuthorization(a[0], 'the authorization');
      const { hash, r } = await execute(t, given);
      return { transaction: hash, block_number: r.blockNumber, token: t, authorizer: given.from, nonce: given.nonce };
    }
    case 'new-buyer': {
      if (a.length !== 1) throw new Error('usage: new-buyer <amount>');
      const amount = uint(a[0], 'amount');
      const key = generatePrivateKey();
      const address = privateKeyToAccount(key).address;
      await wait(await admin.writeContract({ address: USDC_ADDRESS, abi: ERC20_ABI, functionName: 'mint', args: [address, amount] }));
      return { key, address, balance: await read(USDC_ADDRESS, 'balanceOf', [address]) };
    }
    case 'advance-time': {
      if (a.length !== 1) throw new Error('usage: advance-time <seconds>');
      const seconds = uint(a[0], 'seconds');
      await pub.request({ method: 'evm_increaseTime', params: [`0x${seconds.toString(16)}`] });
      await pub.request({ method: 'evm_mine', params: [] });
      const b = await pub.getBlock();
      return { advanced_seconds: seconds, number: b.number, timestamp: b.timestamp };
    }
    case 'receipt': {
      if (a.length !== 1 || !/^0x[0-9a-fA-F]{64}$/.test(a[0])) throw new Error('usage: receipt <0x transaction hash>');
      const r = await pub.waitForTransactionReceipt({ hash: a[0], timeout: 30_000 });
      const logs = r.logs.map((l) => {
        const entry = { log_index: l.logIndex, address: getAddress(l.address), topics: l.topics, data: l.data };
        try {
          const d = decodeEventLog({ abi: ERC20_ABI, data: l.data, topics: l.topics });
          entry.event = d.eventName;
          entry.args = d.args;
        } catch {
          /* not one of the token's events */
        }
        return entry;
      });
      return { transaction: r.transactionHash, status: r.status, block_number: r.blockNumber, from: r.from, to: r.to, logs };
    }
    default:
      throw new Error(`unknown command ${JSON.stringify(cmd ?? '')}; see the header of devstack/chain.mjs`);
  }
}

try {
  console.log(jsonLine(await main()));
} catch (e) {
  fail(String(e?.shortMessage ?? e?.message ?? e));
}
