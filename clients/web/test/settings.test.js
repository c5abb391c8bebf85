// The settings page and the agent editor against a server that may start stdio MCP servers: an
// MCP server's connection tested from the page (its tools listed, or why it failed), and, where
// the server offers them, model providers and MCP servers renamed and deleted, and the agent
// editor's "Check" of what a manifest would run with.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { expectStatus, launchBrowser, newPage, screenshot, startServer, waitFor } from './harness.js';

const DESK = path.resolve(import.meta.dirname, 'fixtures/mcp-stdio-server.js');
let server;
let browser;
let routes;

before(async () => {
  server = await startServer({ args: ['--allow-stdio-mcp'] });
  const desk = { type: 'stdio', name: 'desk', description: 'The order desk.', command: process.execPath, args: [DESK] };
  await expectStatus(server.api('PUT', '/api/v1/settings/mcp-servers', { manifest: desk }), 200);
  const broken = { type: 'stdio', name: 'broken', description: 'Exits at once.', command: process.execPath, args: ['-e', 'process.exit(3)'] };
  await expectStatus(server.api('PUT', '/api/v1/settings/mcp-servers', { manifest: broken }), 200);
  routes = (await server.api('GET', '/api/v1/openapi.json')).body.paths;
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test('an MCP server is tested from the settings: its tools listed, or why it failed', async () => {
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/settings`);
  const mcp = page.getByRole('region', { name: 'MCP servers' });
  await mcp.getByRole('button', { name: 'Test desk' }).click();
  await mcp.getByText(/^Connected in \d+ ms: 2 tools\.$/).waitFor();
  const tools = mcp.getByRole('list', { name: 'Tools of desk' });
  assert.deepEqual(await tools.locator('.tool-name').allTextContents(), ['lookup_order', 'refund_order']);
  await tools.getByText('Looks an order up by its number.').waitFor();
  await mcp.getByRole('button', { name: 'Test broken' }).click();
  await mcp.getByRole('alert').getByText(/^broken failed: ./).waitFor();
  await screenshot(page, 'settings-01-mcp-tested');
  // The broken server's 502 is the answer the page expected.
  assert.deepEqual(page.problems.filter((problem) => !/status of 502/.test(problem)), []);
});

const undoable = (route) => Boolean(routes?.[route]?.delete && routes?.[route]?.patch);

test('model providers and MCP servers are renamed and deleted from the settings', async (t) => {
  if (!undoable('/api/v1/settings/model-providers/{name}') || !undoable('/api/v1/settings/mcp-servers/{name}')) {
    t.skip('the server has no DELETE and PATCH of settings yet');
    return;
  }
  const fake = (await server.api('GET', '/api/v1/settings/model-providers')).body.data.find((item) => item.name === 'fake');
  const spare = { ...fake.manifest, name: 'spare', auth: { api_key: 'sk-fake-0123456789abcdef' } };
  await expectStatus(server.api('PUT', '/api/v1/settings/model-providers', { manifest: spare }), 200);
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/settings`);
  const providers = page.getByRole('region', { name: 'Model providers' });
  await providers.getByRole('button', { name: 'Rename spare' }).click();
  await providers.getByLabel('New name for spare').fill('extra');
  await providers.getByRole('button', { name: 'Rename', exact: true }).click();
  await providers.getByRole('button', { name: 'extra', exact: true }).waitFor();
  const names = async (route) => (await server.api('GET', route)).body.data.map((item) => item.name);
  assert.ok((await names('/api/v1/settings/model-providers')).includes('extra'));
  page.once('dialog', (dialog) => dialog.accept());
  await providers.getByRole('button', { name: 'Delete extra' }).click();
  await providers.getByRole('button', { name: 'extra', exact: true }).waitFor({ state: 'detached' });
  assert.ok(!(await names('/api/v1/settings/model-providers')).includes('extra'));

  const mcp = page.getByRole('region', { name: 'MCP servers' });
  await mcp.getByRole('button', { name: 'Rename broken' }).click();
  await mcp.getByLabel('New name for broken').fill('gone');
  await mcp.getByRole('button', { name: 'Rename', exact: true }).click();
  await mcp.getByRole('button', { name: 'gone', exact: true }).waitFor();
  await screenshot(page, 'settings-02-renamed');
  page.once('dialog', (dialog) => dialog.accept());
  await mcp.getByRole('button', { name: 'Delete gone' }).click();
  await mcp.getByRole('button', { name: 'gone', exact: true }).waitFor({ state: 'detached' });
  assert.deepEqual(await names('/api/v1/settings/mcp-servers'), ['desk']);
  assert.deepEqual(page.problems, []);
});

test('the agent editor\'s Check shows what the manifest would run with: tools, approvals, servers, problems', async (t) => {
  if (!routes?.['/api/v1/agents/check']?.post) {
    t.skip('the server has no POST /api/v1/agents/check yet');
    return;
  }
  const manifest = {
    model: { name: 'fake/fake-model' },
    instructions: 'Help with orders.',
    mcp_servers: [{ type: 'truefoundry-mcp-registry', name: 'desk', require_approval_for_tools: ['refund_order'] }],
  };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'support', manifest }), 201);
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/agents/support`);
  await page.getByRole('radio', { name: 'JSON' }).check();
  await page.getByRole('button', { name: 'Check' }).click();
  const report = page.getByRole('region', { name: 'Check report' });
  await report.getByText('Saving would succeed.').waitFor();
  await report.getByRole('list', { name: 'MCP servers' }).getByText('connected, 2 tools').waitFor();
  const tools = report.getByRole('table', { name: 'Tools' });
  assert.equal(await tools.locator('tr', { hasText: 'refund_order' }).locator('td:nth-child(3)').textContent(), 'asks');
  assert.equal(await tools.locator('tr', { hasText: 'lookup_order' }).locator('td:nth-child(3)').textContent(), 'runs at once');
  await screenshot(page, 'settings-03-agent-checked');
  // A model the providers do not have is a problem named at its key, and nothing is saved.
  const editor = page.getByRole('textbox', { name: 'Manifest' });
  await editor.fill(JSON.stringify({ ...manifest, model: { name: 'nowhere/none' } }, null, 2));
  await page.getByRole('button', { name: 'Check' }).click();
  await report.getByText(/^Saving would be refused/).waitFor();
  await report.locator('p.error', { hasText: 'model.name' }).first().waitFor();
  assert.equal((await server.api('GET', '/api/v1/agents/support')).body.data.manifest.model.name, 'fake/fake-model');
  assert.deepEqual(page.problems, []);
});

test('the agent editor checks the manifest against the schema as it is typed, and completes keys', async (t) => {
  if (!routes?.['/api/v1/schemas/agent-manifest.json']?.get) {
    t.skip('the server publishes no manifest schema yet');
    return;
  }
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'typist', manifest: { model: { name: 'fake/fake-model' } } }), 201);
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/agents/typist`);
  await page.getByRole('radio', { name: 'YAML' }).check();
  const editor = page.getByRole('textbox', { name: 'Manifest' });
  await editor.fill('model:\n  name: fake/fake-model\ninstrucions: Help.\nconfig:\n  sandbox:\n    enabld: true\n');
  const problems = page.getByRole('list', { name: 'Schema problems' });
  await problems.getByText('did you mean instructions?').waitFor();
  await problems.locator('li', { hasText: 'config.sandbox.enabld' }).getByText('did you mean enabled?').waitFor();
  assert.equal(await editor.getAttribute('aria-invalid'), 'true');
  await screenshot(page, 'settings-04-schema-as-typed');
  // A key being typed is completed from the keys the schema allows there.
  await editor.fill('model:\n  name: fake/fake-model\nconfig:\n  sandbox:\n    ena');
  const complete = page.getByRole('group', { name: 'Complete the key' });
  await complete.getByRole('button', { name: 'enabled', exact: true }).click();
  assert.equal(await editor.inputValue(), 'model:\n  name: fake/fake-model\nconfig:\n  sandbox:\n    enabled: ');
  // Back at the top level, the manifest's own keys. A completion gives the editor its focus
  // back once it has rendered: typed before that, a key went to the button (seen under load).
  const focused = () => waitFor(() => editor.evaluate((element) => document.activeElement === element));
  await focused();
  await page.keyboard.type('true\ninstr');
  await complete.getByRole('button', { name: 'instructions', exact: true }).click();
  await focused();
  await page.keyboard.type('Help.');
  assert.match(await editor.inputValue(), /\ninstructions: Help\.$/);
  await problems.waitFor({ state: 'detached' });
  assert.equal(await editor.getAttribute('aria-invalid'), null);
  assert.deepEqual(page.problems, []);
});
