// Every client method against a live server on the fake model: agents and sessions, streamed
// and background turns folded to their answers, tool calls and sub-agent threads, a gated tool
// approved and denied, a question answered, resume after a sequence number, a stream that breaks
// off and resumes by itself, cancel, and typed errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  type StreamedEvent,
  TeamsterClient,
  TeamsterError,
  type TurnEvent,
  approve,
  deny,
  foldEvents,
  respond,
  toolCalls,
  userMessage,
} from '@teamster/client';
import { type Server, startServer, unique } from './harness.js';

let server: Server;
let client: TeamsterClient;
const AGENT = 'helper';
const MODEL = { name: 'fake/fake-model' };

before(async () => {
  server = await startServer();
  client = server.client;
  await client.agents.create({ name: AGENT, manifest: { model: MODEL, instructions: 'Help.', config: { ask_user_questions: { enabled: true } } } });
});
after(() => server?.close());

async function newSession(agent = AGENT) {
  return client.sessions.create({ agent: { name: agent } });
}

/** Asserts that `promise` rejects with a TeamsterError of `status`, and returns it. */
async function refused(promise: Promise<unknown>, status: number): Promise<TeamsterError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof TeamsterError, `not a TeamsterError: ${error}`);
    assert.equal(error.status, status, error.message);
    return error;
  }
  assert.fail(`expected a ${status}`);
}

test('agents: create, list, get by id and name, update to a new version, delete', async () => {
  const name = unique('agent');
  const created = await client.agents.create({ name, manifest: { model: MODEL, instructions: 'First.' } });
  assert.equal(created.name, name);
  assert.equal(created.manifest.instructions, 'First.');
  assert.ok((await client.agents.list()).some((agent) => agent.id === created.id));
  assert.equal((await client.agents.get(created.id)).name, name);
  assert.equal((await client.agents.get(name)).id, created.id);
  const updated = await client.agents.update(created.id, { manifest: { model: MODEL, instructions: 'Second.' } });
  assert.equal(updated.id, created.id);
  assert.equal((await client.agents.get(created.id)).manifest.instructions, 'Second.');
  await client.agents.delete(created.id);
  await refused(client.agents.get(created.id), 404);
  assert.ok(!(await client.agents.list()).some((agent) => agent.id === created.id));
});

test('sessions: create, list, get, update the title, mode and model, delete', async () => {
  const name = unique('modes');
  const manifest = {
    model: MODEL,
    modes: [
      { id: 'plan', name: 'Plan', instructions: 'Plan first.', default: true },
      { id: 'build', name: 'Build', instructions: 'Build it.' },
    ],
  };
  // Modes are a Teamster extension of the agent spec, typed by the client.
  const agent = await client.agents.create({ name, manifest });
  const session = await client.sessions.create({ agent: { name }, title: 'First title' });
  assert.equal(session.title, 'First title');
  assert.equal(session.agent.type, 'reference');
  const page = await client.sessions.list({ agent_id: agent.id });
  assert.deepEqual(page.data.map((listed) => listed.id), [session.id]);
  assert.equal(page.pagination.next_page_token ?? '', '');
  const all = [];
  for await (const listed of client.sessions.iterate({ limit: 1 })) all.push(listed.id);
  assert.ok(all.includes(session.id) && all.length === new Set(all).size, 'pages without repeats');
  assert.equal((await client.sessions.get(session.id)).id, session.id);

  const switched = await client.sessions.update(session.id, { title: 'Second', mode: 'build', model: 'fake/fake-model' });
  assert.deepEqual([switched.title, switched.mode, switched.model], ['Second', 'build', 'fake/fake-model']);
  const turn = await client.turns.run(session.id, { input: [userMessage('hello')] });
  assert.equal(turn.state?.status, 'done');
  const recorded = await client.turns.get(session.id, turn.turnId!);
  assert.deepEqual([recorded.mode, recorded.model], ['build', 'fake/fake-model']);
  const back = await client.sessions.update(session.id, { model: '' });
  assert.equal(back.model, undefined);
  const bad = await refused(client.sessions.update(session.id, { mode: 'nope' }), 400);
  assert.equal(bad.param, 'mode');
  assert.match(bad.body?.error.message ?? '', /plan, build/);

  await client.sessions.delete(session.id);
  await refused(client.sessions.get(session.id), 404);

  // A session with an inline spec, which an update replaces.
  const inline = await client.sessions.create({ agent: { spec: { model: MODEL, instructions: 'Inline.' } } });
  assert.equal(inline.agent.type, 'inline');
  const respecified = await client.sessions.update(inline.id, { agent: { spec: { model: MODEL, instructions: 'Changed.' } } });
  assert.ok(respecified.agent.type === 'inline' && respecified.agent.spec.instructions === 'Changed.', JSON.stringify(respecified.agent));
});

test('a streamed turn: typed events in sequence, deltas folded into the final message', async () => {
  const session = await newSession();
  const stream = client.turns.stream(session.id, { input: [userMessage('hello there [reasoning]')] });
  const seen: StreamedEvent[] = [];
  let deltas = 0;
  for await (const item of stream) {
    seen.push(item);
    const { event } = item;
    if (event.type === 'model.message.delta') {
      deltas++;
      // The fold so far is there while the stream runs.
      assert.ok(stream.turn.messages.has(event.id));
    }
  }
  assert.deepEqual(seen.map((item) => item.sequence), seen.map((_, index) => index + 1), 'sequence numbers 1, 2, 3, ...');
  assert.equal(seen[0]?.event.type, 'turn.created');
  assert.equal(seen.at(-1)?.event.type, 'turn.done');
  assert.ok(deltas >= 3, `streamed in deltas (${deltas})`);
  const turn = stream.turn;
  assert.equal(turn.text(), 'You said: hello there [reasoning]');
  assert.equal(turn.reasoning(), 'Let me think.');
  const state = turn.state;
  assert.ok(state?.status === 'done');
  // The folded message is the one turn.done carries, and the one the events list returns.
  const final = turn.finalMessage();
  assert.deepEqual(final, state.output);
  assert.ok(final?.usage && final.usage.output_tokens > 0);
  const listed = await client.turns.events(session.id, turn.turnId!);
  const messages = listed.data.filter((event) => event.type === 'model.message');
  assert.deepEqual(messages, [final]);
  assert.equal(foldEvents(listed.data).text(), turn.text());
  // The session's events carry the turn id; the turn is listed and fetched.
  const sessionEvents = await client.sessions.events(session.id);
  assert.ok(sessionEvents.data.every((item) => item.turn_id === turn.turnId));
  assert.deepEqual((await client.turns.list(session.id)).data.map((listedTurn) => listedTurn.id), [turn.turnId]);
  assert.equal((await client.turns.get(session.id, turn.turnId!)).state.status, 'done');
});

test('a turn started without streaming runs in the background; wait() folds it', async () => {
  const session = await newSession();
  const turn = await client.turns.create(session.id, { input: [userMessage('[tokens:5]')] });
  assert.equal(turn.state.status, 'running');
  const folded = await client.turns.wait(session.id, turn.id);
  assert.equal(folded.turnId, turn.id);
  assert.equal(folded.text(), 'tok1 tok2 tok3 tok4 tok5 ');
  assert.equal((await client.turns.get(session.id, turn.id)).state.status, 'done');
  // The next turn chains to it.
  const next = await client.turns.run(session.id, { input: [userMessage('[history]')] });
  assert.equal(next.created?.previous_turn_id, turn.id);
  assert.equal(next.text(), 'History: [tokens:5] | [history]');
});

test('tool calls fold by index, and sub-agent threads fold apart from main', async () => {
  const session = await newSession();
  const spawn = (name: string, task: string) => `[tool:run_sub_agent ${JSON.stringify({ name, task })}]`;
  const turn = await client.turns.run(session.id, {
    input: [userMessage(`[tool:get_current_datetime]${spawn('alpha', '[tokens:3] a')}${spawn('beta', '[tokens:2] b')}`)],
  });
  assert.equal(turn.state?.status, 'done');
  const main = turn.thread('main');
  const [calling] = main.messages;
  assert.deepEqual(toolCalls(calling!).map((call) => [call.name, call.input]), [
    ['get_current_datetime', {}],
    ['run_sub_agent', { name: 'alpha', task: '[tokens:3] a' }],
    ['run_sub_agent', { name: 'beta', task: '[tokens:2] b' }],
  ]);
  const callIds = toolCalls(calling!).map((call) => call.id);
  assert.deepEqual(main.toolResponses.map((response) => response.tool_call_id).sort(), [...callIds].sort());
  const threads = turn.subAgents();
  assert.deepEqual(threads.map((thread) => [thread.title, thread.parent?.tool_call_id]), [
    ['alpha', callIds[1]],
    ['beta', callIds[2]],
  ]);
  assert.deepEqual(threads.map((thread) => turn.text(thread.id)), ['tok1 tok2 tok3 ', 'tok1 tok2 ']);
  for (const thread of threads) {
    assert.equal(thread.done?.state.status, 'done');
    assert.ok(thread.messages.every((message) => message.thread_id === thread.id));
  }
  assert.match(turn.text(), /^Tool result: /);
});

test('a gated tool: the turn waits, a denial reaches the model, an approval runs it', async () => {
  const session = await newSession();
  await client.sessions.update(session.id, { permissions: { tools: { get_current_datetime: 'ask' } } });
  const asked = await client.turns.run(session.id, { input: [userMessage('[tool:get_current_datetime]')] });
  const state = asked.state;
  assert.ok(state?.status === 'done');
  assert.deepEqual(state.required_actions.map((action) => action.type), ['tool.approval_required']);
  const [pending] = asked.pending();
  assert.deepEqual([pending?.kind, pending?.name, pending?.threadId, pending?.input], ['approval', 'get_current_datetime', 'main', {}]);

  // Answering with the wrong kind of decision is refused and changes nothing.
  const wrong = await refused(client.turns.run(session.id, { input: [respond(pending!, 'nope')] }), 400);
  assert.match(wrong.message, /needs a user.tool_approval/);

  const denied = await client.turns.run(session.id, { input: [deny(pending!, 'not now')] });
  assert.equal(denied.created?.previous_turn_id, asked.turnId);
  assert.match(denied.thread('main').toolResponses[0]?.content ?? '', /not now/);
  assert.deepEqual(denied.pending(), []);

  const again = await client.turns.run(session.id, { input: [userMessage('[tool:get_current_datetime]')] });
  const [second] = again.pending();
  const approved = await client.turns.run(session.id, { input: [approve(second!)] });
  assert.equal(approved.state?.status, 'done');
  assert.equal(approved.thread('main').toolResponses[0]?.tool_call_id, second!.toolCallId);
  assert.match(approved.text(), /^Tool result: \d{4}-/);
});

test('a question (ask_user_question) is answered with a tool response', async () => {
  const session = await newSession();
  const question = { question: 'Which colour?', options: [{ label: 'Blue' }, { label: 'Red' }], multi_select: false };
  const asked = await client.turns.run(session.id, { input: [userMessage(`[tool:ask_user_question ${JSON.stringify(question)}]`)] });
  const [pending] = asked.pending();
  assert.equal(pending?.kind, 'question');
  assert.equal(pending?.name, 'ask_user_question');
  assert.deepEqual(pending?.input, question);
  const answered = await client.turns.run(session.id, { input: [respond(pending!, 'Blue')] });
  assert.deepEqual(answered.thread('main').toolResponses.map((response) => response.content), ['Blue']);
  assert.equal(answered.text(), 'Tool result: Blue');
  assert.deepEqual(answered.pending(), []);
});

test('subscribe after a sequence number returns exactly the events after it', async () => {
  const session = await newSession();
  const stream = client.turns.stream(session.id, { input: [userMessage('[delay:30][tokens:12]')] });
  const before: StreamedEvent[] = [];
  for await (const item of stream) {
    before.push(item);
    if (before.length === 5) break; // Leaving the loop drops the connection; the turn goes on.
  }
  const turnId = stream.turn.turnId!;
  const resumed: StreamedEvent[] = [];
  const rest = client.turns.subscribe(session.id, turnId, { after: 5 });
  for await (const item of rest) resumed.push(item);
  assert.equal(resumed[0]?.sequence, 6);
  assert.equal(resumed.at(-1)?.event.type, 'turn.done');
  // The whole stream, replayed after the turn ended, is what the two parts were together.
  const whole: StreamedEvent[] = [];
  for await (const item of client.turns.subscribe(session.id, turnId)) whole.push(item);
  assert.deepEqual([...before, ...resumed], whole);
  // Each part folds what it saw: the resumed one starts its message from the deltas.
  assert.equal(stream.turn.text() + rest.turn.text(), 'tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9 tok10 tok11 tok12 ');
  assert.equal(rest.turn.turnId, turnId);
  assert.equal(foldEvents(whole.map((item) => item.event)).text(), 'tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9 tok10 tok11 tok12 ');
});

test('a stream that breaks off resumes by itself after its last event, without repeats', async () => {
  // A fetch whose first event stream stops after a few frames, as a dropped connection would.
  let cut = false;
  const breaking: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (cut || !response.headers.get('content-type')?.startsWith('text/event-stream')) return response;
    cut = true;
    const reader = response.body!.getReader();
    let frames = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { done, value } = await reader.read();
        frames += (new TextDecoder().decode(value ?? new Uint8Array()).match(/\n\n/g) ?? []).length;
        if (done || frames >= 4) {
          await reader.cancel();
          controller.error(new TypeError('terminated'));
          return;
        }
        controller.enqueue(value);
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  const flaky = new TeamsterClient({ baseUrl: server.url, fetch: breaking, reconnect: { delayMs: 10 } });
  const session = await newSession();
  const sequences: number[] = [];
  const stream = flaky.turns.stream(session.id, { input: [userMessage('[delay:20][tokens:8]')] });
  for await (const item of stream) sequences.push(item.sequence);
  assert.ok(cut, 'the first stream was cut');
  assert.deepEqual(sequences, sequences.map((_, index) => index + 1), 'every event once, in order');
  assert.equal(stream.turn.text(), 'tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 ');
});

test('cancel ends the running turn as cancelled and keeps its partial output', async () => {
  const session = await newSession();
  const stream = client.turns.stream(session.id, { input: [userMessage('[delay:100][tokens:100]')] });
  const types: TurnEvent['type'][] = [];
  for await (const { event } of stream) {
    types.push(event.type);
    if (event.type === 'model.message.delta' && event.content === 'tok2 ') await client.sessions.cancel(session.id);
  }
  const state = stream.turn.state;
  assert.ok(state?.status === 'cancelled', JSON.stringify(state));
  assert.equal(state.reason, 'client-cancelled');
  assert.match(stream.turn.text(), /^tok1 tok2 /);
  assert.ok(!stream.turn.text().includes('tok100'), 'it stopped early');
  const turn = await client.turns.get(session.id, stream.turn.turnId!);
  assert.equal(turn.state.status, 'cancelled');
  // Nothing runs now: a second cancel is harmless.
  await client.sessions.cancel(session.id);
});

test('errors are TeamsterErrors with the status and the server error body', async () => {
  const missing = await refused(client.sessions.get('sess_missing'), 404);
  assert.deepEqual([missing.code, missing.type], ['not_found', 'not_found_error']);
  assert.match(missing.body?.error.message ?? '', /sess_missing/);
  assert.equal(missing.request, 'GET /api/v1/sessions/sess_missing');
  await refused(client.turns.get((await newSession()).id, 'turn_missing'), 404);
  // A stream that cannot start is refused before any event.
  const notStarted = client.turns.stream('sess_missing', { input: [userMessage('hi')] });
  await refused(notStarted.done(), 404);
  const invalid = await refused(client.sessions.create({ agent: {} as { name: string } }), 400);
  assert.equal(invalid.param, 'agent');
  // No server at all: status 0, the cause kept.
  const nowhere = new TeamsterClient({ baseUrl: 'http://127.0.0.1:9', reconnect: false });
  const unreachable = await refused(nowhere.agents.list(), 0);
  assert.ok(unreachable.cause);
});
