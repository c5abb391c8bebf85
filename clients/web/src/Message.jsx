// One UI message and its parts: text, reasoning (collapsible), files, tool calls with their
// results, approvals and questions waiting for the user, sub-agent threads, and sandbox files
// the calls name, downloadable.
import { useEffect, useId, useState } from 'react';
import { api, download, listAll } from './api.js';
import { formatBytes } from './format.js';
import { Markdown } from './Markdown.jsx';

const QUESTION_TOOL = 'ask_user_question';
// Submitting a plan is gated like an approval: approving it switches the session's mode.
const PLAN_TOOL = 'submit_plan';

export function Message({ message, sessionId, waiting, cancelled, answer }) {
  const user = message.role === 'user';
  // A call's progress, and what a running command prints, show until the call has its result.
  const finished = new Set(message.parts.filter((part) => part.toolCallId && part.state?.startsWith('output-')).map((part) => part.toolCallId));
  return (
    <article className={`message ${message.role}`} aria-label={user ? 'You' : 'Agent'}>
      <h3 className="visually-hidden">{user ? 'You' : 'Agent'}</h3>
      {message.parts
        .filter((part) => !['data-tool-progress', 'data-shell-output'].includes(part.type) || !finished.has(part.data?.toolCallId))
        .map((part, index) => (
          <Part key={partKey(part, index)} part={part} user={user} sessionId={sessionId} waiting={waiting} answer={answer} />
        ))}
      {cancelled && !message.parts.some((part) => part.type === 'data-turn-cancelled') && <p className="muted">Cancelled.</p>}
      {!user && message.metadata?.usage && <Usage metadata={message.metadata} />}
    </article>
  );
}

function partKey(part, index) {
  return part.toolCallId ?? (part.type.startsWith('data-') && part.id ? `${part.type}-${part.id}` : `${part.type}-${index}`);
}

function Part({ part, user, sessionId, waiting, answer }) {
  if (part.type === 'text') return <Markdown className="text" text={part.text} breaks={user} />;
  if (part.type === 'reasoning') {
    const streaming = part.state === 'streaming';
    return (
      <details className="reasoning">
        <summary>{streaming ? 'Thinking…' : 'Reasoning'}</summary>
        <div className="text muted">{part.text}</div>
      </details>
    );
  }
  if (part.type === 'file') return <FilePart part={part} />;
  if (part.type === 'data-agent') return <AgentThread data={part.data} sessionId={sessionId} />;
  if (part.type === 'data-tool-progress') return <ToolProgress data={part.data} />;
  if (part.type === 'data-shell-output') return <ShellOutput data={part.data} />;
  if (part.type === 'data-file') {
    return <Downloads sessionId={sessionId} paths={[part.data.path]} sizes={{ [part.data.path]: part.data.size }} />;
  }
  if (part.type === 'data-mcp-auth-required') return <McpAuth data={part.data} />;
  if (part.type === 'data-turn-error') return <p className="error">The turn failed: {part.data.message}</p>;
  if (part.type === 'data-turn-cancelled') return <p className="muted">Cancelled.</p>;
  if (part.type.startsWith('tool-') || part.type === 'dynamic-tool') {
    return <Tool part={part} sessionId={sessionId} waiting={waiting} answer={answer} />;
  }
  return null;
}

function FilePart({ part }) {
  if (part.mediaType?.startsWith('image/') && part.url?.startsWith('data:')) {
    return <img className="attachment-image" src={part.url} alt={part.filename ?? 'attached image'} />;
  }
  return <p className="file-chip"><span className="muted">Attached</span> {part.filename ?? 'file'} <span className="muted">({part.mediaType})</span></p>;
}

function Tool({ part, sessionId, waiting, answer }) {
  const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
  if (name === QUESTION_TOOL) return <Question part={part} waiting={waiting} answer={answer} />;
  const askingApproval = part.state === 'approval-requested';
  // Files an exec call made come as data-file parts of their own; other paths it names are
  // offered here.
  const listed = new Set((Array.isArray(part.output?.files) ? part.output.files : []).map((file) => file.path));
  const files = sandboxPaths([part.input, part.output]).filter((path) => !listed.has(path));
  const plan = name === PLAN_TOOL && part.input && typeof part.input === 'object' ? part.input : null;
  return (
    <div className={`tool ${askingApproval ? 'attention' : ''}`}>
      {plan && (
        <div className="plan">
          <p><span className="muted">Plan</span> <strong>{plan.title}</strong></p>
          <Markdown className="text" text={plan.plan} />
        </div>
      )}
      <details open={askingApproval}>
        <summary>
          <span className="tool-name">{name}</span> <span className={`badge ${part.state}`}>{stateLabel(part)}</span>
        </summary>
        <Json label="Input" value={part.input} />
        {part.state === 'output-available' && <Json label="Result" value={part.output} />}
        {part.state === 'output-error' && <p className="error">{part.errorText}</p>}
        {part.approval?.reason && <p className="muted">Reason: {part.approval.reason}</p>}
      </details>
      {askingApproval && waiting && <Approval part={part} name={name} answer={answer} />}
      {files.length > 0 && <Downloads sessionId={sessionId} paths={files} />}
    </div>
  );
}

function stateLabel(part) {
  switch (part.state) {
    case 'input-streaming': return 'preparing';
    case 'input-available': return 'running';
    case 'approval-requested': return 'needs approval';
    case 'approval-responded': return part.approval?.approved ? 'approved' : 'denied';
    case 'output-available': return 'done';
    case 'output-error': return 'failed';
    case 'output-denied': return 'denied';
    default: return part.state;
  }
}

function Json({ label, value }) {
  if (value === undefined) return null;
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
  return (
    <div className="json">
      <span className="muted">{label}</span>
      <pre>{text}</pre>
    </div>
  );
}

function Approval({ part, name, answer }) {
  const [reason, setReason] = useState('');
  const [problem, setProblem] = useState(null);
  const always = async () => {
    try {
      setProblem(null);
      await answer.approveAlways(part.approval.id);
    } catch (failure) {
      setProblem(failure.message);
    }
  };
  const reasonId = useId();
  const plan = name === PLAN_TOOL;
  return (
    <div className="approval" role="group" aria-label={plan ? 'Approve the plan?' : `Approve ${name}?`}>
      <p>{plan ? 'Approve this plan? The agent then carries it out.' : <>The agent wants to run <strong>{name}</strong>. Allow it?</>}</p>
      <div className="row">
        <button type="button" className="primary" onClick={() => answer.approve(part.approval.id, true)}>{plan ? 'Approve plan' : 'Approve'}</button>
        {!plan && <button type="button" onClick={always} title={`Allow ${name} for the rest of this session`}>Always allow</button>}
        <label htmlFor={reasonId} className="visually-hidden">{plan ? 'Feedback on the plan' : 'Reason to deny'}</label>
        <input id={reasonId} placeholder={plan ? 'Feedback (optional)' : 'Reason (optional)'} value={reason} onChange={(event) => setReason(event.target.value)} />
        <button type="button" className="danger" onClick={() => answer.approve(part.approval.id, false, reason)}>{plan ? 'Reject plan' : 'Deny'}</button>
      </div>
      {problem && <p className="error" role="alert">{problem}</p>}
    </div>
  );
}

// ask_user_question: the question, its options (one or several), or free text.
function Question({ part, waiting, answer }) {
  const input = part.input ?? {};
  const options = Array.isArray(input.options) ? input.options : [];
  const multi = Boolean(input.multi_select);
  const [chosen, setChosen] = useState([]);
  const [other, setOther] = useState('');
  const groupId = useId();
  const answered = part.state === 'output-available';

  if (answered || !waiting || part.state !== 'input-available') {
    return (
      <div className="question">
        <p><strong>{input.question ?? 'Question'}</strong></p>
        {answered && <p>Your answer: {typeof part.output === 'string' ? part.output : JSON.stringify(part.output)}</p>}
        {part.state === 'input-streaming' && <p className="muted">…</p>}
      </div>
    );
  }
  const toggle = (label) => setChosen(multi ? (chosen.includes(label) ? chosen.filter((item) => item !== label) : [...chosen, label]) : [label]);
  const submit = (event) => {
    event.preventDefault();
    const picked = [...chosen, ...(other.trim() ? [other.trim()] : [])];
    if (picked.length === 0) return;
    answer.reply(QUESTION_TOOL, part.toolCallId, picked.join(', '));
  };
  return (
    <form className="question attention" onSubmit={submit}>
      <fieldset>
        <legend id={groupId}>{input.question ?? 'The agent asks'}</legend>
        {options.map((option) => (
          <label key={option.label} className="option">
            <input type={multi ? 'checkbox' : 'radio'} name={groupId} checked={chosen.includes(option.label)} onChange={() => toggle(option.label)} />
            <span>{option.label}</span>
            {option.description && <span className="muted"> — {option.description}</span>}
          </label>
        ))}
        <label className="option">
          <span>{options.length ? 'Other answer' : 'Your answer'}</span>
          <input type="text" value={other} onChange={(event) => setOther(event.target.value)} />
        </label>
      </fieldset>
      <button type="submit" className="primary">Answer</button>
    </form>
  );
}

// A running call's latest progress report (MCP notifications/progress).
function ToolProgress({ data }) {
  const known = typeof data.total === 'number' && data.total > 0;
  return (
    <div className="progress">
      <label>
        <span className="muted">{data.toolName}: {data.message ?? 'working'}</span>{' '}
        <progress value={known ? data.progress : undefined} max={known ? data.total : undefined} />
      </label>
    </div>
  );
}

// What a running command printed so far (the server streams its first 64 KiB), the newest
// lines in view.
function ShellOutput({ data }) {
  return (
    <div className="shell-output" role="log" aria-label={`Output of ${data.toolName}`}>
      {data.stdout && <pre className="stdout">{data.stdout}</pre>}
      {data.stderr && <pre className="stderr">{data.stderr}</pre>}
      {data.truncated && <p className="muted">… more output than is shown while it runs; the result holds it.</p>}
    </div>
  );
}

// A sub-agent's card: its task, its own tool calls (read from the session's events for its
// thread when the card opens, again as its status changes) and its answer.
function AgentThread({ data, sessionId }) {
  const [open, setOpen] = useState(false);
  const [calls, setCalls] = useState(null);
  useEffect(() => {
    if (!open || !data.threadId) return;
    let live = true;
    listAll(`sessions/${encodeURIComponent(sessionId)}/events?limit=100`, 20_000).then((items) => {
      if (!live) return;
      const events = items.map((item) => item.event).filter((event) => event.thread_id === data.threadId).reverse();
      const results = new Map(events.filter((event) => event.type === 'tool.response').map((event) => [event.tool_call_id, event.content]));
      setCalls(events.flatMap((event) => (event.type === 'model.message' ? event.tool_calls ?? [] : [])).map((call) => ({
        id: call.id,
        name: call.function?.name,
        input: call.function?.arguments,
        result: results.get(call.id),
      })));
    }, () => live && setCalls([]));
    return () => {
      live = false;
    };
  }, [open, data.threadId, data.status, sessionId]);
  return (
    <details className="thread" onToggle={(event) => setOpen(event.currentTarget.open)}>
      <summary>
        Sub-agent <strong>{data.agentName}</strong> <span className={`badge ${data.status}`}>{data.status}</span>
      </summary>
      {data.prompt && <p className="muted">Task: {data.prompt}</p>}
      {calls?.length > 0 && (
        <ul className="sub-calls" aria-label={`Tool calls of ${data.agentName}`}>
          {calls.map((call) => (
            <li key={call.id}>
              <details>
                <summary><span className="tool-name">{call.name}</span> <span className="badge">{call.result === undefined ? 'running' : 'done'}</span></summary>
                <Json label="Input" value={call.input} />
                {call.result !== undefined && <Json label="Result" value={call.result} />}
              </details>
            </li>
          ))}
        </ul>
      )}
      {data.result && <Markdown className="text" text={data.result} />}
      {data.error && <p className="error">{data.error}</p>}
    </details>
  );
}

function McpAuth({ data }) {
  return (
    <div className="attention">
      {(data.mcp_servers ?? []).map((server) => (
        <p key={server.id ?? server.name}>
          The MCP server <strong>{server.name}</strong> needs authorization:{' '}
          <a href={server.auth_url} target="_blank" rel="noreferrer">authorize it</a>, then send your message again.
        </p>
      ))}
    </div>
  );
}

function Usage({ metadata }) {
  const { usage, costUsd } = metadata;
  return (
    <p className="usage muted">
      {usage.inputTokens} in · {usage.outputTokens} out tokens{costUsd ? ` · $${costUsd.toFixed(4)}` : ''}
    </p>
  );
}

// Sandbox paths a tool call's input or result names, such as /workspace/report.csv. A path with
// another one under it is a folder: folders are not offered (a download is one file).
export function sandboxPaths(values) {
  const found = new Set();
  const text = values.map((value) => (typeof value === 'string' ? value : JSON.stringify(value ?? ''))).join('\n');
  for (const match of text.matchAll(/\/(?:workspace|tmp)\/[\w.\-/]*[\w-]/g)) {
    if (!match[0].startsWith('/workspace/.tool-results')) found.add(match[0]);
  }
  return [...found].filter((path) => ![...found].some((other) => other.startsWith(`${path}/`)));
}

// Whether a path names a folder for certain: it ends with a slash, or is a sandbox root.
export function isFolder(path) {
  return path.endsWith('/') || /^\/(workspace|tmp)$/.test(path);
}

export function Downloads({ sessionId, paths, sizes = {} }) {
  const [message, setMessage] = useState(null);
  const save = async (path) => {
    try {
      setMessage(null);
      const turns = await api('GET', `sessions/${encodeURIComponent(sessionId)}/turns?limit=1`);
      const turnId = turns.data[0]?.id;
      const name = await download(
        `sessions/${encodeURIComponent(sessionId)}/turns/${encodeURIComponent(turnId)}/download-sandbox-file?path=${encodeURIComponent(path)}`,
        path.split('/').at(-1),
      );
      setMessage(`Downloaded ${name}.`);
    } catch (failure) {
      setMessage(`Could not download ${path}: ${failure.message}`);
    }
  };
  return (
    <div className="downloads">
      {paths.map((path) => (
        <span key={path}>
          <button type="button" className="link" onClick={() => save(path)}>Download {path}</button>
          {sizes[path] !== undefined && <span className="muted"> ({formatBytes(sizes[path])})</span>}
        </span>
      ))}
      {message && <p className="muted" role="status">{message}</p>}
    </div>
  );
}
