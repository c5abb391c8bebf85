// A Server-Sent Events parser (the WHATWG event-stream format): bytes in, one message per blank
// line out. A message's `data:` lines are joined with "\n" (the server splits a long event's JSON
// over several lines between tokens), `id:` sets the last event id, which later messages keep
// until another `id:` changes it, and comments (`: ping`) are skipped.

/** One dispatched SSE message. */
export interface SseMessage {
  /** The `event:` field, `message` when the message named none. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
  /** The last event id at this message: its own `id:`, or the one before it. */
  id: string | undefined;
  /** The `retry:` field in milliseconds, when the message carried one. */
  retry: number | undefined;
}

/** Reads `body` and yields its messages in order; ends when the body does. */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const parser = new SseParser();
  const decoder = new TextDecoder('utf-8');
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      const text = done ? decoder.decode() : decoder.decode(value, { stream: true });
      yield* parser.push(text);
      if (done) break;
    }
    // A message not ended by a blank line is dropped, as the format says.
  } finally {
    // Stops the underlying request when the consumer leaves early.
    await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}

/** The incremental parser: feed it text with `push`, take the messages it completes. */
export class SseParser {
  private buffer = '';
  private sawBom = false;
  private lastId: string | undefined;
  private data: string[] = [];
  private event = '';
  private retry: number | undefined;
  /** A `\r` ended the last chunk: a `\n` that starts the next one belongs to it. */
  private pendingCarriageReturn = false;

  /** The messages completed by `chunk`. */
  push(chunk: string): SseMessage[] {
    let text = chunk;
    if (!this.sawBom && text.length > 0) {
      this.sawBom = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.pendingCarriageReturn && text.startsWith('\n')) text = text.slice(1);
    this.pendingCarriageReturn = false;
    this.buffer += text;
    const messages: SseMessage[] = [];
    let start = 0;
    for (let index = 0; index < this.buffer.length; index++) {
      const char = this.buffer[index];
      if (char !== '\n' && char !== '\r') continue;
      const line = this.buffer.slice(start, index);
      if (char === '\r') {
        if (index + 1 === this.buffer.length) this.pendingCarriageReturn = true;
        else if (this.buffer[index + 1] === '\n') index++;
      }
      start = index + 1;
      const message = this.line(line);
      if (message) messages.push(message);
    }
    this.buffer = this.buffer.slice(start);
    return messages;
  }

  private line(line: string): SseMessage | undefined {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data.push(value);
        break;
      case 'event':
        this.event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break;
    }
    return undefined;
  }

  private dispatch(): SseMessage | undefined {
    const message =
      this.data.length === 0
        ? undefined
        : { event: this.event || 'message', data: this.data.join('\n'), id: this.lastId, retry: this.retry };
    this.data = [];
    this.event = '';
    this.retry = undefined;
    return message;
  }
}
