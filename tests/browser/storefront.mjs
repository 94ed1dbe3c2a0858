#!/usr/bin/env node
// Visits every storefront page in Debian's headless chromium and prints ONE line of JSON with
// what it saw; tests/storefront_browser.rs judges it. Nothing may leave loopback: every other
// request is aborted and reported.
//
//   node tests/browser/storefront.mjs --origin http://127.0.0.1:PORT --out DIR
//        --machines VM01,VM02,... [--screenshot-machine VM01] [--chromium /usr/bin/chromium]
//
// Output: {pages: [{path, status, title, h1, console_errors, button_console_errors, page_errors,
//          failed_requests,
//          links: [{href, status}], terms}], off_loopback: [url], js_off: {...}, screenshots: [path]}
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];

const { values: opt } = parseArgs({
  options: {
    origin: { type: 'string' },
    out: { type: 'string' },
    machines: { type: 'string' },
    'screenshot-machine': { type: 'string', default: 'VM01' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
  },
});
if (!opt.origin || !opt.out || !opt.machines) {
  throw new Error('--origin, --out and --machines are required');
}
const origin = new URL(opt.origin);
const machines = opt.machines.split(',').filter(Boolean);
fs.mkdirSync(opt.out, { recursive: true });

function isLoopback(url) {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

const offLoopback = [];
const userDataDirs = [];

async function launch(extra = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'factomat-chromium-'));
  userDataDirs.push(dir);
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: opt.chromium,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 900 },
    ...extra,
  });
  // Only loopback is reachable; anything else is aborted before it leaves and reported.
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (url.protocol === 'data:' || isLoopback(url)) return route.continue();
    offLoopback.push(url.href);
    return route.abort('blockedbyclient');
  });
  return context;
}

async function visit(context, pagePath, linkStatus) {
  const page = await context.newPage();
  const seen = {
    path: pagePath,
    console_errors: [],
    button_console_errors: [],
    page_errors: [],
    failed_requests: [],
  };
  // Chromium logs every non-2xx fetch as a console error, so the button's expected 402 is
  // kept apart (with the URL it names) from errors while the page loads and reads.
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const entry = { text: message.text(), url: message.location().url };
    (page.buttonPressed ? seen.button_console_errors : seen.console_errors).push(entry);
  });
  page.on('pageerror', (error) => seen.page_errors.push(String(error)));
  page.on('requestfailed', (request) =>
    seen.failed_requests.push(`${request.url()}: ${request.failure()?.errorText}`),
  );
  const response = await page.goto(new URL(pagePath, origin).href, { waitUntil: 'load' });
  seen.status = response ? response.status() : null;
  seen.content_encoding = response ? (await response.allHeaders())['content-encoding'] ?? null : null;
  seen.title = await page.title();
  seen.h1 = await page.locator('h1').first().textContent();
  seen.links = [];
  const hrefs = await page.$$eval('a[href]', (anchors) => anchors.map((a) => a.href));
  for (const href of [...new Set(hrefs)]) {
    const url = new URL(href);
    if (!isLoopback(url)) {
      offLoopback.push(url.href);
      seen.links.push({ href, status: null });
      continue;
    }
    if (url.hash && url.pathname === new URL(page.url()).pathname) {
      const id = decodeURIComponent(url.hash.slice(1));
      const found = await page.locator(`[id="${id}"]`).count();
      seen.links.push({ href, status: found ? 200 : 404 });
      continue;
    }
    url.hash = '';
    if (!linkStatus.has(url.href)) {
      const answer = await context.request.get(url.href);
      linkStatus.set(url.href, answer.status());
    }
    seen.links.push({ href, status: linkStatus.get(url.href) });
  }
  return { page, seen };
}

async function readTerms(page) {
  const button = page.locator('#terms-button');
  page.buttonPressed = true;
  await button.click();
  const output = page.locator('#terms-output');
  await output.locator('[data-term="payTo"], .problem').first().waitFor({ timeout: 15000 });
  const terms = {};
  for (const name of ['amount', 'amount-readable', 'asset', 'network', 'payTo', 'scheme']) {
    const cell = output.locator(`[data-term="${name}"]`).first();
    terms[name] = (await cell.count()) ? (await cell.textContent()).trim() : null;
  }
  const problem = output.locator('.problem');
  terms.problem = (await problem.count()) ? await problem.textContent() : null;
  return terms;
}

const result = { pages: [], off_loopback: offLoopback, screenshots: [], js_off: null };
const context = await launch();
try {
  const linkStatus = new Map();
  const index = await visit(context, '/storefront/', linkStatus);
  const indexShot = path.join(opt.out, 'storefront-index.png');
  await index.page.screenshot({ path: indexShot, fullPage: true });
  result.screenshots.push(indexShot);
  result.pages.push(index.seen);
  await index.page.close();
  for (const machine of machines) {
    const { page, seen } = await visit(context, `/storefront/${machine}`, linkStatus);
    seen.button_visible = await page.locator('#terms-button').isVisible();
    seen.terms = await readTerms(page);
    if (machine === opt['screenshot-machine']) {
      const full = path.join(opt.out, `storefront-${machine}.png`);
      await page.screenshot({ path: full, fullPage: true });
      const terms = path.join(opt.out, `storefront-${machine}-terms.png`);
      await page.locator('section.terms').screenshot({ path: terms });
      const top = path.join(opt.out, `storefront-${machine}-top.png`);
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.screenshot({ path: top });
      result.screenshots.push(full, terms, top);
    }
    result.pages.push(seen);
    await page.close();
  }
} finally {
  await context.close();
}

// With JavaScript off a page still reads in full; only the button stays hidden.
const noScript = await launch({ javaScriptEnabled: false });
try {
  const machine = machines[0];
  const page = await noScript.newPage();
  const response = await page.goto(new URL(`/storefront/${machine}`, origin).href);
  result.js_off = {
    machine,
    status: response ? response.status() : null,
    h1: await page.locator('h1').first().textContent(),
    schema_rows: await page.locator('table.schema tbody tr').count(),
    snippets: await page.locator('#pay ~ pre, section pre').count(),
    button_visible: await page.locator('#terms-button').isVisible(),
    noscript_text: await page.locator('noscript').first().textContent(),
  };
} finally {
  await noScript.close();
}

for (const dir of userDataDirs) fs.rmSync(dir, { recursive: true, force: true });
process.stdout.write(`${JSON.stringify(result)}\n`);
