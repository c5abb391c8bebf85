// The wire types of the native /api/v1 API, taken from the types generated from its OpenAPI
// document (src/generated/api.ts), plus the Teamster extensions that document does not carry yet
// (each marked as one). A change of the document that breaks the client fails `tsc`.
import type { components } from './generated/api.js';

type Schemas = components['schemas'];

/** `{ data: T }`, the envelope of every single-resource response. */
export interface Data<T> {
  data: T;
}

/** Token pagination: there is a next page iff `next_page_token` is a non-empty string. */
export type Pagination = Schemas['TokenPagination'];

/** `{ data: [...], pagination }`, the envelope of every list response. */
export interface Page<T> {
  data: T[];
  pagination: Pagination;
}

/** The error body of every non-2xx JSON response. */
export type ErrorBody = Schemas['RequestErrorResponse'];

// -- agents ---------------------------------------------------------------------------------

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
  additional_tools?: Schemas['MCPServer'][];
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
export type AgentSpec = Omit<Schemas['AgentSpec'], 'config'> & {
  /** The document's runtime config; Teamster reads more keys (`tasks`, ...). */
  config?: Schemas['RuntimeConfig'] & { [extension: string]: unknown };
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

export type Agent = Omit<Schemas['Agent'], 'manifest'> & { manifest: AgentSpec };
export type CreateAgentRequest = Omit<Schemas['CreateAgentRequest'], 'manifest'> & { manifest: AgentSpec };
export type UpdateAgentRequest = Omit<Schemas['UpdateAgentRequest'], 'manifest'> & { manifest: AgentSpec };

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

export type Session = Schemas['Session'] & SessionControl;

/** A session of a saved agent, by name, or of an inline spec. */
export type CreateSessionAgent = Schemas['SessionAgentNameRef'] | { spec: AgentSpec };

export type CreateSessionRequest = Omit<Schemas['CreateSessionRequest'], 'agent'> & {
  agent: CreateSessionAgent;
  /** Teamster extension: the session's title. */
  title?: string;
};

export type UpdateSessionRequest = Omit<Schemas['UpdateSessionRequest'], 'agent'> & {
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

export type Capabilities = Schemas['CapabilitiesData'];
export type AvailableModel = Schemas['AvailableModel'];

export interface ListSessionsQuery {
  agent_id?: string;
  start_timestamp?: string;
  end_timestamp?: string;
  order?: 'asc' | 'desc';
  limit?: number;
  page_token?: string;
}

// -- turns ----------------------------------------------------------------------------------

export type Turn = Schemas['Turn'] & SessionControl;
export type TurnState = Schemas['TurnState'];
export type TurnMetrics = Schemas['TurnMetrics'];

/** Teamster extension: "always allow" on an approval grants the tool, or its category. */
export type GrantScope = 'tool' | 'category';
export type ApprovalDecision = (Schemas['ApprovalAllow'] & { always?: GrantScope }) | Schemas['ApprovalDeny'];

export type UserMessageInput = Schemas['UserMessage'];
export type UserContentPart = Schemas['UserMessageContentItem'];
export type ToolApprovalInput = Omit<Schemas['UserToolApprovalEvent'], 'approval'> & { approval: ApprovalDecision };
export type ToolResponseInput = Schemas['UserToolResponseEvent'];
/** One item of a turn's `input`. */
export type TurnInput = UserMessageInput | ToolApprovalInput | ToolResponseInput;

export type CreateTurnRequest = Omit<Schemas['CreateTurnRequest'], 'input' | 'stream'> & {
  input?: TurnInput[];
};

export interface PageQuery {
  limit?: number;
  page_token?: string;
}

export interface TurnEventsQuery extends PageQuery {
  order?: 'asc' | 'desc';
}

export interface SessionEventsQuery extends PageQuery {
  last_turn_id?: string;
}

// -- events ---------------------------------------------------------------------------------

/** Every event a turn's stream can carry, by `type`. */
export type TurnEvent = Schemas['TurnStreamingEvent'];
/** The events lists return (no deltas: messages come folded). */
export type SessionEvent = Schemas['SessionEvent'];
export type SessionEventItem = Schemas['SessionEventItem'];
export type TurnEventType = TurnEvent['type'];
/** The event of one `type`. */
export type EventOf<T extends TurnEventType> = Extract<TurnEvent, { type: T }>;

export type TurnCreatedEvent = Schemas['TurnCreatedEvent'];
export type TurnDoneEvent = Schemas['TurnDoneEvent'];
export type ModelMessageDelta = Schemas['ModelMessageDeltaEvent'];
export type ToolResponseEvent = Schemas['ToolResponseEvent'];
export type ThreadCreatedEvent = Schemas['ThreadCreatedEvent'];
export type ThreadDoneEvent = Schemas['ThreadDoneEvent'];
export type ToolApprovalRequiredEvent = Schemas['ToolApprovalRequiredEvent'];
export type ToolResponseRequiredEvent = Schemas['ToolResponseRequiredEvent'];
export type McpAuthRequiredEvent = Schemas['MCPAuthRequiredEvent'];
export type ToolCallRef = Schemas['ToolCallRef'];
export type ToolInfo = Schemas['ToolInfo'];
export type Usage = Schemas['ModelMessageUsage'];

/** Teamster extension: a provider's reasoning block, kept whole to be sent back. */
export type ThinkingBlock = { type: 'thinking'; thinking: string; signature: string } | { type: 'redacted_thinking'; data: string };

/** A complete tool call inside a model message. */
export type ToolCall = Schemas['ToolCall'];

/** Teamster extension: a user instruction that joined a running turn. */
export interface Steer {
  id: string;
  content: UserMessageInput['content'];
  created_at: string;
}

/** A model message: whole, or the placeholder that deltas grow. */
export type ModelMessage = Schemas['ModelMessageEvent'] & {
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

// -- API keys (Teamster extension) ----------------------------------------------------------

export interface Subject {
  subject_id: string;
  subject_type: string;
  subject_slug: string;
}

export type Role = 'admin' | 'member';

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
