// Beside a chat: the session's task list and submitted plans (agents that keep them), loaded
// again whenever a turn ends, and (for agents with a sandbox) a box to download any file of it.
import { useEffect, useId, useState } from 'react';
import { api } from './api.js';
import { Markdown } from './Markdown.jsx';
import { Downloads } from './Message.jsx';

export function Panels({ sessionId, status, sandbox }) {
  const [tasks, setTasks] = useState(null);
  const [plans, setPlans] = useState([]);

  useEffect(() => {
    if (status !== 'ready') return;
    let live = true;
    const session = encodeURIComponent(sessionId);
    api('GET', `sessions/${session}/tasks`).then((body) => live && setTasks(body.data)).catch(() => live && setTasks(null));
    api('GET', `sessions/${session}/plans`).then((body) => live && setPlans(body.data ?? [])).catch(() => live && setPlans([]));
    return () => {
      live = false;
    };
  }, [sessionId, status]);

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
      {wanted && <Downloads key={wanted} sessionId={sessionId} paths={[wanted]} />}
    </details>
  );
}
