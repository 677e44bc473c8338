// Browser end-to-end test of the web UI (ui/) served by `dspark serve --model demo` on a
// loopback port, in headless Debian chromium driven by playwright-core (no browser download).
// Screenshots go to target/e2e-artifacts/ (DSPARK_E2E_ARTIFACTS overrides).
//
//   cd tests/e2e && npm ci && node --test ui.test.mjs
//
// Env: DSPARK_BIN (default target/debug/dspark), CHROMIUM (default /usr/bin/chromium).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = process.env.DSPARK_BIN || path.join(ROOT, 'target', 'debug', 'dspark');
const OUT = process.env.DSPARK_E2E_ARTIFACTS || path.join(ROOT, 'target', 'e2e-artifacts');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const START_TIMEOUT_MS = 300_000;

let server;
let base;
let browser;
let page;

function startServer() {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ['serve', '--model', 'demo', '--mode', 'draft', '--host', '127.0.0.1', '--port', '0'],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, DSPARK_API_KEY: '' } });
    let out = '';
    const timer = setTimeout(() => reject(new Error('dspark serve did not start:\n' + out)), START_TIMEOUT_MS);
    const onData = (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.:]+)/);
      if (m) { clearTimeout(timer); resolve({ proc: p, url: m[1] }); }
    };
    p.stdout.on('data', onData);
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error('dspark serve exited ' + code + ':\n' + out)); });
  });
}

// the request options live in a collapsed <details>
async function option(id, value) {
  await page.evaluate(() => { document.getElementById('chat-options').open = true; });
  await page.fill(id, value);
}

async function shot(name, target) {
  const file = path.join(OUT, name);
  await (target || page).screenshot({ path: file });
  return file;
}

before(async () => {
  mkdirSync(OUT, { recursive: true });
  const t0 = Date.now();
  ({ proc: server, url: base } = await startServer());
  console.log(`# dspark serve up at ${base} in ${Date.now() - t0} ms`);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--no-first-run', '--disable-sync', '--disable-quic'],
  });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await ctx.newPage();
  // the box may be busy (shared CI cores): generous waits, the model is slow in debug builds
  page.setDefaultTimeout(180_000);
  page.on('pageerror', (e) => console.log('# page error: ' + e.message));
  await page.goto(base + '/');
  await page.waitForSelector('body[data-ready="1"]');
});

after(async () => {
  if (browser) await browser.close();
  if (server) server.kill('SIGINT');
});

test('the UI is served at / with the model and the browser transport', async () => {
  await page.waitForFunction(() => document.getElementById('model-pill').textContent.includes('draft'));
  assert.match(await page.textContent('#model-pill'), /demo|SmolLM2/i);
  assert.equal(await page.textContent('#transport-pill'), 'browser');
  assert.match(await page.textContent('#server-state'), /serving/);
});

test('a chat reply streams in, ends with speculative stats, and the gauges update', async () => {
  await option('#opt-max-tokens', '64');
  await page.fill('#prompt', 'Write a short poem about the sea.');
  await page.click('#send');
  // streaming: the bubble is marked live while text grows
  await page.waitForSelector('.msg.assistant.streaming');
  await page.waitForFunction(() => {
    const c = document.querySelector('.msg.assistant .content');
    return c && c.textContent.length > 0;
  });
  const partial = await page.textContent('.msg.assistant .content');
  await page.waitForSelector('.msg.assistant:not(.streaming) .meta', { timeout: 300_000 });
  const full = await page.textContent('.msg.assistant .content');
  assert.ok(full.length >= partial.length && full.length > 10, `reply: ${full}`);
  const meta = await page.textContent('.msg.assistant .meta');
  assert.match(meta, /draft · \d+ tokens · [\d.]+ tok\/s · accept [\d.]+\/round/);
  // gauges: tok/s and accept length filled, the histogram has rounds, /metrics counted it
  await page.waitForFunction(() => document.querySelector('#g-tps .value').textContent !== '–');
  await page.waitForFunction(() => Number(document.getElementById('s-requests').textContent) >= 1);
  await page.waitForFunction(() => [...document.querySelectorAll('#histogram .bar')]
    .some((b) => parseFloat(b.style.height) > 0));
  const accept = parseFloat(await page.textContent('#g-accept .value'));
  assert.ok(accept >= 1, `accept length ${accept}`);
  assert.match(await page.textContent('#s-cache'), /of \d+ prompt tokens/);
  await page.evaluate(() => { document.getElementById('chat-options').open = false; });
  await shot('chat.png');
  await shot('gauges.png', page.locator('#gauges'));
});

test('Stop aborts a running generation and the server cancels it', async () => {
  await page.click('#clear');
  await option('#opt-max-tokens', '1500');
  await page.fill('#prompt', 'Count from 1 to 1000, one number per line.');
  await page.click('#send');
  await page.waitForFunction(() => {
    const c = document.querySelector('.msg.assistant.streaming .content');
    return c && c.textContent.length > 20;
  });
  assert.equal(await page.isEnabled('#stop'), true);
  await page.click('#stop');
  await page.waitForSelector('.msg.assistant:not(.streaming) .meta');
  assert.equal(await page.textContent('.msg.assistant .meta'), 'stopped');
  assert.equal(await page.isEnabled('#send'), true);
  // the engine saw the cancel (HTTP disconnect → on_event false)
  const cancelled = await page.evaluate(async () => {
    for (let i = 0; i < 50; i++) {
      const m = await (await fetch('/metrics')).json();
      if (m.engine.cancelled >= 1) return m.engine.cancelled;
      await new Promise((r) => setTimeout(r, 100));
    }
    return 0;
  });
  assert.ok(cancelled >= 1, 'engine cancelled count');
  await shot('stopped.png');
});

test('server errors are shown in words, not JSON', async () => {
  await option('#opt-max-tokens', '16');
  await option('#opt-temperature', '9');
  await page.fill('#prompt', 'hello');
  await page.click('#send');
  await page.waitForSelector('#error-banner:not([hidden])');
  const msg = await page.textContent('#error-banner .msg');
  assert.ok(!msg.includes('{') && /temperature/i.test(msg), msg);
  await page.click('#error-banner .close');
  await option('#opt-temperature', '0');
});

test('settings persist across a reload', async () => {
  await page.click('nav button[data-tab="settings"]');
  await page.fill('#set-port', '9123');
  await page.check('#set-thinking');
  await page.fill('#set-max-draft', '5');
  await page.click('#settings-form button[type="submit"]');
  await page.waitForFunction(() => document.getElementById('settings-status').textContent.startsWith('Saved'));
  await page.reload();
  await page.waitForSelector('body[data-ready="1"]');
  assert.equal(await page.inputValue('#set-port'), '9123');
  assert.equal(await page.isChecked('#set-thinking'), true);
  assert.equal(await page.inputValue('#set-max-draft'), '5');
  // the thinking default carries over to the chat options
  assert.equal(await page.isChecked('#opt-thinking'), true);
  await page.click('nav button[data-tab="settings"]');
  await shot('settings.png');
});

test('the endpoint panel shows the base URL and snippets; models explain the app', async () => {
  await page.click('nav button[data-tab="endpoint"]');
  assert.equal(await page.textContent('#endpoint-url'), base + '/v1');
  assert.match(await page.textContent('#snippet-curl'), /chat\/completions/);
  assert.match(await page.textContent('#snippet-python'), /OpenAI\(base_url=/);
  await shot('endpoint.png');
  await page.click('nav button[data-tab="models"]');
  assert.equal(await page.isVisible('#models-app-only'), true);
  assert.match(await page.textContent('#current-model'), /draft/);
  await shot('models.png');
});
