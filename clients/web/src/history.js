// A session's history as useChat's UI messages, folded from its events
// (GET /api/v1/sessions/{id}/events) the way the server's UI message stream folds them: a user
// message per turn started by one, one assistant message per such turn (continued by the turns
// that answer its waiting calls), a step per main-thread model message, tool parts with their
// approval, output or denial (a sub-agent's call once it waits for the user), and `data-agent`
// parts for sub-agent threads.
//
// A turn still running is left out but for its user message: the chat resumes its stream
// (GET /api/v1/chat/{id}/stream), which replays it from the start.

import { listAll } from './api.js';

export async function loadHistory(sessionId) {
  const items = await listAll(`sessions/${encodeURIComponent(sessionId)}/events?limit=100`, 20_000);
  items.reverse();
  return foldHistory(items);
}

// A call's part id, as the stream names it: a sub-agent's calls are `<thread>.<call>`.
function partCallId(threadId, toolCallId) {
  return !threadId || threadId === 'main' ? toolCallId : `${threadId}.${toolCallId}`;
}

// The tool output as the stream sends it: JSON objects and arrays parsed, anything else text.
export function resultValue(content) {
  const trimmed = (content ?? '').trimStart();
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    try {
      return JSON.parse(content);
    } catch {
      // Not JSON after all: text.
    }
  }
  return content ?? '';
}

function parseArguments(text) {
  if (!text) return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function mediaTypeOf(dataUrl) {
  return /^data:([^;,]+)/.exec(dataUrl)?.[1] ?? 'application/octet-stream';
}

function userParts(content) {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return (content ?? []).map((part) =>
    part.type === 'file'
      ? { type: 'file', mediaType: mediaTypeOf(part.data), filename: part.name, url: part.data }
      : { type: 'text', text: part.text ?? '' },
  );
}

// `items` in order, oldest first: { turn_id, event }. Returns { messages, running } where
// `running` is the id of a turn with no turn.done yet.
export function foldHistory(items) {
  const finished = new Set(items.filter(({ event }) => event.type === 'turn.done').map(({ turn_id }) => turn_id));
  const messages = [];
  let assistant = null;
  let running = null;
  const tools = new Map();
  const agents = new Map();
  // Sub-agents' calls: one becomes a tool part (as the stream makes it) once it waits for the user.
  const subCalls = new Map();

  const toolPart = (id) => tools.get(id);
  const surface = (id) => {
    if (tools.has(id)) return tools.get(id);
    const call = subCalls.get(id);
    if (!call || !assistant) return null;
    const part = { type: `tool-${call.name}`, toolCallId: id, state: 'input-available', input: call.input };
    tools.set(id, part);
    assistant.parts.push(part);
    return part;
  };
  for (const { turn_id: turnId, event } of items) {
    if (event.type === 'turn.created') {
      const decisions = (event.input ?? []).filter((item) => item.type !== 'user.message');
      for (const item of event.input ?? []) {
        if (item.type === 'user.message') {
          messages.push({ id: `user-${turnId}`, role: 'user', parts: userParts(item.content) });
          assistant = null;
        }
      }
      if (!finished.has(turnId)) {
        running = turnId;
        continue;
      }
      if (!assistant || decisions.length === 0) {
        assistant = { id: turnId, role: 'assistant', parts: [], metadata: {} };
        messages.push(assistant);
      }
      for (const decision of decisions) {
        const part = toolPart(partCallId(decision.thread_id, decision.tool_call_id));
        if (!part) continue;
        if (decision.type === 'user.tool_approval') {
          const approved = decision.approval?.status === 'allow';
          part.approval = { id: part.toolCallId, approved, reason: decision.approval?.reason };
          part.state = approved ? 'approval-responded' : 'output-denied';
        } else if (decision.type === 'user.tool_response') {
          part.state = 'output-available';
          part.output = resultValue(decision.content);
        }
      }
      continue;
    }
    if (!finished.has(turnId) || !assistant) continue;
    switch (event.type) {
      case 'model.message': {
        if (event.thread_id !== 'main') {
          for (const call of event.tool_calls ?? []) {
            subCalls.set(partCallId(event.thread_id, call.id), { name: call.function.name, input: parseArguments(call.function.arguments) });
          }
          break;
        }
        assistant.parts.push({ type: 'step-start' });
        if (event.reasoning_content) assistant.parts.push({ type: 'reasoning', text: event.reasoning_content, state: 'done' });
        const text = typeof event.content === 'string'
          ? event.content
          : (event.content ?? []).map((part) => part.text ?? part.refusal ?? '').join('');
        if (text) assistant.parts.push({ type: 'text', text, state: 'done' });
        if (event.refusal) assistant.parts.push({ type: 'text', text: event.refusal, state: 'done' });
        for (const call of event.tool_calls ?? []) {
          const part = {
            type: `tool-${call.function.name}`,
            toolCallId: call.id,
            state: 'input-available',
            input: parseArguments(call.function.arguments),
          };
          tools.set(call.id, part);
          assistant.parts.push(part);
        }
        break;
      }
      case 'tool.response': {
        const part = toolPart(partCallId(event.thread_id, event.tool_call_id));
        if (!part || part.state === 'output-denied') break;
        const agent = [...agents.values()].find((thread) => thread.data.toolCallId === event.tool_call_id);
        if (agent?.data.status === 'error') {
          part.state = 'output-error';
          part.errorText = event.content;
        } else {
          part.state = 'output-available';
          part.output = resultValue(event.content);
        }
        // The files an exec call made, as the stream's data-file parts (one per path, the
        // latest replacing the earlier).
        const made = part.type === 'tool-exec' ? resultValue((event.content ?? '').replace(/^Error: /, '')).files : null;
        for (const file of Array.isArray(made) ? made : []) {
          const data = { path: file.path, size: file.size, toolCallId: event.tool_call_id };
          const earlier = assistant.parts.find((other) => other.type === 'data-file' && other.id === file.path);
          if (earlier) earlier.data = data;
          else assistant.parts.push({ type: 'data-file', id: file.path, data });
        }
        break;
      }
      case 'tool.approval_required':
        for (const call of event.tool_calls ?? []) {
          const id = partCallId(event.thread_id, call.id);
          const part = surface(id);
          if (part) {
            part.state = 'approval-requested';
            part.approval = { id };
          }
        }
        break;
      case 'tool.response_required':
        for (const call of event.tool_calls ?? []) surface(partCallId(event.thread_id, call.id));
        break;
      case 'thread.created': {
        const data = {
          threadId: event.thread_id,
          agentName: event.agent_info?.name,
          model: event.agent_info?.model,
          toolCallId: event.parent?.tool_call_id,
          prompt: event.agent_info?.input,
          status: 'running',
        };
        const part = { type: 'data-agent', id: event.thread_id, data };
        agents.set(event.thread_id, part);
        assistant.parts.push(part);
        break;
      }
      case 'thread.done': {
        const part = agents.get(event.thread_id);
        if (!part) break;
        if (event.state?.status === 'done') {
          const output = event.state.output;
          const result = typeof output?.content === 'string' ? output.content : (output?.content ?? []).map((item) => item.text ?? '').join('');
          part.data = { ...part.data, status: 'done', result };
        } else {
          part.data = { ...part.data, status: 'error', error: event.state?.error };
        }
        break;
      }
      case 'mcp.auth_required':
        assistant.parts.push({ type: 'data-mcp-auth-required', id: event.id, data: event });
        break;
      case 'turn.done': {
        const state = event.state ?? {};
        const metrics = state.metrics;
        if (metrics) {
          assistant.metadata = {
            usage: { inputTokens: metrics.total_input_tokens, outputTokens: metrics.total_output_tokens, totalTokens: metrics.total_tokens },
            costUsd: metrics.total_cost_in_usd,
          };
        }
        if (state.status === 'error') assistant.parts.push({ type: 'data-turn-error', id: turnId, data: { message: state.message } });
        if (state.status === 'cancelled') assistant.parts.push({ type: 'data-turn-cancelled', id: turnId, data: { reason: state.reason } });
        break;
      }
      default:
        break;
    }
  }
  return { messages: messages.filter((message) => message.role === 'user' || message.parts.length > 0), running };
}
