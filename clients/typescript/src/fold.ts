// Folding a turn's events into what a person sees: each streamed model message rebuilt from its
// placeholder and deltas (text, reasoning, refusal, thinking blocks, tool calls by index), the
// messages and tool results of each thread (`main` and every sub-agent's), the calls waiting for
// a human, and the turn's state. The same fold works on a live stream, a resumed one and the
// events a list returns (which carry messages already folded).
import type {
  McpAuthRequiredEvent,
  ModelMessage,
  ModelMessageDelta,
  ThreadCreatedEvent,
  ThreadDoneEvent,
  ToolCall,
  ToolResponseEvent,
  TurnCreatedEvent,
  TurnDoneEvent,
  TurnEvent,
  TurnState,
  SessionEvent,
} from './types.js';

/** Folds `delta` into `message` in place, as the server folds them for lists. Text fields
 * concatenate, tool calls grow by `index` with their arguments concatenated, thinking blocks are
 * appended, `finish_reason` and `usage` replace; empty strings change nothing. */
export function foldDelta(message: ModelMessage, delta: ModelMessageDelta): void {
  const extended = delta as ModelMessageDelta & { thinking_blocks?: ModelMessage['thinking_blocks'] };
  if (delta.content) {
    const content = message.content;
    if (content === undefined || content === null) {
      message.content = delta.content;
    } else if (typeof content === 'string') {
      message.content = content + delta.content;
    } else {
      const last = content[content.length - 1];
      if (last && last.type === 'text') last.text += delta.content;
      else content.push({ type: 'text', text: delta.content });
    }
  }
  if (delta.refusal) message.refusal = (message.refusal ?? '') + delta.refusal;
  if (delta.reasoning_content) message.reasoning_content = (message.reasoning_content ?? '') + delta.reasoning_content;
  if (extended.thinking_blocks?.length) {
    (message.thinking_blocks ??= []).push(...structuredClone(extended.thinking_blocks));
  }
  for (const call of delta.tool_calls ?? []) {
    const calls = (message.tool_calls ??= []);
    while (calls.length <= call.index) {
      calls.push({ id: '', type: 'function', function: { name: '', arguments: '' }, tool_info: { type: 'truefoundry-system', name: '' } });
    }
    const slot = calls[call.index] as ToolCall;
    if (call.id) slot.id = call.id;
    if (call.type) slot.type = call.type;
    if (call.function?.name) slot.function.name = call.function.name;
    if (call.function?.arguments) slot.function.arguments += call.function.arguments;
    if (call.tool_info) slot.tool_info = structuredClone(call.tool_info);
    if (call.provider_specific_fields) {
      slot.provider_specific_fields = { ...slot.provider_specific_fields, ...call.provider_specific_fields };
    }
  }
  if (delta.finish_reason) message.finish_reason = delta.finish_reason;
  if (delta.usage) message.usage = structuredClone(delta.usage);
}

/** The text of a message: its string content, or its text parts joined. */
export function messageText(message: ModelMessage | undefined | null): string {
  const content = message?.content;
  if (!content) return '';
  if (typeof content === 'string') return content;
  return content.map((part) => (part.type === 'text' ? part.text : '')).join('');
}

/** A tool call with its arguments parsed (`undefined` when they are not JSON). */
export interface ParsedToolCall {
  id: string;
  name: string;
  /** The arguments as the model wrote them. */
  arguments: string;
  input: unknown;
  call: ToolCall;
}

/** The tool calls of a message, arguments parsed. */
export function toolCalls(message: ModelMessage): ParsedToolCall[] {
  return (message.tool_calls ?? []).map((call) => ({
    id: call.id,
    name: call.function.name,
    arguments: call.function.arguments,
    input: parseJson(call.function.arguments),
    call,
  }));
}

/** One thread of a turn: `main`, or a sub-agent's. */
export interface ThreadView {
  id: string;
  /** The sub-agent's title (`thread.created`); absent for `main`. */
  title?: string;
  /** The thread and tool call that started the sub-agent. */
  parent?: ThreadCreatedEvent['parent'];
  agentInfo?: ThreadCreatedEvent['agent_info'];
  /** The thread's model messages, folded, in the order they began. */
  messages: ModelMessage[];
  /** The thread's tool results, in order. */
  toolResponses: ToolResponseEvent[];
  /** The thread's end, once `thread.done` arrived (sub-agents only). */
  done?: ThreadDoneEvent;
}

/** A tool call waiting for a person: an approval (`tool.approval_required`) or an answer
 * (`tool.response_required`, e.g. `ask_user_question`). */
export interface PendingCall {
  kind: 'approval' | 'question';
  threadId: string;
  toolCallId: string;
  /** The tool's name (from the message that made the call). */
  name: string;
  /** The call's arguments as the model wrote them, and parsed. */
  arguments: string;
  input: unknown;
  /** The id of the `tool.*_required` event. */
  eventId: string;
}

/** The fold of one turn's events; push events in stream order. */
export class TurnAccumulator {
  /** The turn's `turn.created`, once seen (a stream resumed past it does not see it). */
  created: TurnCreatedEvent | undefined;
  /** The turn's `turn.done`, once seen. */
  done: TurnDoneEvent | undefined;
  /** The turn's id, from `turn.created` or from whoever subscribed to it. */
  turnId: string | undefined;
  /** The sequence number of the last event pushed with one; 0 before any. */
  lastSequence = 0;
  /** Every event pushed, deltas included, in order. */
  readonly events: TurnEvent[] = [];
  /** Model messages by id, folded. */
  readonly messages = new Map<string, ModelMessage>();
  /** Threads by id, `main` first, then in the order they appeared. */
  readonly threads = new Map<string, ThreadView>();
  private readonly required: PendingCall[] = [];
  private readonly authorizations: McpAuthRequiredEvent['mcp_servers'] = [];
  private readonly decided = new Set<string>();

  constructor(turnId?: string) {
    this.turnId = turnId;
    this.thread('main');
  }

  /** Folds one event in; `sequence` is its stream sequence number, when it came from a stream. */
  push(event: TurnEvent | SessionEvent, sequence?: number): void {
    if (sequence !== undefined) this.lastSequence = sequence;
    this.events.push(event);
    switch (event.type) {
      case 'turn.created':
        this.created = event;
        this.turnId = event.turn_id;
        break;
      case 'turn.done':
        this.done = event;
        break;
      case 'model.message': {
        const message = structuredClone(event) as ModelMessage;
        this.messages.set(message.id, message);
        const thread = this.thread(message.thread_id);
        const index = thread.messages.findIndex((known) => known.id === message.id);
        if (index === -1) thread.messages.push(message);
        else thread.messages[index] = message;
        break;
      }
      case 'model.message.delta': {
        let message = this.messages.get(event.id);
        if (!message) {
          // A stream resumed after the placeholder: the deltas start the message.
          message = { type: 'model.message', id: event.id, thread_id: event.thread_id, created_at: event.created_at ?? '' };
          this.messages.set(message.id, message);
          this.thread(message.thread_id).messages.push(message);
        }
        foldDelta(message, event);
        break;
      }
      case 'tool.response':
        this.thread(event.thread_id).toolResponses.push(event);
        this.decided.add(event.tool_call_id);
        break;
      case 'thread.created': {
        const thread = this.thread(event.thread_id);
        thread.title = event.title;
        thread.parent = event.parent;
        thread.agentInfo = event.agent_info;
        break;
      }
      case 'thread.done':
        this.thread(event.thread_id).done = event;
        break;
      case 'mcp.auth_required':
        this.authorizations.push(...event.mcp_servers);
        break;
      case 'tool.approval_required':
      case 'tool.response_required':
        for (const ref of event.tool_calls) {
          const call = this.messages.get(ref.source_event_id)?.tool_calls?.find((candidate) => candidate.id === ref.id);
          this.required.push({
            kind: event.type === 'tool.approval_required' ? 'approval' : 'question',
            threadId: event.thread_id,
            toolCallId: ref.id,
            name: call?.function.name ?? '',
            arguments: call?.function.arguments ?? '',
            input: call ? parseJson(call.function.arguments) : undefined,
            eventId: event.id,
          });
        }
        break;
      default:
        break;
    }
  }

  /** The turn's state: running until `turn.done`, then its terminal state. */
  get state(): TurnState | undefined {
    if (this.done) return this.done.state;
    return this.created?.state;
  }

  /** The thread `id` (created on first mention). */
  thread(id: string): ThreadView {
    let thread = this.threads.get(id);
    if (!thread) {
      thread = { id, messages: [], toolResponses: [] };
      this.threads.set(id, thread);
    }
    return thread;
  }

  /** The last model message of a thread (`main` by default): the turn's answer once it is done. */
  finalMessage(threadId = 'main'): ModelMessage | undefined {
    const messages = this.threads.get(threadId)?.messages ?? [];
    return messages[messages.length - 1];
  }

  /** The text of the last model message of a thread (`main` by default). */
  text(threadId = 'main'): string {
    return messageText(this.finalMessage(threadId));
  }

  /** The reasoning of the last model message of a thread (`main` by default). */
  reasoning(threadId = 'main'): string {
    return this.finalMessage(threadId)?.reasoning_content ?? '';
  }

  /** The sub-agent threads, in the order they appeared. */
  subAgents(): ThreadView[] {
    return [...this.threads.values()].filter((thread) => thread.parent !== undefined);
  }

  /** The MCP servers that need the user to sign in (`mcp.auth_required`): open each `auth_url`,
   * then start the next turn. */
  authRequired(): McpAuthRequiredEvent['mcp_servers'] {
    return [...this.authorizations];
  }

  /** The calls waiting for a person: asked for during the turn and not answered in it. */
  pending(): PendingCall[] {
    return this.required.filter((call) => !this.decided.has(call.toolCallId));
  }
}

/** Folds a list of events (a stream's, or a list endpoint's) into one turn. */
export function foldEvents(events: Iterable<TurnEvent | SessionEvent>): TurnAccumulator {
  const turn = new TurnAccumulator();
  for (const event of events) turn.push(event);
  return turn;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
