// A live `teamster serve` (the debug binary, which embeds the UI) on a fresh SQLite file with the
// fake model as its provider, and headless Chromium (Debian's, never a downloaded one) driven by
// playwright-core. Screenshots go to test-results/.
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const root = path.resolve(import.meta.dirname, '../../..');
const binary = (variable, name) => process.env[variable] ?? path.join(root, 'target/debug', name);
export const RESULTS = path.resolve(import.meta.dirname, '../test-results');

// Starts a program and resolves with the URL of its `listening on` line.
export function start(program, args, cwd, env = process.env) {
  const child = spawn(program, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${program} did not start:\n${output}`)), 30_000);
    const read = (data) => {
      output += data;
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve({ child, url: match[1] });
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => reject(new Error(`${program} exited (${code}):\n${output}`)));
  });
}

// A server with the fake model configured; `auth` starts it with `--auth api-keys` and an
// operator key (returned as `key`); `listen` is its address, `args` more flags of `serve`.
export async function startServer({ auth = false, listen = '127.0.0.1:0', args = [] } = {}) {
  const workdir = mkdtempSync(path.join(tmpdir(), 'teamster-web-'));
  // Sandboxes run as users of their own, who must be able to pass through to the sandbox root.
  chmodSync(workdir, 0o755);
  const database = `sqlite://${workdir}/teamster.sqlite`;
  let key = null;
  if (auth) {
    // The key is the one line it prints on stdout.
    const args = ['keys', '--database', database, 'create', '--subject', 'web-operator', '--role', 'operator'];
    key = execFileSync(binary('TEAMSTER_BIN', 'teamster'), args, { cwd: workdir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  }
  const fake = await start(binary('FAKE_MODEL_BIN', 'fake-model'), ['--listen', '127.0.0.1:0'], workdir);
  let teamster;
  try {
    teamster = await start(binary('TEAMSTER_BIN', 'teamster'), [
      'serve', '--listen', listen, '--database', database,
      '--no-example', '--data-dir', workdir, '--sandbox-root', path.join(workdir, 'sandboxes'),
      ...(auth ? ['--auth', 'api-keys'] : []),
      ...args,
    ], workdir);
  } catch (error) {
    fake.child.kill();
    throw error;
  }
  const server = {
    url: teamster.url,
    key,
    async api(method, route, body) {
      const response = await fetch(`${teamster.url}${route}`, {
        method,
        headers: { 'content-type': 'application/json', ...(key && { authorization: `Bearer ${key}` }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    },
    // Stops both programs, then removes their files (the database, the sandboxes).
    async close() {
      const exited = (child) => (child.exitCode !== null ? null : new Promise((resolve) => child.once('exit', resolve)));
      const waiting = [exited(teamster.child), exited(fake.child)];
      teamster.child.kill();
      fake.child.kill();
      await Promise.all(waiting);
      rmSync(workdir, { recursive: true, force: true });
    },
  };
  const provider = {
    type: 'custom', name: 'fake', base_url: `${fake.url}/v1`, auth: { api_key: 'sk-fake-0123456789abcdef' },
    models: [{ name: 'fake-model', model_id: 'fake-model', properties: {} }],
  };
  await expectStatus(server.api('PUT', '/api/v1/settings/model-providers', { manifest: provider }), 200);
  return server;
}

export async function expectStatus(pending, status) {
  const response = await pending;
  if (response.status !== status) {
    throw new Error(`expected ${status}, got ${response.status}: ${JSON.stringify(response.body)}`);
  }
  return response.body;
}

export async function launchBrowser() {
  mkdirSync(RESULTS, { recursive: true });
  return chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium',
    // Root in a container has no user namespaces for Chromium's own sandbox.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
}

// A page with the errors it logs collected (`page.problems`), at desktop or phone size.
export async function newPage(browser, { phone = false } = {}) {
  const context = await browser.newContext({
    viewport: phone ? { width: 390, height: 800 } : { width: 1280, height: 800 },
    acceptDownloads: true,
  });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (error) => page.problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && !/status of (4\d\d)/.test(message.text())) page.problems.push(`console: ${message.text()}`);
  });
  return page;
}

export async function screenshot(page, name) {
  await page.screenshot({ path: path.join(RESULTS, `${name}.png`), fullPage: true });
}

export async function waitFor(condition, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
