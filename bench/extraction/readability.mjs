#!/usr/bin/env node
// The extraction reference: Readability.js 0.6.0 + jsdom 27 over pages held in memory
// (extraction loop only: parse + Readability.parse per page), read in place from the shared
// corpus. Prints one JSON line: {pages, pages_per_s (median of reps), rss_mb (peak)}.
// --texts FILE also writes each page's textContent (last pass) as JSON lines {file, text}, for
// scoring; --bytes hands jsdom the raw bytes so it sniffs the charset itself (pages whose
// bytes are not all UTF-8, as in trafilatura's corpus).
//
//   node readability.mjs --reps 3 [--texts FILE] [--bytes] PAGE.html...
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { JSDOM, VirtualConsole } from 'jsdom';
import { Readability } from '@mozilla/readability';

const { values: opt, positionals: files } = parseArgs({
  options: {
    reps: { type: 'string', default: '3' },
    texts: { type: 'string' },
    bytes: { type: 'boolean', default: false },
  },
  allowPositionals: true,
});
const pages = files.map((f) => (opt.bytes ? readFileSync(f) : readFileSync(f, 'utf8')));
const texts = new Array(pages.length).fill('');
// The corpus's own harness URL; nothing is fetched (jsdom loads no subresources by default).
const url = 'http://fakehost/test/page.html';
const quiet = new VirtualConsole();

function pass() {
  const started = process.hrtime.bigint();
  let failed = 0;
  for (const [i, html] of pages.entries()) {
    try {
      const dom = new JSDOM(html, { url, virtualConsole: quiet });
      const article = new Readability(dom.window.document).parse();
      texts[i] = article?.textContent ?? '';
      dom.window.close();
    } catch {
      failed += 1;
    }
  }
  return { seconds: Number(process.hrtime.bigint() - started) / 1e9, failed };
}

const rates = [];
let failed = 0;
for (let i = 0; i < Number(opt.reps); i++) {
  const r = pass();
  rates.push(pages.length / r.seconds);
  failed = r.failed;
}
rates.sort((a, b) => a - b);
if (opt.texts) {
  writeFileSync(opt.texts, files.map((file, i) => JSON.stringify({ file, text: texts[i] })).join('\n') + '\n');
}
console.log(JSON.stringify({
  pages: pages.length,
  failed,
  pages_per_s: rates[Math.floor(rates.length / 2)],
  rss_mb: process.resourceUsage().maxRSS / 1024,
}));
