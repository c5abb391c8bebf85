// Beside a chat: the session's task list and submitted plans (agents that keep them), its
// follow-up queue (each cancellable), its "always allow" grants (each revocable) and its state
// object, and (for agents with a sandbox) its workspace: where it stands, its files to browse
// and download, made ahead or destroyed on demand. The tasks, plans,
// follow-ups and state are the live channel's display state, current as they change; the
// grants are not on the channel, so they are read when the panel opens, when a turn ends (an
// "always allow" answer grants one) and after a revocation.
import { useEffect, useId, useState } from 'react';
import { api } from './api.js';
import { Markdown } from './Markdown.jsx';
import { formatBytes } from './format.js';
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
      {sandbox && <Workspace sessionId={sessionId} status={display?.workspace ?? null} turnsEnded={turnsEnded} />}
    </div>
  );
}

const STATUS_WORDS = {
  none: 'not made yet (the first command makes it)',
  provisioning: 'being made…',
  ready: 'ready',
  error: 'could not be made',
  destroyed: 'destroyed (the next command makes a fresh one)',
};

// The session's workspace: its status (the live channel's display state keeps it current),
// its files one folder at a time (read when the panel opens, when the status changes, when a
// turn ends and as the user browses), and the buttons that make it now or destroy it.
function Workspace({ sessionId, status, turnsEnded }) {
  const [open, setOpen] = useState(false);
  const [folder, setFolder] = useState('');
  const [workspace, setWorkspace] = useState(null);
  const [problem, setProblem] = useState(null);
  const [busy, setBusy] = useState(false);
  const [changed, setChanged] = useState(0);
  const path = `sessions/${encodeURIComponent(sessionId)}/workspace`;
  useEffect(() => {
    if (!open) return undefined;
    let live = true;
    const query = folder ? `?path=${encodeURIComponent(folder)}` : '';
    api('GET', `${path}${query}`).then(
      (body) => {
        if (!live) return;
        setWorkspace(body.data);
        setProblem(null);
      },
      (failure) => {
        if (!live) return;
        // A folder that went away (the workspace was destroyed): back to the top.
        if (folder) setFolder('');
        else setProblem(failure.message);
      },
    );
    return () => {
      live = false;
    };
  }, [path, open, folder, status, turnsEnded, changed]);
  const act = async (method) => {
    setBusy(true);
    try {
      setProblem(null);
      await api(method, path);
      setFolder('');
    } catch (failure) {
      setProblem(failure.message);
    }
    setBusy(false);
    setChanged((value) => value + 1);
  };
  const shown = workspace?.status ?? status ?? 'none';
  const files = workspace?.files ?? [];
  const parent = folder.includes('/') ? folder.slice(0, folder.lastIndexOf('/')) : '';
  return (
    <details className="panel workspace" onToggle={(event) => setOpen(event.currentTarget.open)}>
      <summary>Workspace</summary>
      <p role="status" className={`workspace-status ${shown}`}>
        Workspace {STATUS_WORDS[shown] ?? shown}
        {workspace?.used_bytes != null && workspace?.quota_bytes != null && (
          <span className="muted"> — {formatBytes(workspace.used_bytes)} of {formatBytes(workspace.quota_bytes)}</span>
        )}
      </p>
      {workspace?.error && <p className="error">{workspace.error}</p>}
      {problem && <p className="error" role="alert">{problem}</p>}
      <div className="row">
        {shown !== 'ready' && <button type="button" disabled={busy} onClick={() => act('POST')}>Prepare workspace</button>}
        {shown === 'ready' && <button type="button" disabled={busy} onClick={() => act('DELETE')}>Destroy workspace</button>}
      </div>
      {shown === 'ready' && (
        <nav aria-label="Workspace files">
          <p className="muted">/workspace{folder ? `/${folder}` : ''}</p>
          <ul className="files">
            {folder && (
              <li><button type="button" className="link" onClick={() => setFolder(parent)}>.. (up)</button></li>
            )}
            {files.map((file) => {
              const relative = file.path.replace(/^\/workspace\/?/, '');
              const name = relative.split('/').at(-1);
              if (file.kind === 'directory') {
                return <li key={file.path}><button type="button" className="link" onClick={() => setFolder(relative)}>{name}/</button></li>;
              }
              if (file.kind === 'file') {
                return <li key={file.path}><Downloads sessionId={sessionId} paths={[file.path]} sizes={{ [file.path]: file.bytes }} /></li>;
              }
              return <li key={file.path} className="muted">{name} ({file.kind})</li>;
            })}
            {files.length === 0 && <li className="muted">No files.</li>}
          </ul>
          {workspace?.files_truncated && <p className="muted">More files than shown.</p>}
        </nav>
      )}
      <FindFile sessionId={sessionId} />
    </details>
  );
}

// Any file of the sandbox by its path (`/tmp` too), for download.
function FindFile({ sessionId }) {
  const [path, setPath] = useState('/workspace/');
  const [wanted, setWanted] = useState(null);
  const inputId = useId();
  return (
    <div>
      <form className="row" onSubmit={(event) => { event.preventDefault(); setWanted(path.trim()); }}>
        <label htmlFor={inputId}>Path</label>
        <input id={inputId} value={path} onChange={(event) => setPath(event.target.value)} />
        <button type="submit">Find</button>
      </form>
      {wanted && isFolder(wanted) && <p className="muted" role="status">{wanted} is a folder: name a file in it (a download is one file).</p>}
      {wanted && !isFolder(wanted) && <Downloads key={wanted} sessionId={sessionId} paths={[wanted]} />}
    </div>
  );
}
