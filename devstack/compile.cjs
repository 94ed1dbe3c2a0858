#!/usr/bin/env node
// Compile devstack/contracts/*.sol offline with solc-js and write devstack/build/<Contract>.json
// ({contractName, abi, bytecode, deployedBytecode, compiler, settings, sourcesSha256}).
// The build/ artifacts are committed; run this only when a contract source changes.
//   node compile.cjs           compile and write artifacts
//   node compile.cjs --check   exit 0 if artifacts exist and match the current sources, 1 otherwise
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const DIR = __dirname;
const SRC_DIR = path.join(DIR, 'contracts');
const BUILD_DIR = path.join(DIR, 'build');
// contract name -> source file
const TARGETS = {
  LocalUSDC: 'LocalUSDC.sol',
  Multicall3Shim: 'Multicall3Shim.sol',
  TestERC20: 'TestERC20.sol',
  RevertProbe: 'RevertProbe.sol',
  MockPoolAddressesProvider: 'MockAave.sol',
  MockAavePool: 'MockAave.sol',
  AuthorizationBatch: 'AuthorizationBatch.sol',
};
const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: 'cancun',
  outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
};

function readSources() {
  const sources = {};
  for (const f of fs.readdirSync(SRC_DIR).filter((f) => f.endsWith('.sol')).sort()) {
    sources[f] = { content: fs.readFileSync(path.join(SRC_DIR, f), 'utf8') };
  }
  return sources;
}

function sourcesHash(sources) {
  const h = crypto.createHash('sha256');
  for (const f of Object.keys(sources).sort()) h.update(f + '\0' + sources[f].content + '\0');
  return h.digest('hex');
}

function check() {
  const want = sourcesHash(readSources());
  for (const name of Object.keys(TARGETS)) {
    const p = path.join(BUILD_DIR, `${name}.json`);
    if (!fs.existsSync(p)) return false;
    try {
      const a = JSON.parse(fs.readFileSync(p, 'utf8'));
      if (a.sourcesSha256 !== want || !a.bytecode || !a.deployedBytecode) return false;
    } catch {
      return false;
    }
  }
  return true;
}

function main() {
  if (process.argv.includes('--check')) process.exit(check() ? 0 : 1);

  const solc = require('solc');
  const sources = readSources();
  const input = { language: 'Solidity', sources, settings: SETTINGS };
  const findImports = (p) => {
    const f = path.join(SRC_DIR, path.basename(p));
    return fs.existsSync(f) ? { contents: fs.readFileSync(f, 'utf8') } : { error: `not found: ${p}` };
  };
  const t0 = Date.now();
  const out = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const errors = (out.errors || []).filter((e) => e.severity === 'error');
  for (const e of out.errors || []) console.error(e.formattedMessage || e.message);
  if (errors.length) process.exit(1);

  fs.mkdirSync(BUILD_DIR, { recursive: true });
  const hash = sourcesHash(sources);
  for (const [name, file] of Object.entries(TARGETS)) {
    const c = out.contracts?.[file]?.[name];
    if (!c) throw new Error(`compiler output lacks ${file}:${name}`);
    const artifact = {
      contractName: name,
      sourceName: `contracts/${file}`,
      compiler: `solc-js ${solc.version()}`,
      settings: { optimizer: SETTINGS.optimizer, evmVersion: SETTINGS.evmVersion },
      sourcesSha256: hash,
      abi: c.abi,
      bytecode: '0x' + c.evm.bytecode.object,
      deployedBytecode: '0x' + c.evm.deployedBytecode.object,
    };
    fs.writeFileSync(path.join(BUILD_DIR, `${name}.json`), JSON.stringify(artifact, null, 2) + '\n');
    console.error(
      `compiled ${name}: runtime ${(artifact.deployedBytecode.length - 2) / 2} bytes -> build/${name}.json`
    );
  }
  console.error(`solc ${solc.version()} in ${Date.now() - t0} ms`);
}

main();
