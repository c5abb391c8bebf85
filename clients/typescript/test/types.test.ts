// Compile-time checks that every type the client reads off the OpenAPI document's routes is there
// (a route renamed or an answer reshaped makes it `never`, and this file fails to compile), and
// that the unions have the members the client relies on.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type * as T from '@teamster/client';

type NotNever<X> = [X] extends [never] ? false : true;
type Equal<A, B> = (<V>() => V extends A ? 1 : 2) extends <V>() => V extends B ? 1 : 2 ? true : false;
type Twelve =
  | 'turn.created' | 'turn.done' | 'model.message' | 'model.message.delta' | 'tool.response' | 'thread.created'
  | 'thread.done' | 'mcp.initialize' | 'mcp.auth_required' | 'sandbox.created' | 'tool.approval_required' | 'tool.response_required';
type LiveTypes =
  | 'display_state_changed' | 'agent_start' | 'agent_end' | 'message_start' | 'message_update' | 'message_end'
  | 'tool_start' | 'tool_end' | 'tool_approval_required' | 'tool_suspended' | 'usage_update' | 'mode_changed'
  | 'model_changed' | 'state_changed' | 'task_updated' | 'plans_changed' | 'follow_up_queued' | 'subagent_start'
  | 'subagent_end' | 'thread_changed' | 'thread_created' | 'thread_deleted';
/** Compiles only when `X` is `true`. */
type Check<X extends true> = X;

export type Checks = [
  Check<NotNever<T.Pagination>>,
  Check<NotNever<T.ErrorBody>>,
  Check<NotNever<T.AgentSpec>>,
  Check<NotNever<T.Agent>>,
  Check<NotNever<T.CreateAgentRequest>>,
  Check<NotNever<T.UpdateAgentRequest>>,
  Check<NotNever<T.Session>>,
  Check<NotNever<T.CreateSessionAgent>>,
  Check<NotNever<T.CreateSessionRequest>>,
  Check<NotNever<T.UpdateSessionRequest>>,
  Check<NotNever<T.ListSessionsQuery>>,
  Check<NotNever<T.Capabilities>>,
  Check<NotNever<T.AvailableModel>>,
  Check<NotNever<T.Turn>>,
  Check<NotNever<T.TurnState>>,
  Check<NotNever<T.TurnMetrics>>,
  Check<NotNever<T.ApprovalDecision>>,
  Check<NotNever<T.UserMessageInput>>,
  Check<NotNever<T.UserContentPart>>,
  Check<NotNever<T.ToolApprovalInput>>,
  Check<NotNever<T.ToolResponseInput>>,
  Check<NotNever<T.CreateTurnRequest>>,
  Check<NotNever<T.PageQuery>>,
  Check<NotNever<T.TurnEventsQuery>>,
  Check<NotNever<T.SessionEventsQuery>>,
  Check<NotNever<T.TurnEvent>>,
  Check<NotNever<T.SessionEvent>>,
  Check<NotNever<T.SessionEventItem>>,
  Check<NotNever<T.TurnCreatedEvent>>,
  Check<NotNever<T.TurnDoneEvent>>,
  Check<NotNever<T.ModelMessageDelta>>,
  Check<NotNever<T.ToolResponseEvent>>,
  Check<NotNever<T.ThreadCreatedEvent>>,
  Check<NotNever<T.ThreadDoneEvent>>,
  Check<NotNever<T.ToolApprovalRequiredEvent>>,
  Check<NotNever<T.ToolResponseRequiredEvent>>,
  Check<NotNever<T.McpAuthRequiredEvent>>,
  Check<NotNever<T.ToolCallRef>>,
  Check<NotNever<T.Usage>>,
  Check<NotNever<T.ToolCall>>,
  Check<NotNever<T.ToolInfo>>,
  Check<NotNever<T.ModelMessage>>,
  Check<NotNever<T.LiveEvent>>,
  Check<NotNever<T.DisplayState>>,
  Check<NotNever<T.LiveEventOf<'display_state_changed'>['display']['tasks']>>,
  // The live channels carry (at least) these events, and the caller's exactly its three.
  Check<Equal<Exclude<LiveTypes, T.LiveEventType>, never>>,
  Check<Equal<T.CallerLiveEvent['type'], 'thread_created' | 'thread_changed' | 'thread_deleted'>>,
  // The stream carries (at least) the twelve event types, and lists no other kind.
  Check<Equal<Exclude<Twelve, T.TurnEventType>, never>>,
  Check<Equal<Exclude<T.SessionEvent['type'], T.TurnEventType>, never>>,
  Check<Equal<Exclude<'running' | 'done' | 'cancelled' | 'error', T.TurnState['status']>, never>>,
  Check<Equal<T.TurnInput['type'], 'user.message' | 'user.tool_approval' | 'user.tool_response'>>,
];

test('the types read off the OpenAPI document are all there (checked by tsc)', () => {
  const compiled: Checks[number] = true;
  assert.equal(compiled, true);
});
