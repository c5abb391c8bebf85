// Signing in through a real OpenID Connect provider (tests/oidc-provider: panva's oidc-provider
// with its development login and consent pages): the page offers "Sign in", the browser goes
// through the provider's pages and comes back signed in (the server's `id_token` cookie), the
// chat works as that user, and "Sign out" ends it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { launchBrowser, newPage, screenshot, start, startServer } from './harness.js';

const PROVIDER = path.resolve(import.meta.dirname, '../../../tests/oidc-provider');
const SECRET = 'web-test-client-secret-0123456789';
let provider;
let server;
let browser;

// `npm ci` in tests/oidc-provider unless its node_modules is the lock file's.
function installProvider() {
  const stamp = path.join(PROVIDER, 'node_modules', '.package-lock.sha256');
  const wanted = createHash('sha256').update(readFileSync(path.join(PROVIDER, 'package-lock.json'))).digest('hex');
  if (existsSync(stamp) && readFileSync(stamp, 'utf8').trim() === wanted) return;
  execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--silent'], { cwd: PROVIDER, stdio: 'inherit' });
  writeFileSync(stamp, wanted);
}

// A port nothing listens on now, for the server (the provider must know its redirect URI).
function freePort() {
  return new Promise((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

before(async () => {
  installProvider();
  const port = await freePort();
  const clients = [{ client_id: 'teamster', client_secret: SECRET, redirect_uris: [`http://127.0.0.1:${port}/api/v1/auth/callback`] }];
  provider = await start(process.execPath, [path.join(PROVIDER, 'provider.mjs')], PROVIDER, { ...process.env, OIDC_CLIENTS: JSON.stringify(clients) });
  const secretFile = path.join(tmpdir(), `teamster-web-oidc-${port}.secret`);
  writeFileSync(secretFile, SECRET, { mode: 0o600 });
  server = await startServer({
    auth: true,
    listen: `127.0.0.1:${port}`,
    args: ['--oidc-issuer', provider.url, '--oidc-client-id', 'teamster', '--oidc-client-secret-file', secretFile],
  });
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
  provider?.child.kill();
});

test('a user signs in with the identity provider, chats, and signs out', async () => {
  const page = await newPage(browser);
  await page.goto(server.url);
  const dialog = page.getByRole('dialog', { name: 'Sign in to use this server' });
  await dialog.waitFor();
  await screenshot(page, 'oidc-01-sign-in-offered');
  await dialog.getByRole('link', { name: 'Sign in' }).click();

  // The provider's own pages: any login name and password, then consent.
  await page.waitForURL((url) => url.origin === provider.url);
  await page.locator('input[name="login"]').fill('alice');
  await page.locator('input[name="password"]').fill('any password');
  await screenshot(page, 'oidc-02-provider-login');
  await page.locator('button[type="submit"]').click();
  await page.getByRole('button', { name: 'Continue' }).click();

  await page.waitForURL((url) => url.origin === server.url);
  // The provider's pages fetch a web font from the internet, which is not reachable here.
  page.problems.length = 0;
  await page.getByText('alice@example.com').waitFor();
  assert.equal(await page.getByRole('dialog').count(), 0);
  const cookies = await page.context().cookies(server.url);
  const session = cookies.find((cookie) => cookie.name === 'id_token');
  assert.ok(session?.httpOnly, 'the session cookie is HttpOnly');
  assert.equal(session.sameSite, 'Lax');
  await screenshot(page, 'oidc-03-signed-in');

  // Alice's own agent, made by the page's origin with her cookie (a real browser's POST, its
  // Origin header and all); agents of others need not be hers to run.
  const made = await page.evaluate(async () => {
    const manifest = { model: { name: 'fake/fake-model' }, instructions: 'Help.' };
    const response = await fetch('api/v1/agents', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'alices', manifest }) });
    return response.status;
  });
  assert.equal(made, 201);
  await page.reload();
  await page.getByLabel('Agent').selectOption('alices');
  await page.getByRole('textbox', { name: 'Message' }).fill('signed in');
  await page.getByRole('textbox', { name: 'Message' }).press('Enter');
  await page.getByText('You said: signed in').waitFor();
  await screenshot(page, 'oidc-04-chat');

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('dialog', { name: 'Sign in to use this server' }).waitFor();
  assert.equal((await page.context().cookies(server.url)).some((cookie) => cookie.name === 'id_token'), false);
  assert.deepEqual(page.problems, []);
});

test('a failed sign-in comes back with its reason', async () => {
  const page = await newPage(browser);
  await page.goto(`${server.url}/api/v1/auth/callback?state=forged&code=x`);
  await page.getByRole('alert').getByText('Sign-in failed (invalid_state)').waitFor();
  assert.equal(new URL(page.url()).search, '', 'the marker leaves the address bar');
  await screenshot(page, 'oidc-05-failed');
});
