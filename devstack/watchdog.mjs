#!/usr/bin/env node
// Foreground-mode watchdog (spawned by start.mjs --foreground): if the launcher dies without
// cleaning up (e.g. SIGKILL, as Rust's Child::kill sends), stop the stack's children and remove the
// state file. Exits on its own when the children are gone or when it receives SIGTERM.
//   node watchdog.mjs --parent PID --pids P1,P2,... [--state PATH]
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { pidAlive, pidCmdline, sleep } from './lib.mjs';

const { values: opt } = parseArgs({
  options: { parent: { type: 'string' }, pids: { type: 'string', default: '' }, state: { type: 'string' } },
});
const parent = Number(opt.parent);
const pids = opt.pids.split(',').filter(Boolean).map(Number);
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => {}); // terminal Ctrl-C is the launcher's business

while (pidAlive(parent)) {
  if (!pids.some(pidAlive)) process.exit(0);
  await sleep(200);
}
const ours = pids.filter((p) => pidAlive(p) && /anvil|facilitator\.mjs/.test(pidCmdline(p) ?? 'anvil'));
for (const p of ours) {
  try {
    process.kill(p, 'SIGTERM');
  } catch {
    /* gone */
  }
}
const deadline = Date.now() + 3000;
while (Date.now() < deadline && ours.some(pidAlive)) await sleep(20);
for (const p of ours.filter(pidAlive)) {
  try {
    process.kill(p, 'SIGKILL');
  } catch {
    /* gone */
  }
}
if (opt.state) {
  try {
    const s = JSON.parse(fs.readFileSync(opt.state, 'utf8'));
    if (Object.values(s.pids || {}).some((p) => pids.includes(p))) fs.rmSync(opt.state);
  } catch {
    /* no state */
  }
}
