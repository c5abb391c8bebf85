// The client of the native /api/v1 API: one method per route, bodies and answers typed by the
// OpenAPI document's types (./types.ts), every refusal a TeamsterError, turns streamed as typed
// events and folded (./stream.ts), live channels read as typed events (./live.ts). Only the
// global `fetch` is used.
import { TeamsterError } from './errors.js';
import type { TurnAccumulator } from './fold.js';
import { LiveStream } from './live.js';
import { type ReconnectOptions, TurnStream } from './stream.js';
import type {
  Agent,
  ApiKey,
  AvailableModel,
  CallerLiveEvent,
  Capabilities,
  CloneSessionRequest,
  CreateAgentRequest,
  CreatedKey,
  CreateKeyRequest,
  CreateSessionRequest,
  CreateTurnRequest,
  Data,
  DisplayState,
  Grant,
  ListSessionsQuery,
  LiveEvent,
  Page,
  PageQuery,
  Plan,
  SessionThread,
  QueuedMessage,
  Session,
  SessionEvent,
  SessionEventItem,
  SessionEventsQuery,
  TaskList,
  Turn,
  TurnEventsQuery,
  UpdateAgentRequest,
  UpdateSessionRequest,
  UserMessageInput,
} from './types.js';

export interface TeamsterClientOptions {
  /** The server's URL, with any path prefix it is served under (`http://localhost:8080`). */
  baseUrl: string;
  /** An API key (`tsk_...`), sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** Headers for every request. */
  headers?: Record<string, string>;
  /** The `fetch` to use; the global one by default. */
  fetch?: typeof fetch;
  /** How a turn's stream that breaks off is resumed; `false` never resumes. */
  reconnect?: ReconnectOptions | false;
}

/** Options of a live channel. */
export interface LiveOptions {
  /** Drops the channel's request; the iteration then throws the signal's reason. */
  signal?: AbortSignal;
}

/** Options of a streamed request. */
export interface StreamOptions {
  /** Aborts the request (the turn goes on: cancel it with `sessions.cancel`). */
  signal?: AbortSignal;
  reconnect?: ReconnectOptions | false;
}

type Query = Record<string, string | number | boolean | undefined>;

interface RequestOptions {
  query?: Query;
  body?: unknown;
  signal?: AbortSignal;
  accept?: string;
  headers?: Record<string, string>;
}

/** Teamster's native API. */
export class TeamsterClient {
  readonly agents: AgentsApi;
  readonly sessions: SessionsApi;
  readonly turns: TurnsApi;
  readonly keys: KeysApi;
  private readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;
  /** @internal */
  readonly reconnect: ReconnectOptions | false | undefined;

  constructor(options: TeamsterClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.headers = { ...options.headers };
    if (options.apiKey) this.headers.authorization = `Bearer ${options.apiKey}`;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.reconnect = options.reconnect;
    this.agents = new AgentsApi(this);
    this.sessions = new SessionsApi(this);
    this.turns = new TurnsApi(this);
    this.keys = new KeysApi(this);
  }

  /** What this server offers (sandboxes, skills, settings). */
  async capabilities(): Promise<Capabilities> {
    return (await this.json<Data<Capabilities>>('GET', '/capabilities')).data;
  }

  /** The models of the configured providers, as agents name them (`provider/model`). */
  async models(): Promise<AvailableModel[]> {
    return (await this.json<Data<AvailableModel[]>>('GET', '/models')).data;
  }

  /** The caller's live channel (`GET /live`): `thread_created`, `thread_changed` and
   * `thread_deleted` for the caller's own sessions (those `sessions.list` lists), as any client
   * makes them. Iterate it; leaving the loop closes the request. */
  live(options: LiveOptions = {}): LiveStream<CallerLiveEvent> {
    return new LiveStream<CallerLiveEvent>((signal) => this.eventStream('GET', '/live', { signal }), options);
  }

  /** Sends a request under `/api/v1` and returns the response, which is 2xx: any other status
   * is thrown as a TeamsterError with the server's error body. @internal */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    // A relative base (`''`, `/teamster`) is the page's own server, in a browser.
    const page = typeof globalThis.location === 'undefined' ? undefined : globalThis.location.href;
    const url = new URL(`${this.baseUrl}/api/v1${path}`, page);
    for (const [name, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { accept: options.accept ?? 'application/json', ...this.headers, ...options.headers };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const request = `${method} ${url.pathname}${url.search}`;
    let response: Response;
    try {
      response = await this.fetch(url, {
        method,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        signal: options.signal,
      });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const message = error instanceof Error ? error.message : String(error);
      throw new TeamsterError(`${request}: ${message}`, 0, undefined, request, { cause: error });
    }
    if (!response.ok) throw await TeamsterError.fromResponse(response, request);
    return response;
  }

  /** A JSON request; `undefined` for a 204. @internal */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.send(method, path, options);
    if (response.status === 204) return undefined as T;
    const text = await response.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** An SSE request: the response once its status is 2xx and it is an event stream. @internal */
  async eventStream(method: string, path: string, options: RequestOptions): Promise<Response> {
    const response = await this.send(method, path, { ...options, accept: 'text/event-stream' });
    const type = response.headers.get('content-type') ?? '';
    if (!type.startsWith('text/event-stream') || !response.body) {
      const request = `${method} /api/v1${path}`;
      throw new TeamsterError(`${request}: expected an event stream, got ${type || 'no body'}`, response.status, undefined, request);
    }
    return response;
  }
}

const segment = encodeURIComponent;

/** `/api/v1/agents`: saved agents; an update stores a new version. */
export class AgentsApi {
  constructor(private readonly client: TeamsterClient) {}

  async list(): Promise<Agent[]> {
    return (await this.client.json<Data<Agent[]>>('GET', '/agents')).data;
  }

  /** By id or by name. */
  async get(agent: string): Promise<Agent> {
    return (await this.client.json<Data<Agent>>('GET', `/agents/${segment(agent)}`)).data;
  }

  async create(body: CreateAgentRequest): Promise<Agent> {
    return (await this.client.json<Data<Agent>>('POST', '/agents', { body })).data;
  }

  async update(agent: string, body: UpdateAgentRequest): Promise<Agent> {
    return (await this.client.json<Data<Agent>>('PUT', `/agents/${segment(agent)}`, { body })).data;
  }

  async delete(agent: string): Promise<void> {
    await this.client.json('DELETE', `/agents/${segment(agent)}`);
  }
}

/** `/api/v1/sessions`: a user's conversations with an agent. */
export class SessionsApi {
  constructor(private readonly client: TeamsterClient) {}

  /** A session of a saved agent (`{ agent: { name } }`) or of an inline spec (`{ agent: { spec } }`). */
  async create(body: CreateSessionRequest): Promise<Session> {
    return (await this.client.json<Data<Session>>('POST', '/sessions', { body })).data;
  }

  /** A page of the caller's sessions, most recently updated first. */
  async list(query: ListSessionsQuery = {}): Promise<Page<Session>> {
    return this.client.json<Page<Session>>('GET', '/sessions', { query: { ...query } });
  }

  /** Every session, page after page. */
  async *iterate(query: Omit<ListSessionsQuery, 'page_token'> = {}): AsyncGenerator<Session> {
    let page_token: string | undefined;
    do {
      const page = await this.list({ ...query, page_token });
      yield* page.data;
      page_token = page.pagination.next_page_token || undefined;
    } while (page_token);
  }

  async get(sessionId: string): Promise<Session> {
    return (await this.client.json<Data<Session>>('GET', `/sessions/${segment(sessionId)}`)).data;
  }

  /** Changes the title, the inline spec, and (Teamster extensions) the mode, the model, the
   * permissions or the state; what the body leaves out stays. */
  async update(sessionId: string, body: UpdateSessionRequest): Promise<Session> {
    return (await this.client.json<Data<Session>>('PATCH', `/sessions/${segment(sessionId)}`, { body })).data;
  }

  async delete(sessionId: string): Promise<void> {
    await this.client.json('DELETE', `/sessions/${segment(sessionId)}`);
  }

  /** Cancels the session's running turn (it ends `cancelled`, its partial output kept). */
  async cancel(sessionId: string): Promise<void> {
    await this.client.json('POST', `/sessions/${segment(sessionId)}/cancel`, { body: {} });
  }

  /** Teamster extension: a new session with a copy of this one's turns, up to `turn_id`. */
  async clone(sessionId: string, body: CloneSessionRequest = {}): Promise<Session> {
    return (await this.client.json<Data<Session>>('POST', `/sessions/${segment(sessionId)}/clone`, { body })).data;
  }

  /** Teamster extension: queues a message that starts the session's next turn once the running
   * one ends (at once when none runs: the answer then names the turn). */
  async followUp(sessionId: string, content: UserMessageInput['content']): Promise<QueuedMessage> {
    return (await this.client.json<Data<QueuedMessage>>('POST', `/sessions/${segment(sessionId)}/follow-ups`, { body: { content } })).data;
  }

  /** Teamster extension: the queued follow-ups, in order. */
  async followUps(sessionId: string): Promise<QueuedMessage[]> {
    return (await this.client.json<Data<QueuedMessage[]>>('GET', `/sessions/${segment(sessionId)}/follow-ups`)).data;
  }

  /** Teamster extension: drops a queued follow-up. */
  async cancelFollowUp(sessionId: string, followUpId: string): Promise<void> {
    await this.client.json('DELETE', `/sessions/${segment(sessionId)}/follow-ups/${segment(followUpId)}`);
  }

  /** Teamster extension: an instruction for the running turn, which the model sees before its
   * next call (409 when no turn runs). */
  async steer(sessionId: string, content: UserMessageInput['content']): Promise<QueuedMessage> {
    return (await this.client.json<Data<QueuedMessage>>('POST', `/sessions/${segment(sessionId)}/steer`, { body: { content } })).data;
  }

  /** Teamster extension: the session's task list. */
  async tasks(sessionId: string): Promise<TaskList> {
    return (await this.client.json<Data<TaskList>>('GET', `/sessions/${segment(sessionId)}/tasks`)).data;
  }

  /** Teamster extension: the plans the agent submitted, oldest first. */
  async plans(sessionId: string): Promise<Plan[]> {
    return (await this.client.json<Data<Plan[]>>('GET', `/sessions/${segment(sessionId)}/plans`)).data;
  }

  /** Teamster extension: the sub-agent threads the session's turns started, oldest first;
   * forked threads only with `includeForked`. */
  async threads(sessionId: string, options: { includeForked?: boolean } = {}): Promise<SessionThread[]> {
    const query = options.includeForked ? { include: 'forked' } : {};
    return (await this.client.json<Data<SessionThread[]>>('GET', `/sessions/${segment(sessionId)}/threads`, { query })).data;
  }

  /** Teamster extension: the session's "always allow" grants. */
  async grants(sessionId: string): Promise<Grant[]> {
    return (await this.client.json<Data<Grant[]>>('GET', `/sessions/${segment(sessionId)}/grants`)).data;
  }

  /** Teamster extension: revokes a grant; the tool asks again. */
  async revokeGrant(sessionId: string, grantId: string): Promise<void> {
    await this.client.json('DELETE', `/sessions/${segment(sessionId)}/grants/${segment(grantId)}`);
  }

  /** Teamster extension: the session state (agents with a `state_schema`); change it with
   * `update(id, { state: mergePatch })`. */
  async state(sessionId: string): Promise<unknown> {
    return (await this.client.json<Data<unknown>>('GET', `/sessions/${segment(sessionId)}/state`)).data;
  }

  /** Teamster extension: the session's live channel (`GET /sessions/{id}/live`). It opens
   * with `display_state_changed` (the whole display state), then sends what happens as it
   * happens (`agent_start`, `message_update`, `tool_end`, `task_updated`, `thread_changed`,
   * ...), each followed by the display state again. Iterate it; leaving the loop closes the
   * request; a refusal (404, 401) is thrown before the first event. */
  live(sessionId: string, options: LiveOptions = {}): LiveStream<LiveEvent> {
    const path = `/sessions/${segment(sessionId)}/live`;
    return new LiveStream<LiveEvent>((signal) => this.client.eventStream('GET', path, { signal }), options);
  }

  /** Teamster extension: the session's display state now, what its live channel would open with. */
  async display(sessionId: string): Promise<DisplayState> {
    return (await this.client.json<Data<DisplayState>>('GET', `/sessions/${segment(sessionId)}/display`)).data;
  }

  /** A page of the session's events, newest first, each with its turn id. */
  async events(sessionId: string, query: SessionEventsQuery = {}): Promise<Page<SessionEventItem>> {
    return this.client.json<Page<SessionEventItem>>('GET', `/sessions/${segment(sessionId)}/events`, { query: { ...query } });
  }
}

/** `/api/v1/sessions/{id}/turns`: a session's requests and their event streams. */
export class TurnsApi {
  constructor(private readonly client: TeamsterClient) {}

  /** Starts a turn and streams its events from the first (`turn.created`) to `turn.done`. */
  stream(sessionId: string, body: CreateTurnRequest, options: StreamOptions = {}): TurnStream {
    const path = `/sessions/${segment(sessionId)}/turns`;
    return new TurnStream(
      (signal) => this.client.eventStream('POST', path, { body: { ...body, stream: true }, signal }),
      (turnId, after, signal) => this.openSubscription(sessionId, turnId, after, signal),
      { signal: options.signal, reconnect: options.reconnect ?? this.client.reconnect },
    );
  }

  /** Starts a turn, reads its stream to the end and returns it folded. */
  async run(sessionId: string, body: CreateTurnRequest, options: StreamOptions = {}): Promise<TurnAccumulator> {
    return this.stream(sessionId, body, options).done();
  }

  /** Starts a turn without streaming: the answer is the turn, still running. */
  async create(sessionId: string, body: CreateTurnRequest): Promise<Turn> {
    const path = `/sessions/${segment(sessionId)}/turns`;
    return (await this.client.json<Data<Turn>>('POST', path, { body: { ...body, stream: false } })).data;
  }

  /** Streams a turn's events after sequence number `after` (0, the default, for all of them):
   * exactly the events a broken stream missed, during the turn or after it ended. */
  subscribe(sessionId: string, turnId: string, options: StreamOptions & { after?: number } = {}): TurnStream {
    const after = options.after ?? 0;
    return new TurnStream(
      (signal) => this.openSubscription(sessionId, turnId, after, signal),
      (id, from, signal) => this.openSubscription(sessionId, id, from, signal),
      { turnId, after, signal: options.signal, reconnect: options.reconnect ?? this.client.reconnect },
    );
  }

  /** Waits for a turn to end and returns it folded (its whole stream replayed). */
  async wait(sessionId: string, turnId: string, options: StreamOptions = {}): Promise<TurnAccumulator> {
    return this.subscribe(sessionId, turnId, options).done();
  }

  /** A page of the session's turns, newest first. */
  async list(sessionId: string, query: PageQuery = {}): Promise<Page<Turn>> {
    return this.client.json<Page<Turn>>('GET', `/sessions/${segment(sessionId)}/turns`, { query: { ...query } });
  }

  async get(sessionId: string, turnId: string): Promise<Turn> {
    return (await this.client.json<Data<Turn>>('GET', `/sessions/${segment(sessionId)}/turns/${segment(turnId)}`)).data;
  }

  /** A page of a turn's content events (model messages folded; no `turn.*`, no deltas). */
  async events(sessionId: string, turnId: string, query: TurnEventsQuery = {}): Promise<Page<SessionEvent>> {
    const path = `/sessions/${segment(sessionId)}/turns/${segment(turnId)}/events`;
    return this.client.json<Page<SessionEvent>>('GET', path, { query: { ...query } });
  }

  /** A file of the sandbox the turn ran in (`path` absolute, under `/workspace` or `/tmp`): the
   * response, to read as a blob, a stream or text. */
  async downloadFile(sessionId: string, turnId: string, path: string, options: { signal?: AbortSignal } = {}): Promise<Response> {
    const route = `/sessions/${segment(sessionId)}/turns/${segment(turnId)}/download-sandbox-file`;
    return this.client.send('GET', route, { query: { path }, accept: '*/*', signal: options.signal });
  }

  /** The subscription request; the cursor goes as `Last-Event-ID`, as an EventSource sends it. */
  private openSubscription(sessionId: string, turnId: string, after: number, signal: AbortSignal): Promise<Response> {
    const path = `/sessions/${segment(sessionId)}/turns/${segment(turnId)}/subscribe`;
    const headers = after > 0 ? { 'last-event-id': String(after) } : undefined;
    return this.client.eventStream('GET', path, { signal, headers });
  }
}

/** `/api/v1/keys` (a Teamster extension, for admins): API keys. */
export class KeysApi {
  constructor(private readonly client: TeamsterClient) {}

  async list(): Promise<ApiKey[]> {
    return (await this.client.json<Data<ApiKey[]>>('GET', '/keys')).data;
  }

  /** A new key; its `secret` is in this answer only. */
  async create(body: CreateKeyRequest): Promise<CreatedKey> {
    return (await this.client.json<Data<CreatedKey>>('POST', '/keys', { body })).data;
  }

  async revoke(keyId: string): Promise<ApiKey> {
    return (await this.client.json<Data<ApiKey>>('DELETE', `/keys/${segment(keyId)}`)).data;
  }
}
