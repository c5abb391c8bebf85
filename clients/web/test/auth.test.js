// The web UI on a server that needs API keys (`serve --auth api-keys`): the page itself is
// public, the API answers 401 until the user pastes a key, which then goes with every call
// (the chat stream included) and survives a reload.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { expectStatus, launchBrowser, newPage, screenshot, startServer } from './harness.js';

let server;
let browser;

before(async () => {
  server = await startServer({ auth: true });
  const manifest = { model: { name: 'fake/fake-model' }, instructions: 'Help.' };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'keyed', manifest }), 201);
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test('the page loads without a key; the API asks for one, and the chat works with it', async () => {
  const page = await fetch(server.url, { headers: { accept: 'text/html' } });
  assert.equal(page.status, 200, 'the page is public');
  assert.equal((await fetch(`${server.url}/api/v1/agents`)).status, 401, 'the API is not');

  const browserPage = await newPage(browser);
  await browserPage.goto(server.url);
  const dialog = browserPage.getByRole('dialog', { name: 'This server needs an API key' });
  await dialog.waitFor();
  await screenshot(browserPage, 'auth-01-key-asked');
  await dialog.getByLabel('API key').fill(server.key);
  await dialog.getByRole('button', { name: 'Save key' }).click();
  await browserPage.getByLabel('Agent').selectOption('keyed');
  await browserPage.getByRole('textbox', { name: 'Message' }).fill('with a key');
  await browserPage.getByRole('textbox', { name: 'Message' }).press('Enter');
  await browserPage.getByText('You said: with a key').waitFor();
  await screenshot(browserPage, 'auth-02-chat');
  // The key is remembered by the tab: a reload rebuilds the session without asking again.
  await browserPage.reload();
  await browserPage.getByText('You said: with a key').waitFor();
  assert.equal(await browserPage.getByRole('dialog').count(), 0);
  // ... but it is never in localStorage, which any script of the origin reads on any later visit.
  const stored = await browserPage.evaluate(() => ({ local: { ...localStorage }, session: { ...sessionStorage } }));
  assert.ok(!JSON.stringify(stored.local).includes(server.key), 'the key is not in localStorage');
  assert.equal(stored.session['teamster.apiKey'], server.key);
});

test('a key an earlier version left in localStorage moves to the tab and leaves localStorage', async () => {
  const context = await browser.newContext();
  await context.addInitScript((key) => {
    // Only on the first load: the old version's stored key.
    if (!sessionStorage.getItem('seeded')) {
      sessionStorage.setItem('seeded', '1');
      localStorage.setItem('teamster.apiKey', key);
    }
  }, server.key);
  const browserPage = await context.newPage();
  await browserPage.goto(server.url);
  await browserPage.getByLabel('Agent').selectOption('keyed');
  assert.equal(await browserPage.getByRole('dialog').count(), 0, 'the moved key is used');
  const stored = await browserPage.evaluate(() => ({ local: localStorage.getItem('teamster.apiKey'), session: sessionStorage.getItem('teamster.apiKey') }));
  assert.deepEqual(stored, { local: null, session: server.key });
  await context.close();
});

test('a new tab does not inherit the key', async () => {
  const context = await browser.newContext();
  const first = await context.newPage();
  await first.goto(server.url);
  const dialog = first.getByRole('dialog', { name: 'This server needs an API key' });
  await dialog.getByLabel('API key').fill(server.key);
  await dialog.getByRole('button', { name: 'Save key' }).click();
  await first.getByLabel('Agent').selectOption('keyed');
  const second = await context.newPage();
  await second.goto(server.url);
  await second.getByRole('dialog', { name: 'This server needs an API key' }).waitFor();
  await context.close();
});
