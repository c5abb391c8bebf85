// The control layer through the client (Teamster extensions of the native API): follow-ups,
// steering, clones, "always allow" grants, tasks, plans and session state; and the server's
// capabilities, models and a sandbox file download.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type AgentSpec, TeamsterClient, TeamsterError, approve, deny, userMessage } from '@teamster/client';
import { type Server, startServer, waitFor } from './harness.js';

let server: Server;
let client: TeamsterClient;
const MODEL = { name: 'fake/fake-model' };
const call = (name: string, input: unknown) => `[tool:${name} ${JSON.stringify(input)}]`;

before(async () => {
  server = await startServer();
  client = server.client;
});
after(() => server?.close());

async function inline(spec: AgentSpec = { model: MODEL }) {
  return client.sessions.create({ agent: { spec } });
}

async function statusOf(promise: Promise<unknown>): Promise<number> {
  const error = await promise.then(() => undefined, (error: unknown) => error);
  assert.ok(error instanceof TeamsterError, `expected a TeamsterError, got ${error}`);
  return error.status;
}

test('follow-ups queue behind the running turn and run in order; a dropped one never runs', async () => {
  const session = await inline();
  const running = await client.turns.create(session.id, { input: [userMessage('[tokens:5][delay:100] slow')] });
  const first = await client.sessions.followUp(session.id, 'first');
  const dropped = await client.sessions.followUp(session.id, 'dropped');
  assert.equal(first.turn_id, undefined, 'queued, not started');
  assert.deepEqual((await client.sessions.followUps(session.id)).map((queued) => queued.id), [first.id, dropped.id]);
  await client.sessions.cancelFollowUp(session.id, dropped.id);
  assert.equal(await statusOf(client.sessions.cancelFollowUp(session.id, dropped.id)), 404);
  const turns = await waitFor(async () => {
    const page = await client.turns.list(session.id);
    return page.data.length === 2 && page.data.every((turn) => turn.state.status !== 'running') ? page.data : undefined;
  });
  const [followed, original] = turns;
  assert.equal(original?.id, running.id);
  assert.equal(followed?.previous_turn_id, running.id);
  assert.ok(followed?.state.status === 'done' && followed.state.output?.content === 'You said: first');
  // With nothing running, a follow-up starts a turn at once.
  const now = await client.sessions.followUp(session.id, 'now');
  assert.ok(now.turn_id);
  assert.equal((await client.turns.wait(session.id, now.turn_id)).text(), 'You said: now');
});

test('steer joins the running turn before its next model call', async () => {
  const session = await inline();
  assert.equal(await statusOf(client.sessions.steer(session.id, 'too early')), 409);
  const stream = client.turns.stream(session.id, { input: [userMessage('[tool:get_current_datetime {}][delay:200] go')] });
  let steered: string | undefined;
  for await (const { event } of stream) {
    if (event.type === 'model.message.delta' && steered === undefined) steered = (await client.sessions.steer(session.id, 'Use UTC.')).id;
  }
  const messages = stream.turn.thread('main').messages;
  assert.equal(messages.length, 2);
  assert.equal(messages[0]?.steering, undefined);
  assert.deepEqual(messages[1]?.steering?.map((steer) => [steer.id, steer.content]), [[steered, 'Use UTC.']]);
});

test('a clone copies the turns up to one and then goes its own way', async () => {
  const session = await inline();
  const first = await client.turns.run(session.id, { input: [userMessage('one')] });
  await client.turns.run(session.id, { input: [userMessage('two')] });
  const fork = await client.sessions.clone(session.id, { turn_id: first.turnId!, title: 'Fork' });
  assert.notEqual(fork.id, session.id);
  assert.equal(fork.title, 'Fork');
  assert.equal((await client.turns.list(fork.id)).data.length, 1);
  const next = await client.turns.run(fork.id, { input: [userMessage('[history]')] });
  assert.equal(next.text(), 'History: one | [history]');
});

test('"always allow" grants the tool for the session until revoked', async () => {
  const session = await inline({ model: MODEL });
  await client.sessions.update(session.id, { permissions: { tools: { get_current_datetime: 'ask' } } });
  const ask = () => client.turns.run(session.id, { input: [userMessage('[tool:get_current_datetime]')] });
  const asked = await ask();
  const [pending] = asked.pending();
  await client.turns.run(session.id, { input: [approve(pending!, { always: 'tool' })] });
  const grants = await client.sessions.grants(session.id);
  assert.deepEqual(grants.map((grant) => grant.tool), ['get_current_datetime']);
  assert.deepEqual((await client.sessions.get(session.id)).grants?.map((grant) => grant.id), grants.map((grant) => grant.id));
  const granted = await ask();
  assert.deepEqual(granted.pending(), [], 'no question asked');
  assert.match(granted.text(), /^Tool result: /);
  await client.sessions.revokeGrant(session.id, grants[0]!.id);
  assert.deepEqual(await client.sessions.grants(session.id), []);
  assert.equal((await ask()).pending().length, 1, 'it asks again');
});

test('a session lists its sub-agent threads, forked ones only when asked', async () => {
  const session = await inline({
    model: MODEL,
    config: { dynamic_sub_agents: { enabled: false } },
    sub_agents: [{ name: 'twin', description: 'Forks.', fork: true }],
  });
  await client.turns.run(session.id, { input: [userMessage(call('run_sub_agent', { name: 'forked', task: 'hi', agent: 'twin' }))] });
  await client.turns.run(session.id, { input: [userMessage(call('run_sub_agent', { name: 'own', task: 'hi', agent: 'twin', fork: false }))] });
  assert.deepEqual((await client.sessions.threads(session.id)).map((thread) => [thread.title, thread.forked, thread.status]), [['own', false, 'done']]);
  const all = await client.sessions.threads(session.id, { includeForked: true });
  assert.deepEqual(all.map((thread) => [thread.title, thread.forked, thread.parent_thread_id]), [['forked', true, 'main'], ['own', false, 'main']]);
});

test('tasks, plans and state read back what the agent and the client did', async () => {
  const tasks = await inline({ model: MODEL, config: { tasks: { enabled: true } } });
  assert.deepEqual(await client.sessions.tasks(tasks.id), { version: 0, tasks: [], summary: { total: 0, pending: 0, in_progress: 0, completed: 0 } });
  await client.turns.run(tasks.id, { input: [userMessage(call('task_write', { tasks: [{ title: 'Read' }, { id: 'sum', title: 'Sum', status: 'in_progress' }] }))] });
  const list = await client.sessions.tasks(tasks.id);
  assert.deepEqual(list.tasks.map((task) => [task.id, task.title, task.status]), [['task-1', 'Read', 'pending'], ['sum', 'Sum', 'in_progress']]);
  assert.equal(list.summary.total, 2);

  const planner = await inline({
    model: MODEL,
    modes: [
      { id: 'plan', name: 'Plan', instructions: 'Plan.', transitions_to: 'build', default: true },
      { id: 'build', name: 'Build', instructions: 'Build.' },
    ],
  });
  const submitted = await client.turns.run(planner.id, { input: [userMessage(call('submit_plan', { title: 'Fix it', plan: '1. fix' }))] });
  const [pending] = submitted.pending();
  assert.equal(pending?.name, 'submit_plan');
  const [plan] = await client.sessions.plans(planner.id);
  assert.deepEqual([plan?.title, plan?.status, plan?.mode, plan?.transitions_to], ['Fix it', 'pending_approval', 'plan', 'build']);
  await client.turns.run(planner.id, { input: [deny(pending!, 'add a test')] });
  const [rejected] = await client.sessions.plans(planner.id);
  assert.deepEqual([rejected?.status, rejected?.feedback], ['draft', 'add a test']);

  const stateful = await inline({
    model: MODEL,
    state_schema: { type: 'object', properties: { count: { type: 'integer', minimum: 0, default: 0 } }, required: ['count'] },
  });
  assert.deepEqual(await client.sessions.state(stateful.id), { count: 0 });
  assert.deepEqual((await client.sessions.update(stateful.id, { state: { count: 2 } })).state, { count: 2 });
  assert.deepEqual(await client.sessions.state(stateful.id), { count: 2 });
  assert.equal(await statusOf(client.sessions.update(stateful.id, { state: { count: -1 } })), 422);
});

test('capabilities, models and a sandbox file downloaded from a turn', async (t) => {
  const capabilities = await client.capabilities();
  assert.equal(capabilities.settings.enabled, true);
  const models = await client.models();
  assert.ok(models.some((model) => model.name === 'fake/fake-model' && model.provider.name === 'fake'), JSON.stringify(models));
  if (!capabilities.sandbox.enabled) {
    t.skip('sandboxes are off on this machine');
    return;
  }
  const session = await inline({ model: MODEL, config: { sandbox: { enabled: true } } });
  const turn = await client.turns.run(session.id, { input: [userMessage(call('exec', { command: 'printf "made here" > out.txt' }))] });
  const file = await client.turns.downloadFile(session.id, turn.turnId!, '/workspace/out.txt');
  assert.equal(await file.text(), 'made here');
  assert.match(file.headers.get('content-disposition') ?? '', /filename="out.txt"/);
  assert.equal(await statusOf(client.turns.downloadFile(session.id, turn.turnId!, '/workspace/missing.txt')), 404);
});
