#!/usr/bin/env node
// Stop the processes a dev stack state file lists (SIGTERM, then SIGKILL after 3 s) and remove the file.
//   node devstack/stop.mjs [--state PATH] [--keep-state]
// Only pids whose command line still looks like ours (anvil / facilitator.mjs) are signalled,
// so a stale state file cannot make it kill an unrelated process that reused a pid.
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_STATE_PATH, pidAlive, pidCmdline, sleep, jsonLine } from './lib.mjs';

const { values: opt } = parseArgs({
  options: {
    state: { type: 'string', default: process.env.FACTOMAT_DEVSTACK_STATE || DEFAULT_STATE_PATH },
    'keep-state': { type: 'boolean', default: false },
  },
});
const statePath = path.resolve(opt.state);
if (!fs.existsSync(statePath)) {
  console.log(jsonLine({ stopped: [], note: `no state file at ${statePath}` }));
  process.exit(0);
}
const state = JSON.parse(fs.readFileSync(statePath, 'utf8'));
const expect = { anvil: /anvil/, anvil_mainnet: /anvil/, facilitator: /facilitator\.mjs/ };

const targets = [];
const skipped = [];
for (const [name, pid] of Object.entries(state.pids || {})) {
  if (!pid || !pidAlive(pid)) {
    skipped.push({ name, pid, why: 'not running' });
    continue;
  }
  const cmd = pidCmdline(pid);
  const re = expect[name] || /anvil|facilitator\.mjs/;
  if (cmd !== null && !re.test(cmd)) {
    skipped.push({ name, pid, why: `pid now runs something else: ${cmd.slice(0, 80)}` });
    continue;
  }
  targets.push({ name, pid });
}

for (const t of targets) {
  try {
    process.kill(t.pid, 'SIGTERM');
  } catch {
    /* raced */
  }
}
const deadline = Date.now() + 3000;
while (Date.now() < deadline && targets.some((t) => pidAlive(t.pid))) await sleep(20);
const killed = [];
for (const t of targets) {
  if (pidAlive(t.pid)) {
    try {
      process.kill(t.pid, 'SIGKILL');
      killed.push(t.name);
    } catch {
      /* raced */
    }
  }
}
await sleep(50);
const remaining = targets.filter((t) => pidAlive(t.pid));
if (!opt['keep-state'] && remaining.length === 0) fs.rmSync(statePath, { force: true });
console.log(jsonLine({ stopped: targets.map((t) => t.name), sigkill: killed, skipped, remaining, state_removed: !opt['keep-state'] && remaining.length === 0 }));
process.exit(remaining.length ? 1 : 0);
