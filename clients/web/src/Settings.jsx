// Settings (admins only): model providers and MCP servers, each a manifest edited as JSON or
// YAML and written with PUT (create or replace). Secrets come back redacted; sending a
// redacted value back keeps the stored one.
import { useEffect, useId, useState } from 'react';
import YAML from 'yaml';
import { api } from './api.js';

const PROVIDER_EXAMPLE = {
  type: 'openai', name: 'openai', base_url: 'https://api.openai.com/v1', auth: { api_key: 'sk-...' },
  models: [{ name: 'gpt-4o', model_id: 'gpt-4o', properties: {} }],
};
const MCP_EXAMPLE = { type: 'remote', name: 'docs', description: 'What the server offers, for agents.', url: 'https://example.com/mcp' };

export function Settings({ generation }) {
  return (
    <div className="settings">
      <h2>Settings</h2>
      <ManifestSection title="Model providers" path="settings/model-providers" example={PROVIDER_EXAMPLE} generation={generation} />
      <ManifestSection title="MCP servers" path="settings/mcp-servers" example={MCP_EXAMPLE} generation={generation} />
    </div>
  );
}

function ManifestSection({ title, path, example, generation }) {
  const [items, setItems] = useState(null);
  const [error, setError] = useState(null);
  const [editing, setEditing] = useState(null);
  const [reload, setReload] = useState(0);
  const headingId = useId();

  useEffect(() => {
    api('GET', path).then(
      (body) => (setItems(body.data), setError(null)),
      (failure) => setError(failure.status === 403 ? 'Settings are for admins: this API key is not an admin\'s.' : failure.message),
    );
  }, [path, generation, reload]);

  return (
    <section className="settings-section" aria-labelledby={headingId}>
      <h3 id={headingId}>{title}</h3>
      {error && <p className="error" role="alert">{error}</p>}
      {items && items.length === 0 && <p className="muted">None configured.</p>}
      <ul>
        {(items ?? []).map((item) => (
          <li key={item.name}>
            <button type="button" className="link" onClick={() => setEditing(item.manifest)}>{item.name}</button>
            <span className="muted"> {item.manifest?.type}</span>
          </li>
        ))}
      </ul>
      {items && <button type="button" onClick={() => setEditing(example)}>Add</button>}
      {editing && (
        <ManifestEditor
          key={JSON.stringify(editing)}
          manifest={editing}
          path={path}
          onDone={() => {
            setEditing(null);
            setReload(reload + 1);
          }}
          onCancel={() => setEditing(null)}
        />
      )}
    </section>
  );
}

function ManifestEditor({ manifest, path, onDone, onCancel }) {
  const [text, setText] = useState(() => YAML.stringify(manifest));
  const [problem, setProblem] = useState(null);
  const ids = { text: useId(), problem: useId() };
  const save = async (event) => {
    event.preventDefault();
    let parsed;
    try {
      parsed = YAML.parse(text);
    } catch (failure) {
      setProblem(`Not valid YAML or JSON: ${failure.message}`);
      return;
    }
    try {
      await api('PUT', path, { manifest: parsed });
      onDone();
    } catch (failure) {
      setProblem(`${failure.param ? `${failure.param}: ` : ''}${failure.message}`);
    }
  };
  return (
    <form className="manifest-editor" onSubmit={save}>
      <label htmlFor={ids.text}>Manifest (YAML or JSON)</label>
      <textarea id={ids.text} className="code" rows={12} spellCheck={false} value={text} onChange={(event) => setText(event.target.value)}
        aria-invalid={problem ? true : undefined} aria-describedby={problem ? ids.problem : undefined} />
      {problem && <p id={ids.problem} className="error" role="alert">{problem}</p>}
      <div className="row">
        <button type="submit" className="primary">Save</button>
        <button type="button" onClick={onCancel}>Cancel</button>
      </div>
    </form>
  );
}
