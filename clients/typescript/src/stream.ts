// A turn's event stream: the SSE body of `POST .../turns` or `GET .../subscribe`, read as typed
// events with their sequence numbers and folded as they arrive. When the connection ends before
// `turn.done` (a server restarting, another replica taking over, a proxy's timeout), the stream
// subscribes again after the last sequence number it saw, so the consumer sees every event once.
import { TeamsterError } from './errors.js';
import { TurnAccumulator } from './fold.js';
import { parseSse } from './sse.js';
import type { StreamedEvent, TurnEvent } from './types.js';

/** How a broken stream is picked up again. */
export interface ReconnectOptions {
  /** How many times in a row to subscribe again before giving up (default 5; 0 never). */
  attempts?: number;
  /** The wait before the first new attempt, doubled for each next one (default 250 ms). */
  delayMs?: number;
}

/** Opens the stream again for `turnId` after `after`: the client's subscribe request. */
export type Resubscribe = (turnId: string, after: number, signal: AbortSignal) => Promise<Response>;

/** The stream of one turn. Iterate it (once) for every event as it comes, or await `done()`
 * for the folded turn; `turn` is the fold so far either way. */
export class TurnStream implements AsyncIterable<StreamedEvent> {
  /** The fold of every event read so far. */
  readonly turn: TurnAccumulator;
  private readonly controller = new AbortController();
  private readonly reconnect: Required<ReconnectOptions>;
  private started = false;

  constructor(
    private readonly first: (signal: AbortSignal) => Promise<Response>,
    private readonly resubscribe: Resubscribe,
    options: { turnId?: string; after?: number; signal?: AbortSignal; reconnect?: ReconnectOptions | false },
  ) {
    this.turn = new TurnAccumulator(options.turnId);
    this.turn.lastSequence = options.after ?? 0;
    this.reconnect =
      options.reconnect === false
        ? { attempts: 0, delayMs: 0 }
        : { attempts: options.reconnect?.attempts ?? 5, delayMs: options.reconnect?.delayMs ?? 250 };
    const outer = options.signal;
    if (outer) {
      if (outer.aborted) this.controller.abort(outer.reason);
      else outer.addEventListener('abort', () => this.controller.abort(outer.reason), { once: true });
    }
  }

  /** Stops reading: the request is dropped and the iteration throws `reason`. The turn itself
   * goes on: cancel it with `sessions.cancel`. */
  abort(reason?: unknown): void {
    this.controller.abort(reason);
  }

  /** Reads the stream to `turn.done` (if no one iterates it yet) and returns the folded turn. */
  async done(): Promise<TurnAccumulator> {
    if (!this.started) {
      for await (const _ of this) {
        // Folded as it is read.
      }
    } else if (!this.turn.done) {
      throw new Error('the stream is being iterated: done() is for streams no one iterates');
    }
    return this.turn;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamedEvent> {
    if (this.started) throw new Error('a TurnStream can be read once');
    this.started = true;
    const signal = this.controller.signal;
    let failures = 0;
    let url = '';
    let response: Response | undefined = await this.first(signal);
    let failure: unknown;
    for (;;) {
      let progressed = false;
      if (response) {
        failure = undefined;
        url = response.url;
        try {
          for await (const message of parseSse(response.body!)) {
            if (message.event !== 'message' || message.data === '') continue;
            const sequence = Number(message.id);
            if (!Number.isSafeInteger(sequence)) {
              throw new TeamsterError(`an event without a sequence number: id ${JSON.stringify(message.id)}`, 0, undefined, url);
            }
            // A resumed stream starts after the cursor; anything at or before it was seen.
            if (sequence <= this.turn.lastSequence) continue;
            const event = JSON.parse(message.data) as TurnEvent;
            this.turn.push(event, sequence);
            progressed = true;
            yield { sequence, event };
            if (event.type === 'turn.done') return;
          }
        } catch (error) {
          if (signal.aborted || error instanceof TeamsterError) throw error;
          failure = error;
        }
      }
      // The body ended (or broke, or could not be had) before `turn.done`: subscribe again
      // after the last event seen.
      failures = progressed ? 1 : failures + 1;
      const turnId = this.turn.turnId;
      if (turnId === undefined || failures > this.reconnect.attempts) {
        const why = failure instanceof Error ? `: ${failure.message}` : '';
        throw new TeamsterError(
          `the stream of turn ${turnId ?? '(unknown)'} ended after sequence ${this.turn.lastSequence} without turn.done${why}`,
          0,
          undefined,
          url,
          { cause: failure },
        );
      }
      await sleep(this.reconnect.delayMs * 2 ** (failures - 1), signal);
      try {
        response = await this.resubscribe(turnId, this.turn.lastSequence, signal);
      } catch (error) {
        // A refusal (a TeamsterError: the turn is gone, the key revoked) is final; a network
        // failure is tried again.
        if (signal.aborted || error instanceof TeamsterError) throw error;
        failure = error;
        response = undefined;
      }
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
