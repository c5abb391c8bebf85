// The live channels against a live server on the fake model: a session's opens with its display
// state and shows a turn from agent_start to agent_end, a rename made by another request shows
// on it and on the caller's channel, a new session shows on the caller's, and leaving the loop
// (or aborting) closes the connection on the server too. The server sends a heartbeat every
// second, so that it notices a closed connection within a second.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import { type LiveEvent, type LiveEventOf, type LiveEventType, type LiveStream, type TeamsterClient, userMessage } from '@teamster/client';
import { type Server, startServer, unique } from './harness.js';

let server: Server;
let client: TeamsterClient;
const AGENT = 'live-helper';

before(async () => {
  server = await startServer({ args: ['--heartbeat-secs', '1'] });
  client = server.client;
  await client.agents.create({ name: AGENT, manifest: { model: { name: 'fake/fake-model' }, instructions: 'Help.' } });
});
after(() => server?.close());

/** Reads a channel in the background: every event in order, and waits for those to come. */
class Reader<E extends LiveEvent> {
  readonly events: E[] = [];
  private failure: unknown;
  private ended = false;
  private wake: () => void = () => undefined;
  private readonly done: Promise<void>;

  constructor(readonly stream: LiveStream<E>) {
    this.done = (async () => {
      try {
        for await (const event of stream) {
          this.events.push(event);
          this.wake();
        }
      } catch (error) {
        this.failure = error;
      } finally {
        this.ended = true;
        this.wake();
      }
    })();
  }

  /** Waits (at most `ms`) until `check` finds something in the events read so far. */
  async until<T>(check: (events: E[]) => T | undefined, what: string, ms = 10_000): Promise<T> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = check(this.events);
      if (found !== undefined) return found;
      if (this.ended) throw new Error(`the channel ended (${String(this.failure)}) before ${what}; got ${this.names()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}; got ${this.names()}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** The first event of `type` at or after index `from` (that `matches`, when given). */
  waitFor<T extends LiveEventType>(type: T, from = 0, matches: (event: Extract<E, { type: T }>) => boolean = () => true) {
    return this.until(
      (events) => events.slice(from).find((event): event is Extract<E, { type: T }> => event.type === type && matches(event as Extract<E, { type: T }>)),
      `${type} from ${from}`,
    );
  }

  /** Waits until `types` have come in this order from index `from` (others between them). */
  waitOrdered(types: LiveEventType[], from = 0): Promise<true> {
    return this.until((events) => {
      let position = 0;
      for (const event of events.slice(from)) if (event.type === types[position]) position++;
      return position === types.length ? true : undefined;
    }, `${types.join(', ')} in order from ${from}`);
  }

  names(): string {
    return this.events.map((event) => event.type).join(', ') || 'nothing';
  }

  async close(): Promise<void> {
    this.stream.close();
    await this.done;
  }
}

async function newSession() {
  return client.sessions.create({ agent: { name: AGENT } });
}

/** The streams the server has open now (`teamster_active_streams` of /metrics). */
async function openStreams(): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split('\n').find((row) => row.startsWith('teamster_active_streams '));
  assert.ok(line, 'the metric is there');
  return Number(line.split(' ')[1]);
}

async function streamsBecome(count: number, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  let now = await openStreams();
  while (now !== count) {
    assert.ok(Date.now() < deadline, `expected ${count} open streams, the server has ${now}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    now = await openStreams();
  }
}

test('a session channel opens with the display state, then shows a turn from agent_start to agent_end in order', async () => {
  const session = await newSession();
  const live = new Reader(client.sessions.live(session.id));
  try {
    const first = await live.until((events) => events[0], 'the first event');
    assert.equal(first.type, 'display_state_changed');
    const display = (first as LiveEventOf<'display_state_changed'>).display;
    assert.equal(display.session_id, session.id);
    assert.equal(display.running_turn_id ?? null, null);
    assert.deepEqual(display.tasks.tasks, []);

    const from = live.events.length;
    const turn = await client.turns.run(session.id, { input: [userMessage('[tokens:3] hello')] });
    await live.waitOrdered(['agent_start', 'message_start', 'message_update', 'message_end', 'agent_end', 'display_state_changed'], from);
    const started = await live.waitFor('agent_start', from);
    assert.equal(started.turn_id, turn.turnId);
    const ended = await live.waitFor('agent_end', from);
    assert.deepEqual(ended, { type: 'agent_end', turn_id: turn.turnId, status: 'done' });
    const message = await live.waitFor('message_end', from);
    assert.equal(message.text, turn.text());
    const settled = await live.until((events) => {
      const last = events.at(-1);
      return last?.type === 'display_state_changed' && last.display.running_turn_id == null ? last.display : undefined;
    }, 'a settled display state');
    assert.equal(settled.last_turn_id, turn.turnId);
    assert.equal(settled.last_turn_status, 'done');
    assert.equal(settled.last_answer, turn.text());
    // Once quiet, the channel's last snapshot is the display state as GET reads it.
    const deadline = Date.now() + 5_000;
    for (;;) {
      const current = await client.sessions.display(session.id);
      const last = live.events.at(-1);
      if (last?.type === 'display_state_changed' && isDeepStrictEqual(last.display, current)) break;
      assert.ok(Date.now() < deadline, `GET /display and the last snapshot differ: ${JSON.stringify(current)} ${JSON.stringify(last)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await live.close();
  }
});

test('a rename through sessions.update shows as thread_changed on the session channel and on the caller channel', async () => {
  const session = await newSession();
  const live = new Reader(client.sessions.live(session.id));
  const mine = new Reader(client.live());
  try {
    await live.until((events) => events[0], 'the first event');
    await mine.stream.opened;
    const title = unique('Renamed elsewhere');
    await client.sessions.update(session.id, { title });
    assert.deepEqual(await live.waitFor('thread_changed'), { type: 'thread_changed', session_id: session.id, title });
    assert.deepEqual(await mine.waitFor('thread_changed'), { type: 'thread_changed', session_id: session.id, title });
    // The display state follows it.
    await live.waitFor('display_state_changed', 1, (event) => event.display.title === title);
  } finally {
    await Promise.all([live.close(), mine.close()]);
  }
});

test('a session created through the API shows as thread_created on the caller channel, and its deletion as thread_deleted', async () => {
  const mine = new Reader(client.live());
  try {
    await mine.stream.opened;
    const made = await client.sessions.create({ agent: { name: AGENT }, title: unique('made elsewhere') });
    const created = await mine.waitFor('thread_created', 0, (event) => event.session.id === made.id);
    assert.equal(created.session.title, made.title);
    assert.equal(created.session.agent_name, AGENT);
    await client.sessions.delete(made.id);
    assert.deepEqual(await mine.waitFor('thread_deleted'), { type: 'thread_deleted', session_id: made.id });
    // The caller channel sends nothing but list changes.
    assert.deepEqual(mine.events.map((event) => event.type), ['thread_created', 'thread_deleted']);
  } finally {
    await mine.close();
  }
});

test('leaving the loop closes the connection; so does the abort signal, failing the read with its reason', async () => {
  const session = await newSession();
  // The channels of the tests before are closed, and the server has noticed.
  await streamsBecome(0);
  const before = 0;
  let seen = 0;
  for await (const event of client.sessions.live(session.id)) {
    assert.equal(event.type, 'display_state_changed');
    seen++;
    assert.equal(await openStreams(), before + 1, 'the channel is an open stream');
    break;
  }
  assert.equal(seen, 1);
  await streamsBecome(before);

  const controller = new AbortController();
  const stream = client.live({ signal: controller.signal });
  await stream.opened;
  assert.equal(await openStreams(), before + 1);
  const reading = stream.next();
  controller.abort(new Error('enough'));
  await assert.rejects(reading, /enough/);
  await streamsBecome(before);
});
