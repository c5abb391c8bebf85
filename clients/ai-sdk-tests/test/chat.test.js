// The UI message stream of POST /api/v1/chat, read by the AI SDK's own Chat (the core of
// useChat) and readUIMessageStream against a live server on the fake model.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';
import { Chat, expectStatus, startMcpServer, startServer } from '../lib/harness.js';

let server;
const AGENT = 'helper';

before(async () => {
  server = await startServer();
  const manifest = { model: { name: 'fake/fake-model' }, instructions: 'Help.', config: { ask_user_questions: { enabled: true } } };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: AGENT, manifest }), 201);
});
after(() => server?.close());

let chats = 0;
const newChatId = () => `chat-${process.pid}-${++chats}`;

// The parts a user sees: step markers left out, tool parts reduced to name, state and data.
function visible(message) {
  return message.parts.filter((part) => part.type !== 'step-start').map((part) => {
    if (part.type === 'text' || part.type === 'reasoning') return { type: part.type, text: part.text };
    if (part.type.startsWith('tool-')) {
      const { type, state, input, output, approval } = part;
      return { type, state, input, ...(output !== undefined && { output }), ...(approval && { approved: approval.approved }) };
    }
    return { type: part.type };
  });
}

async function send(chat, text) {
  await chat.sendMessage({ text });
  assert.equal(chat.error, undefined, `chat error: ${chat.error}`);
  return chat.messages.at(-1);
}

test('text, reasoning and usage metadata stream into one assistant message', async () => {
  const chat = new Chat({ server, agent: AGENT, id: newChatId() });
  const message = await send(chat, 'hello there [reasoning]');
  assert.equal(message.role, 'assistant');
  assert.deepEqual(visible(message), [
    { type: 'reasoning', text: 'Let me think.' },
    { type: 'text', text: 'You said: hello there [reasoning]' },
  ]);
  assert.ok(message.metadata.usage.inputTokens > 0 && message.metadata.usage.outputTokens > 0, JSON.stringify(message.metadata));
  assert.match(message.id, /^turn_/, 'the message id is the turn id');
  // The server keeps the history: the next turn sees both user messages.
  const second = await send(chat, '[history]');
  assert.deepEqual(visible(second), [{ type: 'text', text: 'History: hello there [reasoning] | [history]' }]);
});

test('a server tool call shows its input and output, then the answer', async () => {
  const chat = new Chat({ server, agent: AGENT, id: newChatId() });
  const message = await send(chat, '[tool:get_current_datetime]');
  const parts = visible(message);
  assert.equal(parts.length, 2, JSON.stringify(parts));
  assert.equal(parts[0].type, 'tool-get_current_datetime');
  assert.equal(parts[0].state, 'output-available');
  assert.deepEqual(parts[0].input, {});
  assert.match(parts[1].text, /^Tool result: /);
  assert.equal(message.parts.filter((part) => part.type === 'step-start').length, 2, 'one step per model call');
});

test('a gated tool asks for approval; the approval runs it in the same message', async () => {
  const id = newChatId();
  const chat = new Chat({ server, agent: AGENT, id, sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await send(chat, 'hi');
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${id}`, { permissions: { tools: { get_current_datetime: 'ask' } } }), 200);
  const asked = await send(chat, '[tool:get_current_datetime]');
  const [tool] = asked.parts.filter((part) => part.type === 'tool-get_current_datetime');
  assert.equal(tool.state, 'approval-requested');
  // Approving a call that is not pending is refused, and nothing is stored.
  const bogus = structuredClone(asked);
  bogus.parts.push({ ...tool, toolCallId: 'call_unknown', state: 'approval-responded', approval: { id: 'call_unknown', approved: true } });
  const refused = await server.api('POST', '/api/v1/chat', { id, messages: [bogus], trigger: 'submit-message', messageId: asked.id });
  assert.equal(refused.status, 400);
  assert.equal(refused.body.error.param, 'messages');
  await chat.addToolApprovalResponse({ id: tool.approval.id, approved: true });
  // sendAutomaticallyWhen sends the approval; wait for that request to finish.
  await waitFor(() => chat.status === 'ready' && chat.messages.at(-1).parts.some((part) => part.type === 'text'));
  const answered = chat.messages.at(-1);
  assert.equal(chat.messages.length, 4, 'the answer continues the assistant message');
  assert.deepEqual(visible(answered).map(({ type, state, approved }) => ({ type, state, approved })), [
    { type: 'tool-get_current_datetime', state: 'output-available', approved: true },
    { type: 'text', state: undefined, approved: undefined },
  ]);
  assert.match(answered.parts.findLast((part) => part.type === 'text').text, /^Tool result: /);
});

test('a sub-agent\'s gated call is a tool part to approve, and the approval resumes the sub-agent', async () => {
  const id = newChatId();
  const chat = new Chat({ server, agent: AGENT, id, sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await send(chat, 'hi');
  await expectStatus(server.api('PATCH', `/api/v1/sessions/${id}`, { permissions: { tools: { get_current_datetime: 'ask' } } }), 200);
  const asked = await send(chat, '[tool:run_sub_agent {"name": "clock", "task": "[tool:get_current_datetime]"}]');
  const [agent] = asked.parts.filter((part) => part.type === 'data-agent');
  assert.equal(agent.data.agentName, 'clock');
  assert.equal(agent.data.status, 'running');
  assert.deepEqual(asked.parts.filter((part) => part.type === 'tool-run_sub_agent'), [], 'the thread is its data part');
  const [tool] = asked.parts.filter((part) => part.type === 'tool-get_current_datetime');
  assert.equal(tool?.state, 'approval-requested', JSON.stringify(asked.parts));
  await chat.addToolApprovalResponse({ id: tool.approval.id, approved: true });
  await waitFor(() => chat.status === 'ready' && chat.messages.at(-1).parts.some((part) => part.type === 'text'));
  const answered = chat.messages.at(-1);
  const [done] = answered.parts.filter((part) => part.type === 'tool-get_current_datetime');
  assert.equal(done.state, 'output-available');
  assert.equal(done.approval.approved, true);
  const [finished] = answered.parts.filter((part) => part.type === 'data-agent');
  assert.equal(finished.data.status, 'done');
  assert.match(finished.data.result, /^Tool result: /);
  assert.match(answered.parts.findLast((part) => part.type === 'text').text, /^Tool result: Tool result: /);
});

test('ask_user_question is a client-side tool answered with addToolOutput', async () => {
  const chat = new Chat({ server, agent: AGENT, id: newChatId(), sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls });
  const asked = await send(chat, '[tool:ask_user_question {"question": "Which colour?"}]');
  const [question] = asked.parts.filter((part) => part.type === 'tool-ask_user_question');
  assert.equal(question.state, 'input-available');
  assert.equal(question.input.question, 'Which colour?');
  await chat.addToolOutput({ tool: 'ask_user_question', toolCallId: question.toolCallId, output: 'Blue' });
  await waitFor(() => chat.status === 'ready' && chat.messages.at(-1).parts.some((part) => part.type === 'text'));
  const answered = chat.messages.at(-1);
  assert.deepEqual(visible(answered), [
    { type: 'tool-ask_user_question', state: 'output-available', input: question.input, output: 'Blue' },
    { type: 'text', text: 'Tool result: Blue' },
  ]);
});

test('an MCP tool\'s progress shows as its data-tool-progress part, phase by phase', async (t) => {
  const tools = await startMcpServer();
  t.after(() => tools.close());
  const mcp = { type: 'remote', name: 'progress-tools', description: 'Test tools.', url: tools.url };
  await expectStatus(server.api('POST', '/api/v1/settings/mcp-servers', { manifest: mcp }), 201);
  const manifest = {
    model: { name: 'fake/fake-model' },
    mcp_servers: [{ type: 'truefoundry-mcp-registry', name: 'progress-tools', preload: true, enable_tools: ['phases'] }],
  };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'progress', manifest }), 201);
  const seen = [];
  const chat = new Chat({ server, agent: 'progress', id: newChatId(), onData: (part) => seen.push(structuredClone(part)) });
  const message = await send(chat, '[tool:phases {"steps": 3}]');
  const [tool] = message.parts.filter((part) => part.type === 'tool-phases');
  assert.equal(tool.state, 'output-available');
  assert.equal(tool.output, '3 phases done');
  const progress = seen.filter((part) => part.type === 'data-tool-progress');
  assert.deepEqual(progress.map((part) => [part.data.progress, part.data.total, part.data.message]),
    [[1, 3, 'phase 1 of 3'], [2, 3, 'phase 2 of 3'], [3, 3, 'phase 3 of 3']]);
  assert.ok(progress.every((part) => part.id === `${tool.toolCallId}-progress` && part.data.toolName === 'phases'));
  // One part per call, updated in place: the message keeps the last phase.
  const kept = message.parts.filter((part) => part.type === 'data-tool-progress');
  assert.deepEqual(kept.map((part) => part.data.message), ['phase 3 of 3']);
});

test('a file a sandbox command makes is a data-file part, and downloads', async () => {
  const manifest = { model: { name: 'fake/fake-model' }, config: { sandbox: { enabled: true } } };
  await expectStatus(server.api('POST', '/api/v1/agents', { name: 'builder', manifest }), 201);
  const id = newChatId();
  const news = [];
  const chat = new Chat({ server, agent: 'builder', id, onData: (part) => news.push(part) });
  const message = await send(chat, '[tool:exec {"command": "echo hi > hello.txt"}]');
  const [exec] = message.parts.filter((part) => part.type === 'tool-exec');
  assert.equal(exec.state, 'output-available');
  const files = message.parts.filter((part) => part.type === 'data-file');
  assert.deepEqual(files.map((part) => ({ id: part.id, ...part.data })),
    [{ id: '/workspace/hello.txt', path: '/workspace/hello.txt', size: 3, toolCallId: exec.toolCallId }]);
  const download = await fetch(`${server.url}/api/v1/sessions/${id}/turns/${message.id}/download-sandbox-file?path=${encodeURIComponent(files[0].data.path)}`);
  assert.equal(download.status, 200);
  assert.equal(await download.text(), 'hi\n');
  // The turn made the workspace: a transient data part says it is ready (news for onData, not
  // a part of the message).
  const workspace = news.filter((part) => part.type === 'data-workspace-status');
  assert.deepEqual(workspace.map((part) => [part.id, part.data.status, part.transient]), [['workspace', 'ready', true]]);
  assert.equal(message.parts.filter((part) => part.type === 'data-workspace-status').length, 0);
});

test("what a sandbox command prints is a data-shell-output part of its call", async () => {
  // The sandboxed agent the test before saved (tests in a file run in order).
  const chat = new Chat({ server, agent: 'builder', id: newChatId() });
  const message = await send(chat, '[tool:exec {"command": "echo one; echo two >&2; echo three"}]');
  const [exec] = message.parts.filter((part) => part.type === 'tool-exec');
  const printed = message.parts.filter((part) => part.type === 'data-shell-output');
  assert.equal(printed.length, 1, 'one part per call, replaced as it grows');
  assert.deepEqual(printed[0].data, { toolCallId: exec.toolCallId, toolName: 'exec', stdout: 'one\nthree\n', stderr: 'two\n', truncated: false });
});

test('regenerate runs the last answer again from the turn before it', async () => {
  const chat = new Chat({ server, agent: AGENT, id: newChatId() });
  await send(chat, 'first');
  const before = await send(chat, '[history]');
  await chat.regenerate();
  const after = chat.messages.at(-1);
  assert.equal(chat.messages.length, 4);
  assert.notEqual(after.id, before.id, 'a new turn');
  assert.deepEqual(visible(after), visible(before), 'the same history: the old answer is not in it');
});

test('resumeStream replays the running turn; 204 when none runs', async () => {
  const id = newChatId();
  const transport = new DefaultChatTransport({ api: `${server.url}/api/v1/chat`, body: { agent: AGENT, keepRunning: true } });
  const controller = new AbortController();
  const stream = await transport.sendMessages({
    chatId: id, trigger: 'submit-message', messageId: undefined, abortSignal: controller.signal,
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: '[delay:100][tokens:8]' }] }],
  });
  // Read the first chunks, then go away as a reloaded page would.
  const reader = stream.getReader();
  await reader.read();
  controller.abort();
  const chat = new Chat({ server, agent: AGENT, id });
  await chat.resumeStream();
  const message = chat.messages.at(-1);
  assert.equal(message.role, 'assistant');
  assert.deepEqual(visible(message), [{ type: 'text', text: 'tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 ' }]);
  const idle = await fetch(`${server.url}/api/v1/chat/${id}/stream`);
  assert.equal(idle.status, 204);
});

test('stop() aborts the request and cancels the turn', async () => {
  const id = newChatId();
  const chat = new Chat({ server, agent: AGENT, id });
  const sending = chat.sendMessage({ text: '[delay:200][tokens:50]' });
  await waitFor(() => chat.messages.at(-1)?.role === 'assistant' && chat.messages.at(-1).parts.some((part) => part.type === 'text'));
  await chat.stop();
  await sending;
  const turns = await waitForTurn(id, (turn) => turn.state.status !== 'running');
  assert.equal(turns.state.status, 'cancelled');
  assert.equal(turns.state.reason, 'client-cancelled');
  // A turn cancelled while a client reads it ends its stream with abort.
  const transport = new DefaultChatTransport({ api: `${server.url}/api/v1/chat`, body: { agent: AGENT } });
  const stream = await transport.sendMessages({
    chatId: id, trigger: 'submit-message', messageId: undefined, abortSignal: undefined,
    messages: [{ id: 'u2', role: 'user', parts: [{ type: 'text', text: '[delay:200][tokens:50]' }] }],
  });
  const chunks = [];
  const reading = (async () => { for await (const chunk of stream) chunks.push(chunk); })();
  await waitFor(() => chunks.some((chunk) => chunk.type === 'text-delta'));
  await expectStatus(server.api('POST', `/api/v1/sessions/${id}/cancel`), 200);
  await reading;
  assert.deepEqual(chunks.slice(-3).map((chunk) => chunk.type), ['finish-step', 'message-metadata', 'abort']);
  assert.equal(chunks.at(-1).reason, 'client-cancelled');
});

test('bad input is refused with the field named, and nothing is stored', async () => {
  const id = newChatId();
  const message = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] };
  const cases = [
    [{ messages: [message], trigger: 'submit-message', agent: AGENT }, 'id'],
    [{ id, messages: [message], trigger: 'send', agent: AGENT }, 'trigger'],
    [{ id, messages: 'hi', trigger: 'submit-message', agent: AGENT }, 'messages'],
    [{ id, messages: [{ role: 'user' }], trigger: 'submit-message', agent: AGENT }, 'messages'],
    [{ id, messages: [message], trigger: 'submit-message' }, 'agent'],
    [{ id, messages: [message], trigger: 'regenerate-message', agent: AGENT }, 'trigger'],
  ];
  for (const [body, param] of cases) {
    const response = await server.api('POST', '/api/v1/chat', body);
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.equal(response.body.error.param, param, JSON.stringify(response.body));
  }
  assert.equal((await server.api('GET', `/api/v1/sessions/${id}`)).status, 404, 'no session was made');
});

async function waitFor(condition, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function waitForTurn(sessionId, condition) {
  let turn;
  await waitForAsync(async () => {
    const { body } = await server.api('GET', `/api/v1/sessions/${sessionId}/turns`);
    turn = body.data[0];
    return condition(turn);
  });
  return turn;
}

async function waitForAsync(condition, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

