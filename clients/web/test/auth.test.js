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
  // The key is remembered: a reload rebuilds the session without asking again.
  await browserPage.reload();
  await browserPage.getByText('You said: with a key').waitFor();
  assert.equal(await browserPage.getByRole('dialog').count(), 0);
});
