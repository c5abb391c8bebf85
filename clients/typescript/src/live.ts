// A live channel: the SSE body of `GET /sessions/{id}/live` (a session's display state and what
// happens to it) or `GET /live` (the caller's sessions created, renamed, deleted), read as typed
// events. The request goes out at once; a refusal (404, 401) is thrown as a TeamsterError by the
// iteration before any event (and by `opened`). Leaving the loop (`break`, `return`, a thrown
// error), `close()` or the caller's abort signal drops the request. There is nothing to resume
// from: a channel opened again starts from a fresh snapshot, so one that breaks off is thrown
// (status 0) rather than opened again behind the caller's back.
import { TeamsterError } from './errors.js';
import { parseSse } from './sse.js';
import type { LiveEvent } from './types.js';

/** Opens the channel's request (the client's `eventStream`), aborted by `signal`. */
export type OpenLive = (signal: AbortSignal) => Promise<Response>;

/** One live channel, read once: iterate it for its events as they come. */
export class LiveStream<E extends LiveEvent = LiveEvent> implements AsyncIterableIterator<E> {
  /** Resolves once the server has answered with the channel (it is subscribed from then on:
   * what happens after is sent); rejects as the iteration would. */
  readonly opened: Promise<void>;
  private readonly controller = new AbortController();
  private readonly events: AsyncGenerator<E, undefined, undefined>;
  private iterated = false;

  constructor(open: OpenLive, options: { signal?: AbortSignal } = {}) {
    const outer = options.signal;
    if (outer) {
      if (outer.aborted) this.controller.abort(outer.reason);
      else outer.addEventListener('abort', () => this.controller.abort(outer.reason), { once: true });
    }
    const response = open(this.controller.signal);
    // Whoever reads the channel gets its failure; an unread one is no unhandled rejection.
    response.catch(() => undefined);
    this.opened = response.then(() => undefined);
    this.opened.catch(() => undefined);
    this.events = read<E>(response, this.controller.signal);
  }

  /** Drops the request; an iteration under way ends by throwing `reason` (an `AbortError` by
   * default), as `fetch` does. */
  close(reason?: unknown): void {
    this.controller.abort(reason);
  }

  next(): Promise<IteratorResult<E, undefined>> {
    return this.events.next();
  }

  /** Ends the iteration (what `break` calls) and drops the request. */
  async return(): Promise<IteratorResult<E, undefined>> {
    this.controller.abort();
    await this.events.return(undefined).catch(() => undefined);
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<E> {
    if (this.iterated) throw new Error('a LiveStream can be read once');
    this.iterated = true;
    return this;
  }
}

async function* read<E extends LiveEvent>(opening: Promise<Response>, signal: AbortSignal): AsyncGenerator<E, undefined, undefined> {
  const response = await opening;
  const url = response.url;
  try {
    for await (const message of parseSse(response.body!)) {
      if (message.data === '') continue;
      let event: E;
      try {
        event = JSON.parse(message.data) as E;
      } catch (error) {
        throw new TeamsterError(`a live event that is not JSON: ${message.data.slice(0, 200)}`, 0, undefined, url, { cause: error });
      }
      yield event;
    }
    return undefined;
  } catch (error) {
    if (signal.aborted || error instanceof TeamsterError) throw error;
    const why = error instanceof Error ? error.message : String(error);
    throw new TeamsterError(`the live channel broke off: ${why}`, 0, undefined, url, { cause: error });
  }
}
