// A new user's first steps: the new chat's agent picker starts on the agent last used (this
// browser's last new chat, else the most recent session's agent) or, on a server nobody chatted
// with yet, on `demo`; the settings page switches `demo` to a real provider in one form.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { expectStatus, launchBrowser, newPage, screenshot, startServer } from './harness.js';

let server;
let browser;

before(async () => {
  server = await startServer();
  for (const name of ['alpha', 'demo', 'zeta']) {
    const manifest = { model: { name: 'fake/fake-model' }, instructions: 'Help.' };
    await expectStatus(server.api('POST', '/api/v1/agents', { name, manifest }), 201);
  }
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test('the agent picker defaults to demo, then to the agent last used', async () => {
  const listed = await server.api('GET', '/api/v1/agents');
  assert.notEqual(listed.body.data[0].name, 'demo', 'demo is not simply the first agent listed');
  const page = await newPage(browser);
  await page.goto(server.url);
  const picker = page.getByLabel('Agent');
  await page.locator('#agent-picker option[value="demo"]').waitFor({ state: 'attached' });
  assert.equal(await picker.inputValue(), 'demo');
  await screenshot(page, 'picker-01-demo');
  await picker.selectOption('zeta');
  await page.getByRole('textbox', { name: 'Message' }).fill('hello zeta');
  await page.getByRole('textbox', { name: 'Message' }).press('Enter');
  await page.locator('.messages').getByText('You said: hello zeta').waitFor();
  // The next new chat of this browser starts on it.
  await page.getByRole('button', { name: 'New chat' }).click();
  await page.locator('#agent-picker option[value="demo"]').waitFor({ state: 'attached' });
  assert.equal(await page.getByLabel('Agent').inputValue(), 'zeta');
  // So does a browser that never chatted here: the most recent session's agent.
  const other = await newPage(browser);
  await other.goto(server.url);
  await other.locator('#agent-picker option[value="demo"]').waitFor({ state: 'attached' });
  assert.equal(await other.getByLabel('Agent').inputValue(), 'zeta');
  assert.deepEqual([...page.problems, ...other.problems], []);
});

test('the settings page switches the demo agent to a real provider in one form', async () => {
  const fake = (await server.api('GET', '/api/v1/settings/model-providers')).body.data.find((item) => item.name === 'fake');
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/settings`);
  const form = page.getByRole('region', { name: 'Use a real model' });
  await form.getByLabel('Agent').selectOption('demo');
  await form.getByLabel('Provider', { exact: true }).selectOption('custom');
  await form.getByLabel('Provider name').fill('real');
  await form.getByLabel('Base URL').fill(fake.manifest.base_url);
  await form.getByLabel('API key').fill('sk-real-0123456789abcdef');
  await form.getByLabel('Model').fill('fake-model');
  await form.getByRole('button', { name: 'Switch the agent' }).click();
  await form.getByText('The agent demo now uses real/fake-model.').waitFor();
  await screenshot(page, 'picker-02-real-model');
  const demo = await server.api('GET', '/api/v1/agents/demo');
  assert.equal(demo.body.data.manifest.model.name, 'real/fake-model');
  const providers = await server.api('GET', '/api/v1/settings/model-providers');
  assert.ok(providers.body.data.some((item) => item.name === 'real'), 'the provider is added');
  // The demo agent answers through it.
  await page.goto(server.url);
  await page.getByLabel('Agent').selectOption('demo');
  await page.getByRole('textbox', { name: 'Message' }).fill('through the real provider');
  await page.getByRole('textbox', { name: 'Message' }).press('Enter');
  await page.locator('.messages').getByText('You said: through the real provider').waitFor();
  assert.deepEqual(page.problems, []);
});
