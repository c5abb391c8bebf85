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

export type Agent = Schemas['Agent'];
export type AgentSpec = Schemas['AgentSpec'];
export type CreateAgentRequest = Schemas['CreateAgentRequest'];
export type UpdateAgentRequest = Schemas['UpdateAgentRequest'];

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

export type CreateSessionRequest = Schemas['CreateSessionRequest'] & {
  /** Teamster extension: the session's title. */
  title?: string;
};

export type UpdateSessionRequest = Schemas['UpdateSessionRequest'] & {
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

/** A model message: whole, or the placeholder that deltas grow. */
export type ModelMessage = Schemas['ModelMessageEvent'] & {
  /** Teamster extension: the reasoning blocks as the provider sent them. */
  thinking_blocks?: ThinkingBlock[];
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
