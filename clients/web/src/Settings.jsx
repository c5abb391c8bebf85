// Settings (admins only): a one-form switch of an agent (the `demo` agent by default) to a real
// provider's model, then model providers and MCP servers, each a manifest edited as JSON or
// YAML and written with PUT (create or replace). Secrets come back redacted; sending a
// redacted value back keeps the stored one.
import { useEffect, useId, useState } from 'react';
import YAML from 'yaml';
import { api, listAll } from './api.js';

const PROVIDER_EXAMPLE = {
  type: 'openai', name: 'openai', base_url: 'https://api.openai.com/v1', auth: { api_key: 'sk-...' },
  models: [{ name: 'gpt-4o', model_id: 'gpt-4o', properties: {} }],
};
const MCP_EXAMPLE = { type: 'remote', name: 'docs', description: 'What the server offers, for agents.', url: 'https://example.com/mcp' };

export function Settings({ generation }) {
  return (
    <div className="settings">
      <h2>Settings</h2>
      <RealModel generation={generation} />
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

const KINDS = {
  openai: { label: 'OpenAI', model: 'gpt-4o' },
  anthropic: { label: 'Anthropic', model: 'claude-sonnet-4-5' },
  custom: { label: 'OpenAI-compatible endpoint', model: '' },
};

// One form from the demo model to a real one: the provider (added, or its model added to it)
// and the agent switched to it.
function RealModel({ generation }) {
  const [agents, setAgents] = useState(null);
  const [form, setForm] = useState({ kind: 'openai', name: 'custom', baseUrl: '', apiKey: '', model: KINDS.openai.model, agent: 'demo' });
  const [problem, setProblem] = useState(null);
  const [done, setDone] = useState(null);
  const headingId = useId();
  const id = (field) => `${headingId}-${field}`;
  useEffect(() => {
    listAll('agents').then((found) => {
      setAgents(found);
      setForm((current) => (found.some((agent) => agent.name === current.agent) ? current : { ...current, agent: found[0]?.name ?? '' }));
    }, () => setAgents([]));
  }, [generation]);
  if (!agents?.length) return null;
  const set = (field) => (event) => setForm({ ...form, [field]: event.target.value });
  const submit = async (event) => {
    event.preventDefault();
    setProblem(null);
    setDone(null);
    const name = form.kind === 'custom' ? form.name.trim() : form.kind;
    const model = form.model.trim();
    try {
      const providers = (await api('GET', 'settings/model-providers')).data ?? [];
      const existing = providers.find((provider) => provider.name === name)?.manifest;
      const models = existing?.models ?? [];
      const manifest = {
        ...(existing ?? { type: form.kind, ...(form.kind === 'custom' ? { name } : {}) }),
        ...(form.kind === 'custom' && form.baseUrl.trim() ? { base_url: form.baseUrl.trim() } : {}),
        ...(form.apiKey ? { auth: { api_key: form.apiKey } } : {}),
        models: models.some((item) => item.name === model) ? models : [...models, { name: model, model_id: model, properties: {} }],
      };
      await api('PUT', 'settings/model-providers', { manifest });
      const agent = agents.find((item) => item.name === form.agent);
      const current = (await api('GET', `agents/${encodeURIComponent(agent.id)}`)).data.manifest;
      await api('PUT', `agents/${encodeURIComponent(agent.id)}`, { manifest: { ...current, model: { ...current.model, name: `${name}/${model}` } } });
      setDone(`The agent ${agent.name} now uses ${name}/${model}.`);
      setForm({ ...form, apiKey: '' });
    } catch (failure) {
      setProblem(`${failure.param ? `${failure.param}: ` : ''}${failure.message}`);
    }
  };
  return (
    <section className="settings-section" aria-labelledby={headingId}>
      <h3 id={headingId}>Use a real model</h3>
      <form className="real-model" onSubmit={submit}>
        <label htmlFor={id('agent')}>Agent</label>
        <select id={id('agent')} value={form.agent} onChange={set('agent')}>
          {agents.map((agent) => <option key={agent.id} value={agent.name}>{agent.name}</option>)}
        </select>
        <label htmlFor={id('kind')}>Provider</label>
        <select id={id('kind')} value={form.kind} onChange={(event) => setForm({ ...form, kind: event.target.value, model: KINDS[event.target.value].model })}>
          {Object.entries(KINDS).map(([kind, { label }]) => <option key={kind} value={kind}>{label}</option>)}
        </select>
        {form.kind === 'custom' && (
          <>
            <label htmlFor={id('name')}>Provider name</label>
            <input id={id('name')} required value={form.name} onChange={set('name')} />
            <label htmlFor={id('base')}>Base URL</label>
            <input id={id('base')} type="url" required placeholder="https://host/v1" value={form.baseUrl} onChange={set('baseUrl')} />
          </>
        )}
        <label htmlFor={id('key')}>API key</label>
        <input id={id('key')} type="password" autoComplete="off" value={form.apiKey} onChange={set('apiKey')} />
        <label htmlFor={id('model')}>Model</label>
        <input id={id('model')} required value={form.model} onChange={set('model')} />
        <div className="row">
          <button type="submit" className="primary">Switch the agent</button>
        </div>
      </form>
      {problem && <p className="error" role="alert">{problem}</p>}
      {done && <p className="notice" role="status">{done}</p>}
    </section>
  );
}
