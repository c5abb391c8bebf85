// The web chat UI served by `teamster serve` at /, driven in headless Chromium against a live
// server on the fake model: each test keeps a screenshot of its steps in test-results/.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { expectStatus, launchBrowser, newPage, screenshot, startServer, waitFor } from './harness.js';

const AGENT = 'helper';
let server;
let browser;

before(async () => {
  server = await startServer();
  const manifest = {
    model: { name: 'fake/fake-model' },
    instructions: 'Help.',
    config: { ask_user_questions: { enabled: true }, sandbox: { enabled: true } },
  };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: AGENT, manifest }), 201);
  const planner = { model: { name: 'fake/fake-model' }, instructions: 'Plan.', config: { tasks: { enabled: true } } };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'planner', manifest: planner }), 201);
  const modal = {
    model: { name: 'fake/fake-model' },
    instructions: 'Code.',
    config: { tasks: { enabled: true } },
    modes: [
      { id: 'plan', name: 'Plan', instructions: 'Plan first.', tools: ['task_check'], transitions_to: 'build', default: true },
      { id: 'build', name: 'Build', instructions: 'Build it.' },
    ],
  };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'modal', manifest: modal }), 201);
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

// A page on a new chat with the agent picked.
async function openChat(options, agent = AGENT) {
  const page = await newPage(browser, options);
  await page.goto(server.url);
  await page.getByLabel('Agent').selectOption(agent);
  return page;
}

async function send(page, text) {
  await page.getByRole('textbox', { name: 'Message' }).fill(text);
  await page.getByRole('textbox', { name: 'Message' }).press('Enter');
}

// The chat (session) id the page shows in its URL.
function chatId(page) {
  return decodeURIComponent(new URL(page.url()).hash.replace('#/chat/', ''));
}

// Waits until the UI has titled the session after its first message: a PATCH of the test's
// own made meanwhile could be lost (the server's session update is read, modify, write).
async function titled(page) {
  await waitFor(async () => Boolean((await server.api('GET', `/api/v1/sessions/${chatId(page)}`)).body.data?.title));
}

async function latestTurn(id) {
  const { body } = await server.api('GET', `/api/v1/sessions/${id}/turns?limit=1`);
  return body.data[0];
}

function noProblems(page) {
  assert.deepEqual(page.problems, [], 'the page logged no errors');
}

test('the page is served at / with its assets, public, and API paths stay the API', async () => {
  const page = await fetch(server.url, { headers: { accept: 'text/html' } });
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.equal(page.headers.get('cache-control'), 'no-cache');
  assert.match(page.headers.get('content-security-policy'), /default-src 'self'/);
  const html = await page.text();
  const script = /src="\.\/(assets\/[^"]+\.js)"/.exec(html)[1];
  const asset = await fetch(`${server.url}/${script}`);
  assert.equal(asset.status, 200);
  assert.match(asset.headers.get('content-type'), /^text\/javascript/);
  assert.match(asset.headers.get('cache-control'), /immutable/);
  const again = await fetch(`${server.url}/${script}`, { headers: { 'if-none-match': asset.headers.get('etag') } });
  assert.equal(again.status, 304);
  // A browser navigating to a path of the UI gets the page; API paths are never the page.
  assert.equal((await fetch(`${server.url}/some/where`, { headers: { accept: 'text/html' } })).status, 200);
  const api = await fetch(`${server.url}/api/v1/nothing-here`, { headers: { accept: 'text/html' } });
  assert.equal(api.status, 404);
  assert.match(api.headers.get('content-type'), /json/);
});

test('send a message and see the text stream in, with reasoning collapsed', async () => {
  const page = await openChat();
  await screenshot(page, '01-new-chat');
  await send(page, '[reasoning] [delay:60][tokens:25]');
  // Part of the answer shows while the turn still runs (the stop button is up).
  await page.locator('.messages').getByText('tok3', { exact: false }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Stop' }).isVisible(), true, 'streaming: the stop button shows');
  assert.equal(await page.locator('.messages').getByText('tok25').count(), 0, 'not the whole answer yet');
  await screenshot(page, '02-streaming');
  await page.locator('.messages').getByText('tok25', { exact: false }).waitFor();
  await page.getByRole('button', { name: 'Send' }).waitFor();
  const reasoning = page.locator('details.reasoning');
  assert.equal(await reasoning.getAttribute('open'), null, 'reasoning starts collapsed');
  await reasoning.locator('summary').click();
  await page.locator('.messages').getByText('Let me think.').waitFor();
  await screenshot(page, '03-streamed');
  // The session is listed, titled after its first message, and found by a search.
  const sessions = page.getByRole('list', { name: 'Sessions list' });
  await sessions.getByRole('link', { name: /\[reasoning\] \[delay:60\]\[tokens:25\]/ }).waitFor();
  await page.getByRole('searchbox', { name: 'Search sessions' }).fill('REASONING tokens:25');
  await waitFor(async () => (await sessions.getByRole('link').count()) === 1);
  assert.equal(await sessions.getByRole('link').getAttribute('href'), `#/chat/${chatId(page)}`);
  await page.getByRole('searchbox', { name: 'Search sessions' }).fill('no such words');
  await page.getByText('No session matches.').waitFor();
  noProblems(page);
});

test('answers and messages render Markdown: headings, lists, tables, highlighted code with a copy button, safe links only, no raw HTML', async () => {
  const page = await openChat();
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  const markdown = [
    '[delay:40] **bold** start.',
    '',
    '## Heading two',
    '',
    '- apple',
    '- pear',
    '',
    '| fruit | count |',
    '|---|---|',
    '| fig | 3 |',
    '',
    '```js',
    'const answer = 42;',
    '```',
    '',
    '[safe](https://example.com/) and [evil](javascript:alert(1)) and <b>raw</b> <img src=x onerror=alert(1)>',
    '',
    'the end',
  ].join('\n');
  await send(page, markdown);
  const answer = page.locator('article.assistant .markdown');
  // While the answer streams, the blocks already complete keep their elements: only the last
  // block is rendered again.
  await answer.locator('h2', { hasText: 'Heading two' }).waitFor();
  await page.evaluate(() => {
    window.firstBlock = document.querySelector('article.assistant .markdown p');
  });
  await answer.getByText('the end').waitFor();
  await page.getByRole('button', { name: 'Send' }).waitFor();
  assert.equal(await page.evaluate(() => window.firstBlock.isConnected && window.firstBlock.textContent), 'You said: [delay:40] bold start.');
  assert.equal(await answer.locator('strong', { hasText: 'bold' }).count(), 1);
  assert.deepEqual(await answer.locator('ul li').allTextContents(), ['apple', 'pear']);
  assert.deepEqual(await answer.locator('table th').allTextContents(), ['fruit', 'count']);
  assert.deepEqual(await answer.locator('table td').allTextContents(), ['fig', '3']);
  const code = answer.locator('pre code.language-js');
  assert.equal(await code.textContent(), 'const answer = 42;\n');
  assert.equal(await code.locator('.hljs-keyword', { hasText: 'const' }).count(), 1, 'the code is highlighted');
  const safe = answer.getByRole('link', { name: 'safe' });
  assert.equal(await safe.getAttribute('href'), 'https://example.com/');
  assert.equal(await safe.getAttribute('target'), '_blank');
  assert.match(await safe.getAttribute('rel'), /noopener/);
  // The javascript: link is inert text, and raw HTML shows as text.
  assert.equal(await page.locator('a[href^="javascript"], .markdown b, .markdown img').count(), 0);
  assert.equal(await answer.getByRole('link', { name: 'evil' }).count(), 0);
  await answer.getByText('[evil](javascript:alert(1))').waitFor();
  await answer.getByText('<b>raw</b>').waitFor();
  // The user's own message is Markdown too.
  await page.locator('article.user .markdown h2', { hasText: 'Heading two' }).waitFor();
  await screenshot(page, '03a-markdown');
  await answer.getByRole('button', { name: 'Copy code' }).click();
  await answer.getByRole('button', { name: 'Copy code' }).getByText('Copied').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'const answer = 42;\n');
  // The history rebuilt after a reload renders the same.
  await page.reload();
  await page.locator('article.assistant .markdown table td', { hasText: 'fig' }).waitFor();
  noProblems(page);
});

test('approve a gated tool', async () => {
  const page = await openChat();
  await send(page, 'hi');
  await page.locator('.messages').getByText('You said: hi').waitFor();
  await titled(page);
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${chatId(page)}`, { permissions: { tools: { get_current_datetime: 'ask' } } }), 200);
  await send(page, '[tool:get_current_datetime]');
  await page.getByRole('group', { name: 'Approve get_current_datetime?' }).waitFor();
  await screenshot(page, '04-approval-asked');
  await page.getByRole('button', { name: 'Approve' }).click();
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await screenshot(page, '05-approved');
  assert.equal((await latestTurn(chatId(page))).state.status, 'done');
  noProblems(page);
});

test('answer a question', async () => {
  const page = await openChat();
  const question = { question: 'Which colour?', options: [{ label: 'Blue' }, { label: 'Red', description: 'warm' }] };
  await send(page, `[tool:ask_user_question ${JSON.stringify(question)}]`);
  await page.getByRole('group', { name: 'Which colour?' }).waitFor();
  await screenshot(page, '06-question');
  await page.getByRole('radio', { name: 'Red' }).check();
  await page.getByRole('button', { name: 'Answer' }).click();
  await page.locator('.messages').getByText('Tool result: Red').waitFor();
  await screenshot(page, '07-answered');
  noProblems(page);
});

test('after a reload, a waiting approval and a waiting question are still answerable', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, 'hi');
  await chat.getByText('You said: hi').waitFor();
  await titled(page);
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${chatId(page)}`, { permissions: { tools: { get_current_datetime: 'ask' } } }), 200);
  await send(page, '[tool:get_current_datetime]');
  await page.getByRole('group', { name: 'Approve get_current_datetime?' }).waitFor();
  await page.reload();
  await page.getByRole('textbox', { name: 'Reason to deny' }).fill('not now');
  await page.getByRole('button', { name: 'Deny' }).click();
  await chat.getByText(/^Tool result: .*not now/).waitFor();
  await chat.locator('.badge', { hasText: 'denied' }).waitFor();
  await send(page, '[tool:ask_user_question {"question": "Your name?"}]');
  await page.getByRole('group', { name: 'Your name?' }).waitFor();
  await page.reload();
  await page.getByRole('textbox', { name: 'Your answer' }).fill('Ada');
  await page.getByRole('button', { name: 'Answer' }).click();
  await chat.getByText('Tool result: Ada').waitFor();
  await screenshot(page, '08a-answered-after-reload');
  assert.equal((await latestTurn(chatId(page))).state.status, 'done');
  noProblems(page);
});

test('a sub-agent\'s gated call is approved in the chat, also after a reload', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, 'hi');
  await chat.getByText('You said: hi').waitFor();
  await titled(page);
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${chatId(page)}`, { permissions: { tools: { get_current_datetime: 'ask' } } }), 200);
  const spawn = (name) => `[tool:run_sub_agent {"name": "${name}", "task": "[tool:get_current_datetime]"}]`;
  await send(page, spawn('clock'));
  await page.getByRole('group', { name: 'Approve get_current_datetime?' }).waitFor();
  await screenshot(page, '08b-sub-agent-approval');
  await page.getByRole('button', { name: 'Approve' }).click();
  await chat.locator('details.thread', { hasText: 'clock' }).locator('.badge', { hasText: 'done' }).waitFor();
  await chat.getByText(/^Tool result: Tool result: /).waitFor();
  // Asked again, then reloaded: the rebuilt history asks too.
  await send(page, spawn('watch'));
  await page.getByRole('group', { name: 'Approve get_current_datetime?' }).waitFor();
  await page.reload();
  await page.getByRole('button', { name: 'Approve' }).click();
  await chat.locator('details.thread', { hasText: 'watch' }).locator('.badge', { hasText: 'done' }).waitFor();
  assert.equal((await latestTurn(chatId(page))).state.status, 'done');
  noProblems(page);
});

test('attach a file: the agent reads it in its sandbox', async () => {
  const page = await openChat();
  await page.getByLabel('Attach').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('seven apples\n') });
  await page.getByRole('list', { name: 'Attached files' }).getByText('notes.txt').waitFor();
  await screenshot(page, '08-attached');
  await send(page, '[tool:exec {"command": "cat /workspace/attachments/notes.txt"}]');
  await page.locator('.file-chip', { hasText: 'notes.txt' }).waitFor();
  await page.locator('.messages').getByText(/Tool result: .*seven apples/).waitFor();
  await screenshot(page, '09-attachment-read');
  noProblems(page);
});

test('download a file the agent made', async () => {
  const page = await openChat();
  await send(page, '[tool:exec {"command": "printf \'made in the sandbox\' > /workspace/report.txt"}]');
  const button = page.getByRole('button', { name: 'Download /workspace/report.txt' });
  await button.waitFor();
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await screenshot(page, '10-download-offered');
  const [download] = await Promise.all([page.waitForEvent('download'), button.click()]);
  assert.equal(download.suggestedFilename(), 'report.txt');
  assert.equal(await readFile(await download.path(), 'utf8'), 'made in the sandbox');
  await page.getByText('Downloaded report.txt.').waitFor();
  await page.getByText('(19 B)').waitFor();
  await screenshot(page, '11-downloaded');
  // The rebuilt history offers it too.
  await page.reload();
  await page.getByRole('button', { name: 'Download /workspace/report.txt' }).waitFor();
  noProblems(page);
});

test('folders are not offered for download: the files in them are', async () => {
  const page = await openChat();
  await send(page, '[tool:exec {"command": "mkdir -p /workspace/out && printf made > /workspace/out/a.txt"}]');
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await page.getByRole('button', { name: 'Download /workspace/out/a.txt' }).first().waitFor();
  assert.equal(await page.getByRole('button', { name: 'Download /workspace/out', exact: true }).count(), 0, 'the folder is not offered');
  await page.locator('summary', { hasText: 'Workspace' }).click();
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByText('/workspace/ is a folder: name a file in it').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Download /workspace/', exact: true }).count(), 0);
  await screenshot(page, '11a-folder-not-offered');
  noProblems(page);
});

test('the workspace panel shows its status, browses its files and destroys it', async () => {
  const page = await openChat();
  await send(page, '[tool:exec {"command": "mkdir -p /workspace/src && printf hello > /workspace/src/a.txt"}]');
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await page.locator('summary', { hasText: 'Workspace' }).click();
  const panel = page.locator('details.workspace');
  await panel.getByRole('status').getByText('Workspace ready').waitFor();
  await panel.getByRole('button', { name: 'src/' }).click();
  const file = panel.getByRole('button', { name: 'Download /workspace/src/a.txt' });
  await file.waitFor();
  await panel.getByText('(5 B)').waitFor();
  await screenshot(page, '11b-workspace-browsed');
  const [download] = await Promise.all([page.waitForEvent('download'), file.click()]);
  assert.equal(await readFile(await download.path(), 'utf8'), 'hello');
  await panel.getByRole('button', { name: '.. (up)' }).click();
  await panel.getByRole('button', { name: 'src/' }).waitFor();
  await panel.getByRole('button', { name: 'Destroy workspace' }).click();
  await panel.getByRole('status').getByText('Workspace destroyed').waitFor();
  assert.equal(await panel.getByRole('button', { name: 'src/' }).count(), 0, 'its files are gone');
  await screenshot(page, '11c-workspace-destroyed');
  await panel.getByRole('button', { name: 'Prepare workspace' }).click();
  await panel.getByRole('status').getByText('Workspace ready').waitFor();
  await panel.getByText('No files.').waitFor();
  noProblems(page);
});

test('what a running command prints shows before it ends', async () => {
  const page = await openChat();
  await send(page, '[tool:exec {"command": "echo first line; sleep 4; echo second line"}]');
  const output = page.getByRole('log', { name: 'Output of exec' });
  await output.getByText('first line').waitFor();
  assert.equal(await page.locator('.messages').getByText(/^Tool result: /).count(), 0, 'the command still runs');
  await screenshot(page, '11d-output-streaming');
  await page.locator('.messages').getByText(/^Tool result: .*second line/).waitFor();
  assert.equal(await output.count(), 0, 'the result replaces the output');
  noProblems(page);
});

test('a sub-agent\'s card shows its own tool calls', async () => {
  const page = await openChat();
  await send(page, '[tool:run_sub_agent {"name": "clock", "task": "[tool:get_current_datetime]"}]');
  const thread = page.locator('details.thread', { hasText: 'clock' });
  await thread.locator('.badge', { hasText: 'done' }).first().waitFor();
  await thread.locator('summary').first().click();
  const calls = page.getByRole('list', { name: 'Tool calls of clock' });
  await calls.getByText('get_current_datetime').click();
  await calls.getByText(/^\d{4}-\d\d-\d\dT/).waitFor();
  await screenshot(page, '20a-sub-agent-calls');
  noProblems(page);
});

test('reload mid-stream: the turn goes on and the page resumes it to the end', async () => {
  const page = await openChat();
  await send(page, '[delay:100][tokens:30]');
  await page.locator('.messages').getByText('tok3', { exact: false }).waitFor();
  const id = chatId(page);
  await screenshot(page, '12-before-reload');
  await page.reload();
  // The history comes back and the resumed stream goes on to the end.
  await page.locator('.messages').getByText('[delay:100][tokens:30]').waitFor();
  await page.locator('.messages').getByText('tok30', { exact: false }).waitFor({ timeout: 20_000 });
  await screenshot(page, '13-resumed');
  await waitFor(async () => (await latestTurn(id)).state.status === 'done');
  const text = await page.locator('article.assistant .text').allTextContents();
  assert.equal(text.join('').trim(), Array.from({ length: 30 }, (_, index) => `tok${index + 1}`).join(' '), 'each token once');
  noProblems(page);
});

test('stop cancels the running turn', async () => {
  const page = await openChat();
  await send(page, '[delay:200][tokens:50]');
  await page.locator('.messages').getByText('tok2', { exact: false }).waitFor();
  await page.getByRole('button', { name: 'Stop' }).click();
  await page.getByRole('button', { name: 'Send' }).waitFor();
  await page.locator('.messages').getByText('Cancelled.').waitFor();
  await waitFor(async () => (await latestTurn(chatId(page))).state.status === 'cancelled');
  // After a reload the history says so too.
  await page.reload();
  await page.locator('.messages').getByText('Cancelled.').waitFor();
  await screenshot(page, '14-stopped');
});

test('stop after a steer: no new turn starts, and the page shows the true state without a reload', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, '[delay:150][tokens:60]');
  await chat.getByText('tok2', { exact: false }).waitFor();
  const id = chatId(page);
  await send(page, 'steered, then stopped');
  await chat.getByText('Sent to the running turn: steered, then stopped').waitFor();
  await page.getByRole('button', { name: 'Stop' }).click();
  await page.getByRole('button', { name: 'Send' }).waitFor();
  await chat.getByText('Cancelled.').waitFor();
  const statuses = async () => (await server.api('GET', `/api/v1/sessions/${id}/turns?limit=10`)).body.data.map((turn) => turn.state.status);
  await waitFor(async () => !(await statuses()).includes('running'));
  assert.deepEqual(await statuses(), ['cancelled'], 'the steer started no turn of its own');
  // The next message is the next turn: nothing ran the steer behind the user's back meanwhile.
  await send(page, 'after the stop');
  await chat.getByText('You said: after the stop').waitFor();
  await page.getByRole('button', { name: 'Send' }).waitFor();
  assert.deepEqual(await statuses(), ['done', 'cancelled'], 'the cancelled turn, then the new one');
  const shown = async () => page.locator('article').evaluateAll((articles) =>
    articles.map((article) => `${article.getAttribute('aria-label')}: ${article.querySelector('.text')?.textContent.trim().split(' ')[0] ?? ''}`));
  const live = await shown();
  await screenshot(page, '14a-stopped-after-steer');
  await page.reload();
  await chat.getByText('You said: after the stop').waitFor();
  assert.deepEqual(await shown(), live, 'a reload shows what the page showed');
  noProblems(page);
});

test('a session opens with its history rebuilt', async () => {
  const first = await openChat();
  await send(first, '[tool:get_current_datetime]');
  await first.locator('.messages').getByText(/^Tool result: /).waitFor();
  const id = chatId(first);
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/chat/${id}`);
  const chat = page.locator('.messages');
  await chat.getByText('[tool:get_current_datetime]').waitFor();
  await chat.getByText('get_current_datetime', { exact: true }).waitFor();
  await chat.getByText(/^Tool result: /).waitFor();
  await screenshot(page, '15-history');
  // Deleting it (after the confirmation) leaves a new chat, and the session is gone.
  page.once('dialog', (dialog) => dialog.accept());
  await page.getByRole('button', { name: 'Delete session' }).click();
  // The page leaves the session once the server answered the DELETE (the agent picker may be
  // on the page before that).
  await waitFor(async () => !page.url().includes(id));
  await page.getByLabel('Agent').waitFor();
  assert.equal((await server.api('GET', `/api/v1/sessions/${id}`)).status, 404);
  await waitFor(async () => (await page.locator(`a[href="#/chat/${id}"]`).count()) === 0);
  noProblems(page);
});

test('a sub-agent thread and the task list show, live and after a reload', async () => {
  const page = await openChat({}, 'planner');
  const tasks = { tasks: [{ title: 'Read the file', status: 'completed' }, { title: 'Write the report', status: 'in_progress' }] };
  await send(page, `[tool:task_write ${JSON.stringify(tasks)}] [tool:run_sub_agent {"name": "scout", "task": "look around"}]`);
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await page.getByText('Tasks (1/2 done)').waitFor();
  const thread = page.locator('details.thread');
  await thread.locator('summary').click();
  await thread.getByText('You said: look around').waitFor();
  await screenshot(page, '20-sub-agent-and-tasks');
  await page.reload();
  await page.locator('details.thread summary').click();
  await page.locator('details.thread').getByText('You said: look around').waitFor();
  await page.getByText('Tasks (1/2 done)').waitFor();
  noProblems(page);
});

test('a plan: rejected with feedback, then approved, switches the mode; the plans panel lists both', async () => {
  const page = await openChat({}, 'modal');
  const chat = page.locator('.messages');
  await send(page, '[tool:submit_plan {"title": "Fix the bug", "plan": "1. read\\n2. fix"}]');
  await page.getByRole('group', { name: 'Approve the plan?' }).waitFor();
  await chat.getByText('Fix the bug', { exact: true }).waitFor();
  // The plan's body is Markdown: its numbered steps are a list.
  assert.deepEqual(await chat.locator('.plan ol li').allTextContents(), ['read', 'fix']);
  assert.equal(await page.getByLabel('Mode', { exact: true }).inputValue(), 'plan');
  await screenshot(page, '21-plan-asked');
  await page.getByRole('textbox', { name: 'Feedback on the plan' }).fill('add a test');
  await page.getByRole('button', { name: 'Reject plan' }).click();
  await chat.getByText(/^Tool result: .*add a test/).waitFor();
  await send(page, '[tool:submit_plan {"title": "Fix the bug, tested", "plan": "1. test\\n2. fix"}]');
  await page.getByRole('button', { name: 'Approve plan' }).click();
  await chat.getByText(/^Tool result: The user approved the plan/).waitFor();
  await waitFor(async () => (await page.getByLabel('Mode', { exact: true }).inputValue()) === 'build');
  await page.getByText('Plans (2)').click();
  await page.locator('.plan', { hasText: 'Fix the bug, tested' }).getByText('executed').waitFor();
  await screenshot(page, '22-plan-approved');
  noProblems(page);
});

test('the turn inspector shows a tool turn as a timeline of model and tool calls with timings, tokens, cost and raw events', async () => {
  // A model with prices, so that calls cost something.
  const fake = (await server.api('GET', '/api/v1/settings/model-providers')).body.data.find((item) => item.name === 'fake');
  const pricing = { input_per_million: 1000, output_per_million: 3000 };
  const provider = {
    type: 'custom', name: 'priced', base_url: fake.manifest.base_url, auth: { api_key: 'sk-fake-0123456789abcdef' },
    models: [{ name: 'fake-model', model_id: 'fake-model', properties: { pricing } }],
  };
  await expectStatus(server.api('PUT', '/api/v1/settings/model-providers', { manifest: provider }), 200);
  const manifest = { model: { name: 'priced/fake-model' }, instructions: 'Help.', config: { sandbox: { enabled: true } } };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'priced', manifest }), 201);
  const page = await openChat({}, 'priced');
  await send(page, '[tool:get_current_datetime]');
  await page.locator('.messages').getByText(/^Tool result: /).waitFor();
  await page.getByRole('button', { name: 'Send' }).waitFor();
  await page.getByRole('button', { name: 'Inspect turns' }).click();
  const inspector = page.getByRole('region', { name: 'Turn inspector' });
  const steps = inspector.locator('tbody tr');
  await steps.last().getByText('turn done').waitFor();
  const labels = await steps.locator('td:nth-child(2)').allTextContents();
  assert.deepEqual(labels, ['turn starts', 'sandbox created', 'model call → get_current_datetime', 'tool get_current_datetime', 'model call → answer', 'turn done']);
  const model = steps.nth(2);
  assert.match(await model.locator('td:nth-child(3)').textContent(), /^\d+(\.\d+)? m?s$/, 'the model call took a time');
  assert.match(await model.locator('td:nth-child(4)').textContent(), /^\d+ in · \d+ out$/);
  assert.match(await steps.last().locator('td:nth-child(4)').textContent(), /^\d+ in · \d+ out$/, 'the turn\'s totals');
  // Each model call's cost at the model's prices; together, the turn's cost as the server has it.
  let sum = 0;
  for (const index of [2, 4]) {
    const [input, output] = (await steps.nth(index).locator('td:nth-child(4)').textContent()).match(/\d+/g).map(Number);
    const cost = (input * pricing.input_per_million + output * pricing.output_per_million) / 1e6;
    assert.equal(await steps.nth(index).locator('td:nth-child(5)').textContent(), `$${cost.toFixed(6)}`);
    sum += cost;
  }
  assert.equal(await steps.last().locator('td:nth-child(5)').textContent(), `$${sum.toFixed(6)}`);
  await steps.nth(3).getByText('raw').click();
  assert.match(await steps.nth(3).locator('pre').textContent(), /"type": "tool.response"/);
  await screenshot(page, '25-inspector');
  noProblems(page);
});

test('always allow: the approval grants the tool for the session, the next call runs unasked, the grant is revoked', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, 'hi');
  await chat.getByText('You said: hi').waitFor();
  await titled(page);
  const id = chatId(page);
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${id}`, { permissions: { tools: { get_current_datetime: 'ask' } } }), 200);
  await send(page, '[tool:get_current_datetime]');
  await page.getByRole('group', { name: 'Approve get_current_datetime?' }).waitFor();
  await page.getByRole('button', { name: 'Always allow' }).click();
  await chat.getByText(/^Tool result: /).waitFor();
  const grants = await server.api('GET', `/api/v1/sessions/${id}/grants`);
  assert.deepEqual(grants.body.data.map((grant) => grant.tool), ['get_current_datetime']);
  await page.getByRole('button', { name: 'Send' }).waitFor();
  await send(page, '[tool:get_current_datetime] again');
  await waitFor(async () => (await chat.getByText(/^Tool result: /).count()) === 2);
  assert.equal(await page.getByRole('group', { name: 'Approve get_current_datetime?' }).count(), 0, 'not asked again');
  await page.getByText('Always allowed (1)').click();
  await screenshot(page, '26-always-allowed');
  await page.getByRole('button', { name: 'Revoke get_current_datetime' }).click();
  await waitFor(async () => (await server.api('GET', `/api/v1/sessions/${id}/grants`)).body.data.length === 0);
  await waitFor(async () => (await page.getByText('Always allowed (1)').count()) === 0);
  noProblems(page);
});

test('switch the session\'s model, clone the session, and the command that continues it in the terminal', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, 'to be cloned');
  await chat.getByText('You said: to be cloned').waitFor();
  await titled(page);
  const id = chatId(page);
  await page.getByLabel('Model').selectOption('fake/fake-model');
  await waitFor(async () => (await server.api('GET', `/api/v1/sessions/${id}`)).body.data.model === 'fake/fake-model');
  await page.getByText('Continue in the terminal').click();
  assert.equal(await page.getByLabel('Terminal command').textContent(), `teamster chat --session ${id} --server ${server.url}`);
  await screenshot(page, '27-model-and-terminal');
  await page.getByRole('button', { name: 'Clone' }).click();
  await waitFor(async () => chatId(page) !== id && chatId(page).length > 0);
  const copy = chatId(page);
  await chat.getByText('You said: to be cloned').waitFor();
  const cloned = await server.api('GET', `/api/v1/sessions/${copy}`);
  assert.equal(cloned.status, 200);
  assert.match(cloned.body.data.title, /\(copy\)$/);
  await screenshot(page, '28-cloned');
  noProblems(page);
});

test('a follow-up queued while a turn runs starts the next turn, which the page shows without a reload', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, '[delay:100][tokens:20]');
  await chat.getByText('tok2', { exact: false }).waitFor();
  await page.getByRole('textbox', { name: 'Message' }).fill('queued next');
  await page.getByRole('button', { name: 'Queue' }).click();
  await page.getByText('Queued follow-ups (1)').waitFor();
  await screenshot(page, '29-follow-up-queued');
  await chat.getByText('You said: queued next').waitFor({ timeout: 20_000 });
  const { body } = await server.api('GET', `/api/v1/sessions/${chatId(page)}/turns?limit=10`);
  assert.equal(body.data.length, 2);
  noProblems(page);
});

test('edit an agent: the server refuses a bad manifest and the error shows', async () => {
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/agents/${AGENT}`);
  await page.getByRole('radio', { name: 'JSON' }).check();
  const editor = page.getByRole('textbox', { name: 'Manifest' });
  const manifest = JSON.parse(await editor.inputValue());
  await editor.fill(JSON.stringify({ ...manifest, instructions: 5 }, null, 2));
  await page.getByRole('button', { name: 'Save' }).click();
  const alert = page.getByRole('alert');
  await alert.waitFor();
  assert.match(await alert.textContent(), /manifest\.instructions/);
  assert.equal(await editor.getAttribute('aria-invalid'), 'true');
  await screenshot(page, '16-agent-invalid');
  // YAML works too, and a good manifest saves a new version.
  await page.getByRole('radio', { name: 'JSON' }).check();
  await editor.fill(JSON.stringify({ ...manifest, instructions: 'Help briefly.' }, null, 2));
  await page.getByRole('radio', { name: 'YAML' }).check();
  assert.match(await editor.inputValue(), /^instructions: Help briefly\.$/m);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText(/Saved version \d+\./).waitFor();
  await screenshot(page, '17-agent-saved');
  const saved = await server.api('GET', `/api/v1/agents/${AGENT}`);
  assert.equal(saved.body.data.manifest.instructions, 'Help briefly.');
  noProblems(page);
});

test('retry runs the last answer again; while a turn runs, a message steers it', async () => {
  const page = await openChat();
  const chat = page.locator('.messages');
  await send(page, 'once more');
  await chat.getByText('You said: once more').waitFor();
  const id = chatId(page);
  const before = (await latestTurn(id)).id;
  await page.getByRole('button', { name: 'Retry' }).click();
  await waitFor(async () => (await latestTurn(id)).id !== before && (await latestTurn(id)).state.status === 'done');
  await chat.getByText('You said: once more').waitFor();
  assert.equal(await page.locator('article.assistant').count(), 1, 'the answer is replaced, not added');
  await send(page, '[delay:150][tokens:20]');
  await chat.getByText('tok2', { exact: false }).waitFor();
  await send(page, 'shorter, please');
  await chat.getByText('Sent to the running turn: shorter, please').waitFor();
  await screenshot(page, '23-steered');
  await page.getByRole('button', { name: 'Send' }).waitFor({ timeout: 30_000 });
  noProblems(page);
});

test('settings: providers are listed and a refused MCP server shows why', async () => {
  const page = await newPage(browser);
  await page.goto(`${server.url}/#/settings`);
  const providers = page.getByRole('region', { name: 'Model providers' });
  await providers.getByRole('button', { name: 'fake', exact: true }).waitFor();
  const mcp = page.getByRole('region', { name: 'MCP servers' });
  await mcp.getByRole('button', { name: 'Add' }).click();
  const editor = mcp.getByRole('textbox', { name: 'Manifest (YAML or JSON)' });
  await editor.fill((await editor.inputValue()).replace('name: docs', 'name: "bad name!"'));
  await mcp.getByRole('button', { name: 'Save' }).click();
  await mcp.getByRole('alert').getByText(/manifest\.name: MCP server name/).waitFor();
  await screenshot(page, '24-settings-refused');
  await editor.fill((await editor.inputValue()).replace('name: "bad name!"', 'name: docs'));
  await mcp.getByRole('button', { name: 'Save' }).click();
  await mcp.getByRole('button', { name: 'docs', exact: true }).waitFor();
  noProblems(page);
});

test('under a path prefix the page and its API calls keep the prefix', async () => {
  const page = await newPage(browser);
  const requests = [];
  page.on('request', (request) => requests.push(new URL(request.url()).pathname));
  await page.goto(`${server.url}/tenant-a/`);
  await page.getByLabel('Agent').selectOption(AGENT);
  await send(page, 'prefixed');
  await page.locator('.messages').getByText('You said: prefixed').waitFor();
  assert.ok(requests.includes('/tenant-a/api/v1/chat'), requests.join(' '));
  assert.ok(requests.some((path) => /^\/tenant-a\/assets\/index-.*\.js$/.test(path)), requests.join(' '));
  noProblems(page);
});

// The controls of the page without an accessible name (a label, aria-label or labelledby).
function unlabelled(page) {
  return page.locator('input, textarea, select, button').evaluateAll((controls) =>
    controls
      .filter((control) => control.offsetParent !== null || control.type === 'file')
      .filter((control) => !(control.labels?.length || control.getAttribute('aria-label') || control.getAttribute('aria-labelledby') || control.textContent.trim()))
      .map((control) => control.outerHTML.slice(0, 120)));
}

test('every control is labelled, and a chat works from the keyboard alone', async () => {
  const page = await openChat();
  assert.deepEqual(await unlabelled(page), [], 'chat');
  // Tab to the message box, type, Enter sends; the answer arrives.
  await page.getByRole('textbox', { name: 'Message' }).focus();
  await page.keyboard.type('typed by keyboard');
  await page.keyboard.press('Enter');
  await page.locator('.messages').getByText('You said: typed by keyboard').waitFor();
  await page.keyboard.press('Shift+Tab');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'attach', 'the attach control is reachable');
  for (const view of ['#/agents/helper', '#/settings']) {
    await page.goto(`${server.url}/${view}`);
    await page.getByRole('heading', { level: 2 }).first().waitFor();
    await page.locator('textarea, .settings-section li').first().waitFor();
    assert.deepEqual(await unlabelled(page), [], view);
  }
  noProblems(page);
});

test('at phone width the chat works and the sessions open from a button', async () => {
  const page = await openChat({ phone: true });
  await send(page, 'small screen');
  await page.locator('.messages').getByText('You said: small screen').waitFor();
  await screenshot(page, '18-phone-chat');
  await page.getByRole('button', { name: 'Sessions' }).click();
  await page.getByRole('searchbox', { name: 'Search sessions' }).waitFor();
  await screenshot(page, '19-phone-sessions');
  await page.getByRole('button', { name: 'Close' }).click();
  await page.getByRole('textbox', { name: 'Message' }).waitFor();
  assert.equal(await page.getByRole('searchbox', { name: 'Search sessions' }).isVisible(), false);
  noProblems(page);
});
