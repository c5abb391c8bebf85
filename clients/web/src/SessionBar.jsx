// What the terminal client does to a session, beside the chat's title: switch its model
// (`PATCH /sessions/{id}` with `model`), clone it (`POST /sessions/{id}/clone`, then open the
// clone), and the command that continues it in the terminal (`teamster chat --session … --server …`).
import { useEffect, useState } from 'react';
import { api, apiBase } from './api.js';
import { href } from './route.js';

// The server's URL as `teamster chat --server` takes it: the page's, less `/api/v1/`.
export function serverUrl() {
  return new URL('../../', apiBase).href.replace(/\/$/, '');
}

export function ModelPicker({ session, busy, onChange }) {
  const [models, setModels] = useState(null);
  const [problem, setProblem] = useState(null);
  useEffect(() => {
    api('GET', 'models').then((found) => setModels(found.data ?? []), () => setModels([]));
  }, []);
  if (!models?.length) return null;
  const change = async (model) => {
    try {
      setProblem(null);
      onChange((await api('PATCH', `sessions/${encodeURIComponent(session.id)}`, { model })).data);
    } catch (failure) {
      setProblem(failure.message);
    }
  };
  return (
    <div className="row">
      <label htmlFor="model-picker">Model</label>
      <select id="model-picker" value={session.model ?? ''} disabled={busy} onChange={(event) => change(event.target.value)}>
        <option value="">The agent's</option>
        {models.map((model) => (
          <option key={model.name} value={model.name}>{model.name}</option>
        ))}
      </select>
      {problem && <span className="error" role="alert">{problem}</span>}
    </div>
  );
}

export function CloneButton({ session, busy }) {
  const [problem, setProblem] = useState(null);
  const clone = async () => {
    try {
      setProblem(null);
      const title = session.title ? `${session.title} (copy)` : undefined;
      const copy = (await api('POST', `sessions/${encodeURIComponent(session.id)}/clone`, { title })).data;
      location.hash = href({ view: 'chat', id: copy.id });
    } catch (failure) {
      setProblem(failure.message);
    }
  };
  return (
    <>
      <button type="button" className="link" onClick={clone} disabled={busy}>Clone</button>
      {problem && <span className="error" role="alert">{problem}</span>}
    </>
  );
}

export function TerminalCommand({ sessionId }) {
  const command = `teamster chat --session ${sessionId} --server ${serverUrl()}`;
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(command);
      setCopied(true);
    } catch {
      setCopied(false);
    }
  };
  return (
    <details className="terminal">
      <summary>Continue in the terminal</summary>
      <div className="row">
        <code aria-label="Terminal command">{command}</code>
        <button type="button" onClick={copy}>{copied ? 'Copied' : 'Copy command'}</button>
      </div>
    </details>
  );
}
