// Builders for a turn's input items: a user message, and the decisions that resume a turn that
// waits for a person (an approval or denial of a gated call, an answer to a client-side tool
// such as `ask_user_question`). A resuming turn's input holds decisions only, one for every
// waiting call of the turn it resumes.
import type { PendingCall } from './fold.js';
import type { GrantScope, ToolApprovalInput, ToolResponseInput, UserContentPart, UserMessageInput } from './types.js';

/** The waiting call a decision is about: a `PendingCall`, or its thread and call ids. */
export type CallRef = PendingCall | { threadId: string; toolCallId: string };

/** A user message: text, or text and file parts. */
export function userMessage(content: string | UserContentPart[]): UserMessageInput {
  return { type: 'user.message', content };
}

/** Allows a gated call; `always` also allows the tool (or its category) for the rest of the
 * session (a Teamster extension). */
export function approve(call: CallRef, options: { always?: GrantScope } = {}): ToolApprovalInput {
  const approval = options.always ? { status: 'allow' as const, always: options.always } : { status: 'allow' as const };
  return { type: 'user.tool_approval', thread_id: call.threadId, tool_call_id: call.toolCallId, approval };
}

/** Denies a gated call; the model is told the reason. */
export function deny(call: CallRef, reason?: string): ToolApprovalInput {
  const approval = reason === undefined ? { status: 'deny' as const } : { status: 'deny' as const, reason };
  return { type: 'user.tool_approval', thread_id: call.threadId, tool_call_id: call.toolCallId, approval };
}

/** Answers a client-side tool call (a question): `content` is the tool's result. */
export function respond(call: CallRef, content: string): ToolResponseInput {
  return { type: 'user.tool_response', thread_id: call.threadId, tool_call_id: call.toolCallId, content };
}
