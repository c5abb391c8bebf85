// The wire types of the native /api/v1 API, taken from the types generated from its OpenAPI
// document (src/generated/api.ts), plus the Teamster extensions that document does not carry yet
// (each marked as one). Each type is read off the route that takes or answers it (`paths`), not
// off a schema's name, so the client follows the document wherever it names its schemas; a
// change of a route that breaks the client fails `tsc`.
import type { paths } from './generated/api.js';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
/** The body of a route's answer with status `S` (or `default`), of content type `C`. */
type Answer<P extends keyof paths, M extends Method, S extends number | 'default', C extends string = 'application/json'> = paths[P][M] extends {
  responses: infer R;
}
  ? { [K in keyof R & S]: R[K] extends { content: infer Content } ? (C extends keyof Content ? Content[C] : never) : never }[keyof R & S]
  : never;
/** The body of a route's 200 or 201 answer, of content type `C`. */
type Ok<P extends keyof paths, M extends Method, C extends string = 'application/json'> = Answer<P, M, 200 | 201, C>;
/** The `data` of a route's answer. */
type Single<P extends keyof paths, M extends Method> = Ok<P, M> extends { data: infer T } ? T : never;
/** An item of the `data` list of a route's answer. */
type Listed<P extends keyof paths, M extends Method> = Ok<P, M> extends { data: (infer T)[] } ? T : never;
/** The JSON body a route takes. */
type Body<P extends keyof paths, M extends Method> = paths[P][M] extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;
/** The query parameters a route reads. */
type Query<P extends keyof paths, M extends Method> = paths[P][M] extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

/** `{ data: T }`, the envelope of every single-resource response. */
export interface Data<T> {
  data: T;
}

/** Token pagination: there is a next page iff `next_page_token` is a non-empty string. */
export type Pagination = Ok<'/api/v1/sessions', 'get'>['pagination'];

/** `{ data: [...], pagination }`, the envelope of every list response. */
export interface Page<T> {
  data: T[];
  pagination: Pagination;
}

/** The error body of every non-2xx JSON response (the document's 404, or its default answer). */
export type ErrorBody = Answer<'/api/v1/sessions/{session_id}', 'get', 404 | 'default'>;

// -- agents ---------------------------------------------------------------------------------

type DocumentAgentSpec = Body<'/api/v1/agents', 'post'>['manifest'];

/** Teamster extension: one of an agent's modes, layering instructions, model and tools. */
export interface ModeSpec {
  /** 1-64 characters of a-z, 0-9, `_` and `-`, unique among the agent's modes. */
  id: string;
  name?: string;
  description?: string;
  /** Added after the agent's own instructions while the mode is in force. */
  instructions?: string;
  /** The mode's `provider/model`; the agent's when absent. */
  model?: string;
  /** The only tools (by name) offered in this mode; every tool when absent. */
  tools?: string[];
  /** MCP servers whose tools this mode offers on top of the agent's. */
  additional_tools?: NonNullable<DocumentAgentSpec['mcp_servers']>;
  /** The mode an approved plan switches to (the mode then offers `submit_plan`). */
  transitions_to?: string;
  /** The mode a session starts in (the first one when none is marked). */
  default?: boolean;
}

/** Teamster extension: a sub-agent declared up front. */
export interface SubAgentSpec {
  name: string;
  description: string;
  instructions?: string;
  tools?: string[];
  model?: string;
  /** A saved agent whose instructions and model it takes where it declares none. */
  agent?: string;
}

/** An agent's definition: the document's `AgentSpec` and Teamster's extensions of it. */
export type AgentSpec = Omit<DocumentAgentSpec, 'config'> & {
  /** The document's runtime config; Teamster reads more keys (`tasks`, ...). */
  config?: NonNullable<DocumentAgentSpec['config']> & { [extension: string]: unknown };
  /** Teamster extension. */
  modes?: ModeSpec[];
  /** Teamster extension. */
  sub_agents?: SubAgentSpec[];
  /** Teamster extension: values of the instructions' `{{variables}}`. */
  variables?: Record<string, string>;
  /** Teamster extension: what the agent is for (the model never sees it). */
  description?: string;
  /** Teamster extension: what each variable means. */
  variable_descriptions?: Record<string, string>;
  /** Teamster extension: the JSON Schema of the session state. */
  state_schema?: unknown;
};

export type Agent = Omit<Single<'/api/v1/agents/{agent_id}', 'get'>, 'manifest'> & { manifest: AgentSpec };
export type CreateAgentRequest = Omit<Body<'/api/v1/agents', 'post'>, 'manifest'> & { manifest: AgentSpec };
export type UpdateAgentRequest = Omit<Body<'/api/v1/agents/{agent_id}', 'put'>, 'manifest'> & { manifest: AgentSpec };

// -- sessions -------------------------------------------------------------------------------

/** Teamster extension: what a tool may do without asking. */
export type Permission = 'allow' | 'ask' | 'deny';

/** Teamster extension: a session's permissions, by tool name, then by tool category. */
export interface PermissionPolicy {
  tools?: Record<string, Permission>;
  categories?: Record<string, Permission>;
}

/** Teamster extension: an "always allow" answer, one tool or its whole category. */
export interface Grant {
  id: string;
  tool?: string;
  category?: string;
  created_at: string;
}

/** Teamster extension: what a session (and each of its turns) runs with besides its agent. */
export interface SessionControl {
  /** The id of one of the agent's modes. */
  mode?: string;
  /** A `provider/model` replacing the agent's (and the mode's) model. */
  model?: string;
  permissions?: PermissionPolicy;
  grants?: Grant[];
  /** The session state, for agents with a `state_schema`. */
  state?: unknown;
}

export type Session = Single<'/api/v1/sessions/{session_id}', 'get'> & SessionControl;

/** A session of a saved agent, by name, or of an inline spec. */
export type CreateSessionAgent = Exclude<DocumentCreateSession['agent'], { spec: unknown }> | { spec: AgentSpec };

type DocumentCreateSession = Body<'/api/v1/sessions', 'post'>;

export type CreateSessionRequest = Omit<DocumentCreateSession, 'agent'> & {
  agent: CreateSessionAgent;
  /** Teamster extension: the session's title. */
  title?: string;
};

export type UpdateSessionRequest = Omit<Body<'/api/v1/sessions/{session_id}', 'patch'>, 'agent'> & {
  /** Replaces an inline session's spec. */
  agent?: { spec: AgentSpec };
  /** Teamster extension: the session's title. */
  title?: string;
  /** Teamster extension: switches the session to one of its agent's modes. */
  mode?: string;
  /** Teamster extension: the `provider/model` of the next turns; `""` goes back to the agent's. */
  model?: string;
  /** Teamster extension: replaces the session's permission policy. */
  permissions?: PermissionPolicy;
  /** Teamster extension: a JSON merge patch of the session state. */
  state?: unknown;
};

/** Teamster extension: `POST /api/v1/sessions/{id}/clone`. */
export interface CloneSessionRequest {
  /** The clone's title; the source's when absent. */
  title?: string;
  /** The last turn the clone copies; the source's last turn when absent. */
  turn_id?: string;
}

/** Teamster extension: a message queued as a follow-up (the session's next turn) or to steer
 * the running turn. */
export interface QueuedMessage {
  id: string;
  content: UserMessageInput['content'];
  created_at: string;
  /** The turn a follow-up started, when posting it started one at once. */
  turn_id?: string;
}

/** Teamster extension: a session's task list (agents with `config.tasks`). */
export type TaskStatus = 'pending' | 'in_progress' | 'completed';

export interface Task {
  id: string;
  title: string;
  status: TaskStatus;
  notes?: string;
}

export interface TaskList {
  /** How many changes made the list: 0 for a session that never had one. */
  version: number;
  tasks: Task[];
  summary: { total: number; pending: number; in_progress: number; completed: number };
}

/** Teamster extension: a plan the agent submitted with `submit_plan`. */
export type PlanStatus = 'draft' | 'pending_approval' | 'approved' | 'executing' | 'executed' | 'failed';

export interface Plan {
  /** The id of the `submit_plan` call. */
  id: string;
  title: string;
  /** The plan, as markdown. */
  plan: string;
  status: PlanStatus;
  /** The mode it was submitted in, and the one its approval switches to. */
  mode: string;
  transitions_to: string;
  /** The user's feedback on a rejected plan. */
  feedback?: string;
  turn_id: string;
  created_at: string;
}

/** Teamster extension: a sub-agent thread of a session. */
export type SessionThread = Listed<'/api/v1/sessions/{session_id}/threads', 'get'>;

export type Capabilities = Single<'/api/v1/capabilities', 'get'>;
export type AvailableModel = Listed<'/api/v1/models', 'get'>;

export type ListSessionsQuery = Query<'/api/v1/sessions', 'get'>;

// -- turns ----------------------------------------------------------------------------------

export type Turn = Single<'/api/v1/sessions/{session_id}/turns/{turn_id}', 'get'> & SessionControl;
export type TurnState = Turn['state'];
export type TurnMetrics = NonNullable<Extract<TurnState, { status: 'done' }>['metrics']>;

type DocumentCreateTurn = Body<'/api/v1/sessions/{session_id}/turns', 'post'>;
type DocumentTurnInput = NonNullable<DocumentCreateTurn['input']>[number];
type DocumentApproval = Extract<DocumentTurnInput, { type: 'user.tool_approval' }>;

/** Teamster extension: "always allow" on an approval grants the tool, or its category. */
export type GrantScope = 'tool' | 'category';
export type ApprovalDecision =
  | (Extract<DocumentApproval['approval'], { status: 'allow' }> & { always?: GrantScope })
  | Extract<DocumentApproval['approval'], { status: 'deny' }>;

export type UserMessageInput = Extract<DocumentTurnInput, { type: 'user.message' }>;
export type UserContentPart = Exclude<UserMessageInput['content'], string>[number];
export type ToolApprovalInput = Omit<DocumentApproval, 'approval'> & { approval: ApprovalDecision };
export type ToolResponseInput = Extract<DocumentTurnInput, { type: 'user.tool_response' }>;
/** One item of a turn's `input`. */
export type TurnInput = UserMessageInput | ToolApprovalInput | ToolResponseInput;

export type CreateTurnRequest = Omit<DocumentCreateTurn, 'input' | 'stream'> & {
  input?: TurnInput[];
};

export type PageQuery = Query<'/api/v1/sessions/{session_id}/turns', 'get'>;
export type TurnEventsQuery = Query<'/api/v1/sessions/{session_id}/turns/{turn_id}/events', 'get'>;
export type SessionEventsQuery = Query<'/api/v1/sessions/{session_id}/events', 'get'>;

// -- events ---------------------------------------------------------------------------------

/** Every event a turn's stream can carry, by `type`. */
export type TurnEvent = Ok<'/api/v1/sessions/{session_id}/turns', 'post', 'text/event-stream'>;
/** The events lists return (no deltas: messages come folded). */
export type SessionEvent = Listed<'/api/v1/sessions/{session_id}/turns/{turn_id}/events', 'get'>;
export type SessionEventItem = Listed<'/api/v1/sessions/{session_id}/events', 'get'>;
export type TurnEventType = TurnEvent['type'];
/** The event of one `type`. */
export type EventOf<T extends TurnEventType> = Extract<TurnEvent, { type: T }>;

export type TurnCreatedEvent = EventOf<'turn.created'>;
export type TurnDoneEvent = EventOf<'turn.done'>;
export type ModelMessageDelta = EventOf<'model.message.delta'>;
export type ToolResponseEvent = EventOf<'tool.response'>;
export type ThreadCreatedEvent = EventOf<'thread.created'>;
export type ThreadDoneEvent = EventOf<'thread.done'>;
export type ToolApprovalRequiredEvent = EventOf<'tool.approval_required'>;
export type ToolResponseRequiredEvent = EventOf<'tool.response_required'>;
export type McpAuthRequiredEvent = EventOf<'mcp.auth_required'>;
export type ToolCallRef = ToolApprovalRequiredEvent['tool_calls'][number];
export type Usage = NonNullable<EventOf<'model.message'>['usage']>;

/** Teamster extension: a provider's reasoning block, kept whole to be sent back. */
export type ThinkingBlock = { type: 'thinking'; thinking: string; signature: string } | { type: 'redacted_thinking'; data: string };

/** A complete tool call inside a model message. */
export type ToolCall = NonNullable<EventOf<'model.message'>['tool_calls']>[number];
export type ToolInfo = ToolCall['tool_info'];

/** Teamster extension: a user instruction that joined a running turn. */
export interface Steer {
  id: string;
  content: UserMessageInput['content'];
  created_at: string;
}

/** A model message: whole, or the placeholder that deltas grow. */
export type ModelMessage = EventOf<'model.message'> & {
  /** Teamster extension: the reasoning blocks as the provider sent them. */
  thinking_blocks?: ThinkingBlock[];
  /** Teamster extension: the instructions sent with `steer` that the model saw right before
   * this message. */
  steering?: Steer[];
};

/** A turn's event as a stream delivers it: its per-turn sequence number (the SSE `id:`) and body. */
export interface StreamedEvent {
  sequence: number;
  event: TurnEvent;
}

// -- live channels (Teamster extension) -----------------------------------------------------

/** One event of a live channel, by `type` (`agent_start`, `message_update`, `task_updated`,
 * `thread_changed`, `display_state_changed`, ...): the SSE `event:` of each message is its type. */
export type LiveEvent = Ok<'/api/v1/sessions/{session_id}/live', 'get', 'text/event-stream'>;
export type LiveEventType = LiveEvent['type'];
/** The live event of one `type`. */
export type LiveEventOf<T extends LiveEventType> = Extract<LiveEvent, { type: T }>;
/** What the caller's channel (`GET /live`) sends: its sessions created, renamed, deleted. */
export type CallerLiveEvent = LiveEventOf<'thread_created' | 'thread_changed' | 'thread_deleted'>;
/** What a UI shows of a session: title, mode, model, running turn, tasks, plans, follow-ups,
 * state, usage and the last turn's answer, calls and sub-agents. */
export type DisplayState = Single<'/api/v1/sessions/{session_id}/display', 'get'>;

// -- API keys (Teamster extension) ----------------------------------------------------------

export interface Subject {
  subject_id: string;
  subject_type: string;
  subject_slug: string;
}

export type Role = 'operator' | 'admin' | 'member';

export interface ApiKey {
  id: string;
  subject: Subject;
  tenant: string;
  role: Role;
  created_at: string;
  revoked_at?: string;
}

export interface CreateKeyRequest {
  subject: string;
  /** `default` when absent. */
  tenant?: string;
  role?: Role;
  service_account?: boolean;
}

/** A created key: its record and the key itself (`tsk_...`), shown this once. */
export type CreatedKey = ApiKey & { secret: string };
