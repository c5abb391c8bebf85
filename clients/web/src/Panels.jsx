// Beside a chat: the session's task list and submitted plans (agents that keep them), its
// follow-up queue (each cancellable), its "always allow" grants (each revocable) and its state
// object, and (for agents with a sandbox) a box to download any file of it. The tasks, plans,
// follow-ups and state are the live channel's display state, current as they change; the
// grants are not on the channel, so they are read when the panel opens, when a turn ends (an
// "always allow" answer grants one) and after a revocation.
import { useEffect, useId, useState } from 'react';
import { api } from './api.js';
import { Markdown } from './Markdown.jsx';
import { Downloads, isFolder } from './Message.jsx';

export function Panels({ sessionId, display, turnsEnded, sandbox }) {
  const [grants, setGrants] = useState([]);
  const [own, setOwn] = useState(0);
  const [problem, setProblem] = useState(null);
  const session = encodeURIComponent(sessionId);
  const tasks = display?.tasks ?? null;
  const plans = display?.plans ?? [];
  const followUps = display?.follow_ups ?? [];
  const state = display?.state ?? null;

  // Read once the session exists (its channel has opened), then again as said above.
  const exists = display !== null;
  useEffect(() => {
    if (!exists) return undefined;
    let live = true;
    api('GET', `sessions/${session}/grants`).then((body) => live && setGrants(body.data ?? []), () => live && setGrants([]));
    return () => {
      live = false;
    };
  }, [session, exists, turnsEnded, own]);
  // A follow-up cancelled shows through the channel; a grant revoked is read again.
  const remove = async (path, grant = false) => {
    try {
      setProblem(null);
      await api('DELETE', path);
    } catch (failure) {
      setProblem(failure.message);
    }
    if (grant) setOwn((value) => value + 1);
  };

  return (
    <div className="panels">
      {tasks?.tasks?.length > 0 && (
        <details className="panel" open>
          <summary>Tasks ({tasks.summary.completed}/{tasks.summary.total} done)</summary>
          <ul className="tasks">
            {tasks.tasks.map((task) => (
              <li key={task.id} className={`task ${task.status}`}>
                <span aria-hidden="true">{task.status === 'completed' ? '☑' : task.status === 'in_progress' ? '◐' : '☐'}</span>{' '}
                {task.title} <span className="visually-hidden">({task.status.replace('_', ' ')})</span>
                {task.notes && <span className="muted"> — {task.notes}</span>}
              </li>
            ))}
          </ul>
        </details>
      )}
      {plans.length > 0 && (
        <details className="panel">
          <summary>Plans ({plans.length})</summary>
          {plans.map((plan) => (
            <div key={plan.id} className="plan">
              <p><strong>{plan.title}</strong> <span className={`badge ${plan.status}`}>{plan.status.replace('_', ' ')}</span></p>
              <Markdown className="text" text={plan.plan} />
              {plan.feedback && <p className="muted">Feedback: {plan.feedback}</p>}
            </div>
          ))}
        </details>
      )}
      {problem && <p className="error" role="alert">{problem}</p>}
      {followUps.length > 0 && (
        <details className="panel" open>
          <summary>Queued follow-ups ({followUps.length})</summary>
          <ul className="follow-ups">
            {followUps.map((item) => (
              <li key={item.id}>
                <span>{typeof item.content === 'string' ? item.content : (item.content ?? []).map((part) => part.text ?? part.name ?? '').join(' ')}</span>
                <button type="button" className="link" onClick={() => remove(`sessions/${session}/follow-ups/${encodeURIComponent(item.id)}`)}>Cancel</button>
              </li>
            ))}
          </ul>
        </details>
      )}
      {grants.length > 0 && (
        <details className="panel">
          <summary>Always allowed ({grants.length})</summary>
          <ul className="grants">
            {grants.map((grant) => (
              <li key={grant.id}>
                <span className="tool-name">{grant.tool ?? `category ${grant.category}`}</span>
                <button type="button" className="link" onClick={() => remove(`sessions/${session}/grants/${encodeURIComponent(grant.id)}`, true)}>
                  Revoke {grant.tool ?? grant.category}
                </button>
              </li>
            ))}
          </ul>
        </details>
      )}
      {state && Object.keys(state).length > 0 && (
        <details className="panel">
          <summary>State</summary>
          <pre className="json">{JSON.stringify(state, null, 2)}</pre>
        </details>
      )}
      {sandbox && <SandboxDownload sessionId={sessionId} />}
    </div>
  );
}

function SandboxDownload({ sessionId }) {
  const [path, setPath] = useState('/workspace/');
  const [wanted, setWanted] = useState(null);
  const inputId = useId();
  return (
    <details className="panel">
      <summary>Sandbox files</summary>
      <form className="row" onSubmit={(event) => { event.preventDefault(); setWanted(path.trim()); }}>
        <label htmlFor={inputId}>Path</label>
        <input id={inputId} value={path} onChange={(event) => setPath(event.target.value)} />
        <button type="submit">Find</button>
      </form>
      {wanted && isFolder(wanted) && <p className="muted" role="status">{wanted} is a folder: name a file in it (a download is one file).</p>}
      {wanted && !isFolder(wanted) && <Downloads key={wanted} sessionId={sessionId} paths={[wanted]} />}
    </details>
  );
}
