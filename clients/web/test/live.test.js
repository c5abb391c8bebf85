// The page subscribes to the live channels instead of polling: changes made through the API by
// another client (a title, a mode and model, a turn and the tasks it writes, a new or deleted
// session) show without a reload, an open session left idle makes no request at all, its two
// channels being the only requests that stay open, and a channel that drops is opened again.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { expectStatus, launchBrowser, newPage, screenshot, startServer, waitFor } from './harness.js';

const AGENT = 'live-helper';
let server;
let browser;

before(async () => {
  server = await startServer();
  const manifest = {
    model: { name: 'fake/fake-model' },
    instructions: 'Help.',
    config: { tasks: { enabled: true } },
    modes: [{ id: 'ask', name: 'Ask', default: true }, { id: 'code', name: 'Code', instructions: 'Write code.' }],
  };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: AGENT, manifest }), 201);
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

// A session made through the API, with one turn run to its end.
async function sessionWithATurn(text) {
  const session = (await expectStatus(server.api('POST', '/api/v1/sessions', { agent: { name: AGENT } }), 201)).data;
  await runTurn(session.id, text);
  return session;
}

// A turn started through the API (not through the page), waited for to its end.
async function runTurn(sessionId, text) {
  const body = { stream: false, input: [{ type: 'user.message', content: text }] };
  const turn = (await expectStatus(server.api('POST', `/api/v1/sessions/${sessionId}/turns`, body), 200)).data;
  await waitFor(async () => (await server.api('GET', `/api/v1/sessions/${sessionId}/turns/${turn.id}`)).body.data.state.status !== 'running');
  return turn;
}

async function rename(sessionId, title) {
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${sessionId}`, { title }), 200);
}

const isChannel = (url) => /\/api\/v1\/(sessions\/[^/]+\/)?live$/.test(new URL(url).pathname);

// An open session's page has loaded once it has read the session's grants (which it does once
// the session's channel sent its first display state), and what stays open is its two channels.
async function sessionPageLoaded(requests) {
  await waitFor(async () => {
    const open = requests.open();
    const grantsRead = requests.made.some((request) => request.url().endsWith('/grants') && requests.ended(request));
    return grantsRead && open.length === 2 && open.every((request) => isChannel(request.url()));
  });
}

// The page's requests: every one made, and those that have finished (or failed).
function watchRequests(page) {
  const made = [];
  const ended = new Set();
  page.on('request', (request) => made.push(request));
  page.on('requestfinished', (request) => ended.add(request));
  page.on('requestfailed', (request) => ended.add(request));
  const describe = (requests) => requests.map((request) => `${request.method()} ${new URL(request.url()).pathname}${new URL(request.url()).search}`);
  return {
    made,
    // The requests still open.
    open: () => made.filter((request) => !ended.has(request)),
    ended: (request) => ended.has(request),
    describe,
  };
}

test('an idle open session makes no requests: its two live channels are the only ones that stay open', async () => {
  const session = await sessionWithATurn('hello idle');
  const page = await newPage(browser);
  // The page's timers run on a clock the test moves: ten minutes of them run at once below.
  await page.clock.install();
  const requests = watchRequests(page);
  await page.goto(`${server.url}/#/chat/${session.id}`);
  await page.locator('.messages').getByText('You said: hello idle').waitFor();
  await sessionPageLoaded(requests);
  // A change made elsewhere reaches the page over both channels (the session bar and the list).
  await rename(session.id, 'First rename');
  await page.locator('.chat-title', { hasText: 'First rename' }).waitFor();
  await page.getByRole('list', { name: 'Sessions list' }).getByRole('link', { name: /First rename/ }).waitFor();
  const settled = requests.made.length;

  // The window: ten minutes of the page's timers (any timed re-fetch would fire in it), then
  // two more changes, each waited for until it shows, so the channels still carry them.
  await page.clock.runFor(10 * 60_000);
  await rename(session.id, 'Second rename');
  await page.locator('.chat-title', { hasText: 'Second rename' }).waitFor();
  await page.getByRole('list', { name: 'Sessions list' }).getByRole('link', { name: /Second rename/ }).waitFor();
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${session.id}`, { mode: 'code' }), 200);
  await waitFor(async () => (await page.getByLabel('Mode', { exact: true }).inputValue()) === 'code');
  await screenshot(page, 'live-01-idle');

  assert.deepEqual(requests.describe(requests.made.slice(settled)), [], 'no request while idle');
  const channels = requests.made.filter((request) => isChannel(request.url()));
  assert.deepEqual(requests.describe(channels).sort(), [`GET /api/v1/live`, `GET /api/v1/sessions/${session.id}/live`].sort(), 'each channel opened once');
  assert.deepEqual(requests.describe(requests.open()).sort(), requests.describe(channels).sort(), 'the channels are the only requests open');
  // Nothing was read twice while the page loaded either.
  const reads = requests.describe(requests.made.filter((request) => request.resourceType() === 'fetch'));
  assert.deepEqual(reads.filter((read, index) => reads.indexOf(read) !== index), [], `each read once: ${reads.join(', ')}`);
  assert.deepEqual(page.problems, []);
});

test('changes made through the API show without a reload: the title in the session bar and the list, the model, a turn another client runs and the tasks it writes', async () => {
  const session = await sessionWithATurn('hello there');
  const page = await newPage(browser);
  const requests = watchRequests(page);
  await page.goto(`${server.url}/#/chat/${session.id}`);
  await page.locator('.messages').getByText('You said: hello there').waitFor();
  await sessionPageLoaded(requests);
  const loaded = requests.made.length;

  await rename(session.id, 'Renamed through the API');
  await page.locator('.chat-title', { hasText: 'Renamed through the API' }).waitFor();
  const list = page.getByRole('list', { name: 'Sessions list' });
  await list.getByRole('link', { name: /Renamed through the API/ }).waitFor();
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${session.id}`, { model: 'fake/fake-model' }), 200);
  await waitFor(async () => (await page.getByLabel('Model').inputValue()) === 'fake/fake-model');
  assert.deepEqual(requests.describe(requests.made.slice(loaded)), [], 'the changes came over the channels');

  // A turn another client runs: the page follows it to its answer, and the task list it writes.
  const tasks = { tasks: [{ title: 'Read the notes', status: 'completed' }, { title: 'Write the answer', status: 'pending' }] };
  await runTurn(session.id, `[tool:task_write ${JSON.stringify(tasks)}] from elsewhere`);
  await page.locator('.messages').getByText('from elsewhere', { exact: false }).first().waitFor();
  await page.getByText('Tasks (1/2 done)').waitFor();
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await screenshot(page, 'live-02-changed-elsewhere');
  assert.equal(await page.locator('article.user').count(), 2, 'both turns, each once');
  assert.deepEqual(page.problems, []);
});

test('an open session deleted through the API says so, and leaves the list', async () => {
  const session = await sessionWithATurn('soon gone');
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/chat/${session.id}`);
  await page.locator('.messages').getByText('You said: soon gone').waitFor();
  const link = page.getByRole('list', { name: 'Sessions list' }).locator(`a[href="#/chat/${session.id}"]`);
  await link.waitFor();
  await expectStatus(server.api('DELETE', `/api/v1/sessions/${session.id}`), 204);
  await page.getByRole('alert').getByText('This session was deleted.').waitFor();
  await waitFor(async () => (await link.count()) === 0);
  await screenshot(page, 'live-03a-deleted-elsewhere');
  assert.deepEqual(page.problems, []);
});

test('a session created through the API appears in the list without a reload, and leaves it when deleted', async () => {
  const page = await newPage(browser);
  const requests = watchRequests(page);
  await page.goto(server.url);
  await page.getByLabel('Agent').waitFor();
  await waitFor(async () => requests.open().length === 1 && isChannel(requests.open()[0].url()));
  const loaded = requests.made.length;

  const made = (await expectStatus(server.api('POST', '/api/v1/sessions', { agent: { name: AGENT }, title: 'Made through the API' }), 201)).data;
  const list = page.getByRole('list', { name: 'Sessions list' });
  const link = list.getByRole('link', { name: /Made through the API/ });
  await link.waitFor();
  assert.equal(await link.getAttribute('href'), `#/chat/${made.id}`);
  await screenshot(page, 'live-03-created-elsewhere');
  await expectStatus(server.api('DELETE', `/api/v1/sessions/${made.id}`), 204);
  await waitFor(async () => (await list.locator(`a[href="#/chat/${made.id}"]`).count()) === 0);
  assert.deepEqual(requests.describe(requests.made.slice(loaded)), [], 'the list was not read again');
  assert.deepEqual(page.problems, []);
});

test('a channel that drops is opened again after a wait, and the list read again shows what changed meanwhile', async () => {
  const page = await newPage(browser);
  const requests = watchRequests(page);
  // The caller's channel: the first answer ends at once (a drop), the second attempt fails,
  // the third is the server's.
  let attempts = 0;
  await page.route('**/api/v1/live', async (route) => {
    attempts += 1;
    if (attempts === 1) await route.fulfill({ status: 200, contentType: 'text/event-stream', body: ': live\n\n' });
    else if (attempts === 2) await route.abort('connectionreset');
    else await route.continue();
  });
  // The sidebar's list (a new chat's agent picker reads `sessions?limit=1` too).
  const lists = () => requests.made.filter((request) => request.url().includes('/api/v1/sessions?limit=25'));
  await page.goto(server.url);
  // The list read when the channel first opened has been answered.
  await waitFor(async () => lists().length === 1 && requests.ended(lists()[0]));
  // Made while the channel is down: the list read when it opens again has it.
  const meanwhile = (await expectStatus(server.api('POST', '/api/v1/sessions', { agent: { name: AGENT }, title: 'Made while the channel was down' }), 201)).data;
  const list = page.getByRole('list', { name: 'Sessions list' });
  await list.locator(`a[href="#/chat/${meanwhile.id}"]`).waitFor();
  assert.equal(attempts, 3, 'opened again after the drop, and again after the failed attempt');
  assert.equal(lists().length, 2, 'the list is read each time the channel opens');
  // And the channel is live again.
  const after = (await expectStatus(server.api('POST', '/api/v1/sessions', { agent: { name: AGENT }, title: 'Made once it was back' }), 201)).data;
  await list.locator(`a[href="#/chat/${after.id}"]`).waitFor();
  assert.equal(lists().length, 2);
  await screenshot(page, 'live-04-reopened');
  assert.deepEqual(page.problems.filter((problem) => !/ERR_CONNECTION_RESET/.test(problem)), []);
});
