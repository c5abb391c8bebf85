// The turn inspector: one turn of the session (the latest by default) as a timeline of its model
// calls and tool calls, each with when it ended, how long it took, its tokens and cost, and its
// raw event; the turn's totals from its `turn.done` metrics. Read from
// `GET /sessions/{id}/turns` (the turn's start, end and totals) and
// `GET /sessions/{id}/turns/{turn}/events` (its model messages, tool results, threads, waits).
import { useEffect, useId, useState } from 'react';
import { api, listAll } from './api.js';

// The timeline rows of a turn's events, oldest first. A model call lasts from the event before
// it (the turn's start, a tool result, the previous answer) to its message; a tool call from the
// message that asked for it to its result.
// A model call's cost in US dollars at its model's prices (as the server computes a turn's):
// the prompt less its cache reads and writes at the input price, those at their own prices
// (the input price when absent), the output at the output price.
export function callCost(usage, pricing) {
  if (!pricing || usage?.input_tokens === undefined) return null;
  const read = usage.cache_read_tokens ?? 0;
  const write = usage.cache_write_tokens ?? 0;
  const uncached = Math.max(0, usage.input_tokens - read - write);
  return (uncached * pricing.input_per_million
    + read * (pricing.cache_read_per_million ?? pricing.input_per_million)
    + write * (pricing.cache_write_per_million ?? pricing.input_per_million)
    + (usage.output_tokens ?? 0) * pricing.output_per_million) / 1e6;
}

// `pricing(thread)` gives the prices of the model a thread ran (none when unknown).
export function timeline(events, pricing = () => null) {
  const sorted = [...events].sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at));
  const start = sorted[0] ? Date.parse(sorted[0].created_at) : 0;
  const asked = new Map();
  const previous = new Map();
  const rows = [];
  for (const event of sorted) {
    const at = Date.parse(event.created_at);
    const thread = event.thread_id ?? 'main';
    const before = previous.get(thread) ?? start;
    const base = { id: event.id, at: at - start, thread, event };
    switch (event.type) {
      case 'model.message': {
        const calls = (event.tool_calls ?? []).map((call) => call.function?.name).filter(Boolean);
        for (const call of event.tool_calls ?? []) asked.set(`${thread}/${call.id}`, { at, name: call.function?.name });
        const usage = event.usage ?? {};
        rows.push({
          ...base,
          kind: 'model',
          label: calls.length ? `model call → ${calls.join(', ')}` : 'model call → answer',
          duration: at - before,
          tokens: usage.input_tokens !== undefined ? `${usage.input_tokens} in · ${usage.output_tokens ?? 0} out` : '',
          cost: callCost(usage, pricing(thread)),
        });
        break;
      }
      case 'tool.response': {
        const call = asked.get(`${thread}/${event.tool_call_id}`);
        rows.push({ ...base, kind: 'tool', label: `tool ${call?.name ?? event.tool_call_id}`, duration: call ? at - call.at : null, tokens: '', cost: null });
        break;
      }
      case 'tool.approval_required':
      case 'tool.response_required':
        rows.push({ ...base, kind: 'wait', label: event.type === 'tool.approval_required' ? 'waits for an approval' : 'waits for an answer', duration: null, tokens: '', cost: null });
        break;
      case 'thread.created':
        rows.push({ ...base, kind: 'thread', label: `sub-agent ${event.agent_info?.name ?? thread} starts`, duration: null, tokens: '', cost: null });
        break;
      case 'thread.done':
        rows.push({ ...base, kind: 'thread', label: `sub-agent ${thread} ${event.state?.status ?? 'ends'}`, duration: null, tokens: '', cost: null });
        break;
      case 'turn.created':
        rows.push({ ...base, kind: 'turn', label: 'turn starts', duration: null, tokens: '', cost: null });
        break;
      case 'turn.done': {
        const metrics = event.state?.metrics ?? {};
        rows.push({
          ...base,
          kind: 'turn',
          label: `turn ${event.state?.status ?? 'ends'}`,
          duration: at - start,
          tokens: metrics.total_input_tokens !== undefined ? `${metrics.total_input_tokens} in · ${metrics.total_output_tokens} out` : '',
          cost: metrics.total_cost_in_usd ?? null,
        });
        break;
      }
      default:
        rows.push({ ...base, kind: 'other', label: event.type.replaceAll('.', ' ').replaceAll('_', ' '), duration: null, tokens: '', cost: null });
    }
    previous.set(thread, at);
  }
  return rows;
}

// The turn's events with its start and (once it ended) its end, which its own event list
// leaves to the turn object.
function withEnds(events, turn) {
  const start = { type: 'turn.created', id: `${turn.id}-created`, thread_id: 'main', created_at: turn.created_at, input: turn.input };
  const last = events.reduce((latest, event) => (event.created_at > latest ? event.created_at : latest), turn.created_at);
  const ended = turn.state.status === 'running'
    ? []
    : [{ type: 'turn.done', id: `${turn.id}-done`, thread_id: 'main', created_at: turn.state.completed_at ?? last, state: turn.state }];
  return [start, ...events, ...ended];
}

function ms(value) {
  if (value === null || value === undefined) return '';
  return value < 1000 ? `${value} ms` : `${(value / 1000).toFixed(2)} s`;
}

export function Inspector({ sessionId, model, generation }) {
  const [turns, setTurns] = useState(null);
  const [models, setModels] = useState(null);
  useEffect(() => {
    api('GET', 'models').then((found) => setModels(found.data ?? []), () => setModels([]));
  }, []);
  const [turnId, setTurnId] = useState('');
  const [events, setEvents] = useState(null);
  const [problem, setProblem] = useState(null);
  const pickerId = useId();
  const session = encodeURIComponent(sessionId);

  useEffect(() => {
    let live = true;
    api('GET', `sessions/${session}/turns?limit=50`).then((found) => {
      if (!live) return;
      setTurns(found.data ?? []);
      setTurnId((current) => ((found.data ?? []).some((turn) => turn.id === current) ? current : found.data?.[0]?.id ?? ''));
    }, (failure) => live && setProblem(failure.message));
    return () => {
      live = false;
    };
  }, [session, generation]);
  useEffect(() => {
    if (!turnId) return;
    let live = true;
    setEvents(null);
    listAll(`sessions/${session}/turns/${encodeURIComponent(turnId)}/events?limit=100`, 5_000)
      .then((found) => live && setEvents(found.map((item) => item.event ?? item)), (failure) => live && setProblem(failure.message));
    return () => {
      live = false;
    };
  }, [session, turnId, generation]);

  const turn = turns?.find((item) => item.id === turnId);
  // The prices of the models the turn's threads ran: the turn's (or the agent's) for the main
  // thread, each sub-agent's own.
  const prices = (name) => models?.find((model) => model.name === name)?.properties?.pricing ?? null;
  const threadModels = new Map((events ?? []).filter((event) => event.type === 'thread.created').map((event) => [event.thread_id, event.agent_info?.model]));
  const pricing = (thread) => prices((thread !== 'main' && threadModels.get(thread)) || turn?.model || model);
  const rows = events && turn ? timeline(withEnds(events, turn), pricing) : [];
  const total = rows.length ? Math.max(1, ...rows.map((row) => row.at)) : 1;
  return (
    <section className="panel inspector" aria-label="Turn inspector">
      <div className="row">
        <label htmlFor={pickerId}>Turn</label>
        <select id={pickerId} value={turnId} onChange={(event) => setTurnId(event.target.value)}>
          {(turns ?? []).map((turn, index) => (
            <option key={turn.id} value={turn.id}>
              {turns.length - index}. {new Date(turn.created_at).toLocaleTimeString()} · {turn.state.status}
            </option>
          ))}
        </select>
      </div>
      {problem && <p className="error" role="alert">{problem}</p>}
      {turnId && events === null && <p className="muted">Loading the turn…</p>}
      {rows.length > 0 && (
        <table className="timeline">
          <thead>
            <tr><th scope="col">At</th><th scope="col">Step</th><th scope="col">Took</th><th scope="col">Tokens</th><th scope="col">Cost</th><th scope="col">Event</th></tr>
          </thead>
          <tbody>
            {rows.map((row) => (
              <tr key={row.id} className={`step ${row.kind}`}>
                <td>{ms(row.at)}</td>
                <td>
                  {row.thread !== 'main' && <span className="muted">{row.thread} · </span>}
                  {row.label}
                  {row.duration !== null && row.kind !== 'turn' && (
                    <span className="bar" aria-hidden="true" style={{ marginLeft: `${((row.at - row.duration) / total) * 100}%`, width: `${Math.max(1, (row.duration / total) * 100)}%` }} />
                  )}
                </td>
                <td>{ms(row.duration)}</td>
                <td>{row.tokens}</td>
                <td>{row.cost !== null && row.cost !== undefined ? `$${row.cost.toFixed(6)}` : ''}</td>
                <td>
                  <details>
                    <summary>raw</summary>
                    <pre>{JSON.stringify(row.event, null, 2)}</pre>
                  </details>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
