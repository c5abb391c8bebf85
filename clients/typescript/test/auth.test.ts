// A server with `--auth api-keys` whose first admin key was made with `teamster keys create`:
// the client sends its key as `Authorization: Bearer`, manages keys as an admin, streams and
// resumes a turn as a member, and gets typed 401s and 403s.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { TeamsterClient, TeamsterError, userMessage } from '@teamster/client';
import { type Server, startServer } from './harness.js';

let server: Server;

before(async () => {
  server = await startServer({ auth: 'api-keys' });
  // The admin's agent, in its tenant, shared with the tenant's members (who may run it).
  const collaborators = [{ subject: 'team:ops', role_id: 'agent-user' }];
  await server.client.agents.create({ name: 'keyed', manifest: { model: { name: 'fake/fake-model' }, collaborators } });
});
after(() => server?.close());

async function status(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
    return 200;
  } catch (error) {
    assert.ok(error instanceof TeamsterError, String(error));
    return error.status;
  }
}

test('keys: an admin makes, lists and revokes them; members use theirs; no key is a 401', async () => {
  assert.match(server.adminKey ?? '', /^tsk_/);
  const admin = server.client;
  const made = await admin.keys.create({ subject: 'alice', tenant: 'ops' });
  assert.equal(made.role, 'member');
  assert.equal(made.subject.subject_slug, 'alice');
  assert.match(made.secret, /^tsk_/);
  assert.ok((await admin.keys.list()).some((key) => key.id === made.id && key.revoked_at === undefined));

  const alice = new TeamsterClient({ baseUrl: server.url, apiKey: made.secret });
  const session = await alice.sessions.create({ agent: { name: 'keyed' } });
  const stream = alice.turns.stream(session.id, { input: [userMessage('[tokens:4]')] });
  const turn = await stream.done();
  assert.equal(turn.text(), 'tok1 tok2 tok3 tok4 ');
  // Subscribing (the stream's resume path) carries the key too.
  const replay = await alice.turns.subscribe(session.id, turn.turnId!, { after: 2 }).done();
  assert.equal(replay.events.length, turn.events.length - 2);

  // Another subject's session is missing to the caller; keys are for admins.
  const bob = new TeamsterClient({ baseUrl: server.url, apiKey: (await admin.keys.create({ subject: 'bob', tenant: 'ops' })).secret });
  assert.equal(await status(bob.sessions.get(session.id)), 404);
  const forbidden = await bob.keys.list().catch((error: unknown) => error);
  assert.ok(forbidden instanceof TeamsterError && forbidden.status === 403, String(forbidden));
  assert.ok(forbidden.body?.error.message);

  // No key, a wrong key, a revoked key: 401 with the server's error body.
  const anonymous = new TeamsterClient({ baseUrl: server.url });
  const unauthorized = await anonymous.agents.list().catch((error: unknown) => error);
  assert.ok(unauthorized instanceof TeamsterError && unauthorized.status === 401, String(unauthorized));
  assert.ok(unauthorized.body?.error.message);
  assert.equal(await status(new TeamsterClient({ baseUrl: server.url, apiKey: 'tsk_nope_nope' }).agents.list()), 401);
  const revoked = await admin.keys.revoke(made.id);
  assert.ok(revoked.revoked_at);
  assert.equal(await status(alice.sessions.get(session.id)), 401);
});

test('the useChat transport settings of the README reach /api/v1/chat with the key', async () => {
  // The body and headers DefaultChatTransport({ api: base + '/api/v1/chat', headers, body: { agent } })
  // sends for a first message.
  const request = (headers: Record<string, string>) =>
    fetch(`${server.url}/api/v1/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({
        id: `chat-${process.pid}`, trigger: 'submit-message', messageId: undefined, agent: 'keyed',
        messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: '[tokens:2]' }] }],
      }),
    });
  assert.equal((await request({})).status, 401);
  const response = await request({ authorization: `Bearer ${server.adminKey}` });
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await response.text();
  assert.match(text, /"type":"text-delta"/);
  assert.match(text, /data: \[DONE\]/);
});

test('live channels: another subject\'s session is a 404 and no key a 401, thrown before any event; the key goes with the channel', async () => {
  const admin = server.client;
  const alice = new TeamsterClient({ baseUrl: server.url, apiKey: (await admin.keys.create({ subject: 'alice-live', tenant: 'ops' })).secret });
  const bob = new TeamsterClient({ baseUrl: server.url, apiKey: (await admin.keys.create({ subject: 'bob-live', tenant: 'ops' })).secret });
  const session = await alice.sessions.create({ agent: { name: 'keyed' } });

  const first = async (stream: AsyncIterable<{ type: string }>) => {
    for await (const event of stream) return event.type;
    return 'nothing';
  };
  assert.equal(await first(alice.sessions.live(session.id)), 'display_state_changed');
  for (const [channel, expected] of [
    [bob.sessions.live(session.id), 404],
    [new TeamsterClient({ baseUrl: server.url }).sessions.live(session.id), 401],
    [new TeamsterClient({ baseUrl: server.url }).live(), 401],
  ] as const) {
    const refused = await first(channel).catch((error: unknown) => error);
    assert.ok(refused instanceof TeamsterError && refused.status === expected, String(refused));
    assert.ok(refused.body?.error.message);
  }
});
