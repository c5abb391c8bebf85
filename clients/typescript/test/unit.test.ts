// The pieces that need no server: the SSE parser over awkward chunking and line endings, the
// delta fold, and the error's accessors.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  type ModelMessage,
  type ModelMessageDelta,
  SseParser,
  TeamsterClient,
  TeamsterError,
  type TurnEvent,
  foldDelta,
  foldEvents,
  parseSse,
} from '@teamster/client';

test('the SSE parser joins data lines, keeps the last id and skips comments, however the bytes are cut', async () => {
  const wire = '\uFEFFid: 1\r\ndata: {"a":\r\ndata: 1}\r\n\r\n: ping\n\nid: 2\rdata: two\r\rdata: no id\n\nevent: other\ndata: x\nretry: 50\n\ndata: unterminated';
  const expected = [
    { event: 'message', data: '{"a":\n1}', id: '1', retry: undefined },
    { event: 'message', data: 'two', id: '2', retry: undefined },
    { event: 'message', data: 'no id', id: '2', retry: undefined },
    { event: 'other', data: 'x', id: '2', retry: 50 },
  ];
  // Every split of the text in two, and one character at a time.
  for (let cut = 0; cut <= wire.length; cut++) {
    const parser = new SseParser();
    assert.deepEqual([...parser.push(wire.slice(0, cut)), ...parser.push(wire.slice(cut))], expected, `cut at ${cut}`);
  }
  const parser = new SseParser();
  assert.deepEqual([...wire].flatMap((char) => parser.push(char)), expected);
  // Bytes, with a multi-byte character split between chunks.
  const bytes = new TextEncoder().encode('id: 7\ndata: "h\u00e9llo \u{1F600}"\n\n');
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const byte of bytes) controller.enqueue(Uint8Array.of(byte));
      controller.close();
    },
  });
  const messages = [];
  for await (const message of parseSse(body)) messages.push(message);
  assert.deepEqual(messages, [{ event: 'message', data: '"h\u00e9llo \u{1F600}"', id: '7', retry: undefined }]);
});

test('deltas fold into their message as the server folds them', () => {
  const message: ModelMessage = { type: 'model.message', id: 'm', thread_id: 'main', created_at: 'x' };
  const usage = { input_tokens: 3, output_tokens: 2, input_tokens_breakdown: { harness: 0, skills: 0, instructions: 1, tool_definitions: 0, messages: 2 } };
  const deltas = [
    { content: 'Hel', reasoning_content: 'think' },
    { thinking_blocks: [{ type: 'thinking', thinking: 'think', signature: 's1' }] },
    { content: 'lo', tool_calls: [{ index: 1, id: 'c2', function: { name: 'b', arguments: '{"x"' } }] },
    { content: '', tool_calls: [{ index: 1, function: { arguments: ':1}' } }, { index: 0, id: 'c1', function: { name: 'a', arguments: '{}' }, tool_info: { type: 'truefoundry-system', name: 'a' } }] },
    { refusal: 'no', finish_reason: 'tool_calls', usage },
  ] as Omit<ModelMessageDelta, 'type' | 'id' | 'thread_id'>[];
  for (const delta of deltas) foldDelta(message, { type: 'model.message.delta', id: 'm', thread_id: 'main', ...delta });
  assert.equal(message.content, 'Hello');
  assert.equal(message.reasoning_content, 'think');
  assert.equal(message.refusal, 'no');
  assert.deepEqual(message.thinking_blocks, [{ type: 'thinking', thinking: 'think', signature: 's1' }]);
  assert.deepEqual(message.tool_calls?.map((call) => [call.id, call.function.name, call.function.arguments, call.tool_info.name]), [
    ['c1', 'a', '{}', 'a'],
    ['c2', 'b', '{"x":1}', ''],
  ]);
  assert.equal(message.finish_reason, 'tool_calls');
  assert.deepEqual(message.usage, usage);
  // Content parts grow their last text part.
  const parts: ModelMessage = { type: 'model.message', id: 'p', thread_id: 'main', created_at: 'x', content: [{ type: 'refusal', refusal: 'r' }] };
  foldDelta(parts, { type: 'model.message.delta', id: 'p', thread_id: 'main', content: 'a' });
  foldDelta(parts, { type: 'model.message.delta', id: 'p', thread_id: 'main', content: 'b' });
  assert.deepEqual(parts.content, [{ type: 'refusal', refusal: 'r' }, { type: 'text', text: 'ab' }]);
});

test('a fold resumed after the placeholder starts the message from its deltas', () => {
  const events: TurnEvent[] = [
    { type: 'model.message.delta', id: 'm', thread_id: 'main', content: 'lo' },
    { type: 'model.message.delta', id: 'm', thread_id: 'main', content: ' there' },
  ];
  const turn = foldEvents(events);
  assert.equal(turn.text(), 'lo there');
  assert.equal(turn.state, undefined);
});

test('the fold lists the calls and the sign-ins a paused turn waits for', () => {
  const turn = foldEvents([
    { type: 'model.message', id: 'm', thread_id: 'main', created_at: 'x', tool_calls: [
      { id: 'c1', type: 'function', function: { name: 'delete', arguments: '{"path":"a"}' }, tool_info: { type: 'truefoundry-system', name: 'delete' } },
      { id: 'c2', type: 'function', function: { name: 'ask_user_question', arguments: '{"question":"Why?"}' }, tool_info: { type: 'truefoundry-system', name: 'ask_user_question' } },
    ] },
    { type: 'tool.approval_required', id: 'a', created_at: 'x', thread_id: 'main', tool_calls: [{ id: 'c1', source_event_id: 'm' }] },
    { type: 'tool.response_required', id: 'q', created_at: 'x', thread_id: 'main', tool_calls: [{ id: 'c2', source_event_id: 'm' }] },
    { type: 'mcp.auth_required', id: 'o', created_at: 'x', thread_id: null, mcp_servers: [{ id: 's', name: 'github', auth_url: 'http://auth' }] },
  ] as TurnEvent[]);
  assert.deepEqual(turn.pending().map((call) => [call.kind, call.name, call.input, call.eventId]), [
    ['approval', 'delete', { path: 'a' }, 'a'],
    ['question', 'ask_user_question', { question: 'Why?' }, 'q'],
  ]);
  assert.deepEqual(turn.authRequired(), [{ id: 's', name: 'github', auth_url: 'http://auth' }]);
});

test('TeamsterError reads the error body', async () => {
  const body = { error: { message: 'no session "s"', type: 'not_found', code: 'not_found', param: null } };
  const error = await TeamsterError.fromResponse(new Response(JSON.stringify(body), { status: 404 }), 'GET /api/v1/sessions/s');
  assert.equal(error.status, 404);
  assert.equal(error.code, 'not_found');
  assert.equal(error.param, undefined);
  assert.deepEqual(error.body, body);
  assert.match(error.message, /^GET \/api\/v1\/sessions\/s: 404 no session "s"$/);
  const plain = await TeamsterError.fromResponse(new Response('bad gateway', { status: 502 }), 'GET /x');
  assert.equal(plain.body, undefined);
  assert.match(plain.message, /502 bad gateway/);
});

test('the package has no runtime dependencies and exports its build', () => {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
  assert.equal(manifest.dependencies, undefined);
  assert.equal(manifest.type, 'module');
  assert.deepEqual(manifest.exports['.'], { types: './dist/index.d.ts', import: './dist/index.js' });
});

test('a stream that keeps breaking off gives up after its attempts with a TeamsterError', async () => {
  const created = { type: 'turn.created', id: 'e1', turn_id: 'turn_1', previous_turn_id: null, state: { status: 'running' }, created_at: 'x', thread_id: null };
  const requests: string[] = [];
  // Every answer is the turn's first event, then the end of the body: never turn.done.
  const fake: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    requests.push(`${init?.method} ${new URL(String(input)).pathname} ${headers.get('last-event-id') ?? '-'}`);
    const body = requests.length === 1 ? `id: 1\ndata: ${JSON.stringify(created)}\n\n` : '';
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
  };
  const client = new TeamsterClient({ baseUrl: 'http://teamster.test/prefix', fetch: fake, reconnect: { attempts: 2, delayMs: 1 } });
  const stream = client.turns.stream('sess_1', { input: [] });
  const error = await stream.done().then(() => undefined, (error: unknown) => error);
  assert.ok(error instanceof TeamsterError, String(error));
  assert.equal(error.status, 0);
  assert.match(error.message, /turn turn_1 ended after sequence 1 without turn.done/);
  assert.deepEqual(requests, [
    'POST /prefix/api/v1/sessions/sess_1/turns -',
    'GET /prefix/api/v1/sessions/sess_1/turns/turn_1/subscribe 1',
    'GET /prefix/api/v1/sessions/sess_1/turns/turn_1/subscribe 1',
  ]);
  // A refusal on the way (the turn gone) ends it at once, with that status.
  const gone: typeof fetch = async (_input, init) =>
    init?.method === 'POST'
      ? new Response(`id: 1\ndata: ${JSON.stringify(created)}\n\n`, { headers: { 'content-type': 'text/event-stream' } })
      : new Response(JSON.stringify({ error: { message: 'no turn' } }), { status: 404 });
  const refused = await new TeamsterClient({ baseUrl: 'http://teamster.test', fetch: gone, reconnect: { delayMs: 1 } })
    .turns.stream('sess_1', {}).done().then(() => undefined, (error: unknown) => error);
  assert.ok(refused instanceof TeamsterError && refused.status === 404, String(refused));
  // An answer that is not an event stream is refused before any event.
  const html: typeof fetch = async () => new Response('<html>', { headers: { 'content-type': 'text/html' } });
  const wrong = await new TeamsterClient({ baseUrl: 'http://teamster.test', fetch: html }).turns.stream('s', {}).done().then(() => undefined, (error: unknown) => error);
  assert.ok(wrong instanceof TeamsterError && /expected an event stream/.test(wrong.message), String(wrong));
});

test('a live channel yields typed events, skips comments, and leaving the loop cancels the body', async () => {
  let cancelled = false;
  const requests: string[] = [];
  const encoder = new TextEncoder();
  const fake: typeof fetch = async (input) => {
    requests.push(new URL(String(input)).pathname);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode(': live\n\nevent: thread_deleted\ndata: {"type":"thread_deleted","session_id":"s1"}\n\n'));
        controller.enqueue(encoder.encode(': ping\n\nevent: thread_changed\ndata: {"type":"thread_changed","session_id":"s2","title":"T"}\n\n'));
        // Then nothing more: the channel stays open until the reader leaves.
      },
      cancel() {
        cancelled = true;
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/event-stream; charset=utf-8' } });
  };
  const client = new TeamsterClient({ baseUrl: 'http://teamster.test/prefix', fetch: fake });
  const seen: string[] = [];
  for await (const event of client.live()) {
    // The union narrows on `type`.
    if (event.type === 'thread_changed') {
      seen.push(`${event.type} ${event.session_id} ${event.title}`);
      break;
    }
    seen.push(`${event.type} ${event.type === 'thread_deleted' ? event.session_id : ''}`);
  }
  assert.deepEqual(seen, ['thread_deleted s1', 'thread_changed s2 T']);
  assert.deepEqual(requests, ['/prefix/api/v1/live']);
  assert.equal(cancelled, true, 'the body was cancelled');

  // A refusal is thrown before any event, as the client's error.
  const gone: typeof fetch = async () => new Response(JSON.stringify({ error: { message: 'no session', code: 'not_found' } }), { status: 404 });
  const refused = await new TeamsterClient({ baseUrl: 'http://teamster.test', fetch: gone }).sessions.live('s').next().then(() => undefined, (error: unknown) => error);
  assert.ok(refused instanceof TeamsterError && refused.status === 404 && refused.code === 'not_found', String(refused));
});
