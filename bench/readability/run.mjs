// The Readability.js side of bench/extract.sh: every page read into memory first, then
// ROUNDS timed passes of `new JSDOM(html, {url})` + `new Readability(document).parse()`.
// Prints one JSON line: {pages, failures, bytes, seconds (median pass), pages_per_second,
// mb_per_second}.
// Usage: node run.mjs CORPUS_DIR [ROUNDS]
import fs from 'node:fs';
import path from 'node:path';
import { JSDOM, VirtualConsole } from 'jsdom';
import { Readability } from '@mozilla/readability';

const corpus = path.join(process.argv[2], 'test-pages');
const rounds = Number(process.argv[3] || 3);
const pages = fs.readdirSync(corpus).sort()
  .map((name) => path.join(corpus, name, 'source.html'))
  .filter((file) => fs.existsSync(file))
  .map((file) => fs.readFileSync(file, 'utf8'));
const bytes = pages.reduce((sum, html) => sum + Buffer.byteLength(html), 0);
// jsdom reports CSS it cannot parse on its console; the bench does not need it.
const quiet = new VirtualConsole();
const times = [];
let failures = 0;
for (let round = 0; round < rounds; round++) {
  failures = 0;
  const start = process.hrtime.bigint();
  for (const html of pages) {
    // jsdom 27's CSS parser throws on at least one corpus page; that page counts as attempted
    // and is reported as a failure rather than stopping the run.
    try {
      const dom = new JSDOM(html, { url: 'http://fakehost/test/', virtualConsole: quiet });
      new Readability(dom.window.document).parse();
      dom.window.close();
    } catch {
      failures += 1;
    }
  }
  times.push(Number(process.hrtime.bigint() - start) / 1e9);
}
times.sort((a, b) => a - b);
const seconds = times[Math.floor(times.length / 2)];
console.log(JSON.stringify({
  pages: pages.length, failures, bytes, seconds,
  pages_per_second: pages.length / seconds, mb_per_second: bytes / 1e6 / seconds,
}));
