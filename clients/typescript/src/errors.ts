// The one error the client throws for a server's answer it did not want: a non-2xx status with
// the server's error body, or a stream that could not be read to its end.
import type { ErrorBody } from './types.js';

/** A request the server refused (`status` is the HTTP status) or a stream that broke off. */
export class TeamsterError extends Error {
  /** The HTTP status; 0 when no response was had (a broken stream, a network failure). */
  readonly status: number;
  /** The server's error body, when it sent one in the spec's shape. */
  readonly body: ErrorBody | undefined;
  /** The method and URL of the request. */
  readonly request: string;

  constructor(message: string, status: number, body: ErrorBody | undefined, request: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TeamsterError';
    this.status = status;
    this.body = body;
    this.request = request;
  }

  /** The server's machine-readable code (`not_found`, `invalid_request`, ...). */
  get code(): string | undefined {
    return this.body?.error.code ?? undefined;
  }

  /** The server's error category. */
  get type(): string | undefined {
    return this.body?.error.type ?? undefined;
  }

  /** The request field the error is about, when the server named one. */
  get param(): string | undefined {
    return this.body?.error.param ?? undefined;
  }

  /** The error of a response that was not 2xx; reads its body. */
  static async fromResponse(response: Response, request: string): Promise<TeamsterError> {
    const text = await response.text().catch(() => '');
    let body: ErrorBody | undefined;
    try {
      const parsed: unknown = JSON.parse(text);
      if (isErrorBody(parsed)) body = parsed;
    } catch {
      // Not JSON: the message keeps the text.
    }
    const detail = body?.error.message ?? (text.slice(0, 500) || response.statusText);
    return new TeamsterError(`${request}: ${response.status} ${detail}`, response.status, body, request);
  }
}

function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== 'object' || value === null || !('error' in value)) return false;
  const error = (value as { error: unknown }).error;
  return typeof error === 'object' && error !== null && typeof (error as { message?: unknown }).message === 'string';
}
