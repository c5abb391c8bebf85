// Settings (admins only): a one-form switch of an agent (the `demo` agent by default) to a real
// provider's model, then model providers and MCP servers, each a manifest edited as JSON or
// YAML and written with PUT (create or replace), renamed or deleted where the server offers it,
// and each MCP server's connection tested (its tools listed). Secrets come back redacted;
// sending a redacted value back keeps the stored one.
import { useEffect, useId, useState } from 'react';
import YAML from 'yaml';
import { api, listAll } from './api.js';

const PROVIDER_EXAMPLE = {
  type: 'openai', name: 'openai', base_url: 'https://api.openai.com/v1', auth: { api_key: 'sk-...' },
  models: [{ name: 'gpt-4o', model_id: 'gpt-4o', properties: {} }],
};
const MCP_EXAMPLE = { type: 'remote', name: 'docs', description: 'What the server offers, for agents.', url: 'https://example.com/mcp' };

// The methods the server offers on `/api/v1/<path>/{name}` (its OpenAPI document says), so that
// delete and rename show only where the server has them.
function useItemMethods() {
  const [methods, setMethods] = useState({});
  useEffect(() => {
    api('GET', 'openapi.json').then((document) => {
      const found = {};
      for (const [route, operations] of Object.entries(document.paths ?? {})) {
        found[route] = new Set(Object.keys(operations));
      }
      setMethods(found);
    }, () => setMethods({}));
  }, []);
  return (path) => methods[`/api/v1/${path}/{name}`] ?? new Set();
}

export function Settings({ generation }) {
  const methodsOf = useItemMethods();
  return (
    <div className="settings">
      <h2>Settings</h2>
      <RealModel generation={generation} />
      <ManifestSection title="Model providers" path="settings/model-providers" example={PROVIDER_EXAMPLE} generation={generation} methods={methodsOf('settings/model-providers')} />
      <ManifestSection title="MCP servers" path="settings/mcp-servers" example={MCP_EXAMPLE} generation={generation} methods={methodsOf('settings/mcp-servers')} testable />
    </div>
  );
}

// An MCP server's connection tested as a turn would make it: its tools listed, or why not.
function McpTest({ name }) {
  const [verdict, setVerdict] = useState(null);
  const run = async () => {
    setVerdict({ pending: true });
    const started = performance.now();
    try {
      const tools = (await api('GET', `mcp-servers/${encodeURIComponent(name)}/tools`)).data ?? [];
      setVerdict({ ok: true, tools, ms: Math.round(performance.now() - started) });
    } catch (failure) {
      setVerdict({ ok: false, error: failure.message });
    }
  };
  return (
    <>
      <button type="button" className="link" onClick={run} disabled={verdict?.pending}>Test {name}</button>
      {verdict?.pending && <span className="muted" role="status"> connecting…</span>}
      {verdict?.ok && (
        <div className="mcp-verdict" role="status">
          <p className="notice">Connected in {verdict.ms} ms: {verdict.tools.length} tools.</p>
          <ul aria-label={`Tools of ${name}`}>
            {verdict.tools.map((tool) => (
              <li key={tool.name}><span className="tool-name">{tool.name}</span>{tool.description && <span className="muted"> — {tool.description}</span>}</li>
            ))}
          </ul>
        </div>
      )}
      {verdict && verdict.ok === false && <p className="error" role="alert">{name} failed: {verdict.error}</p>}
    </>
  );
}

// A new name for an item, sent as `PATCH <path>/{name}`.
function RenameForm({ path, name, onDone, onCancel }) {
  const [value, setValue] = useState(name);
  const [problem, setProblem] = useState(null);
  const inputId = useId();
  const submit = async (event) => {
    event.preventDefault();
    try {
      await api('PATCH', `${path}/${encodeURIComponent(name)}`, { name: value.trim() });
      onDone();
    } catch (failure) {
      setProblem(`${failure.param ? `${failure.param}: ` : ''}${failure.message}`);
    }
  };
  return (
    <form className="row" onSubmit={submit}>
      <label htmlFor={inputId}>New name for {name}</label>
      <input id={inputId} required value={value} onChange={(event) => setValue(event.target.value)} />
      <button type="submit" className="primary">Rename</button>
      <button type="button" onClick={onCancel}>Cancel</button>
      {problem && <span className="error" role="alert">{problem}</span>}
    </form>
  );
}

function ManifestSection({ title, path, example, generation, methods, testable = false }) {
  const [items, setItems] = useState(null);
  const [error, setError] = useState(null);
  const [editing, setEditing] = useState(null);
  const [renaming, setRenaming] = useState(null);
  const [reload, setReload] = useState(0);
  const headingId = useId();
  const remove = async (name) => {
    if (!confirm(`Delete ${name}? Agents that name it stop working until they are changed.`)) return;
    try {
      setError(null);
      await api('DELETE', `${path}/${encodeURIComponent(name)}`);
    } catch (failure) {
      setError(failure.message);
    }
    setReload((value) => value + 1);
  };

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
            <div className="row">
              <button type="button" className="link" onClick={() => setEditing(item.manifest)}>{item.name}</button>
              <span className="muted">{item.manifest?.type}</span>
              {methods.has('patch') && <button type="button" className="link" onClick={() => setRenaming(item.name)}>Rename {item.name}</button>}
              {methods.has('delete') && <button type="button" className="link danger" onClick={() => remove(item.name)}>Delete {item.name}</button>}
            </div>
            {testable && <McpTest name={item.name} />}
            {renaming === item.name && (
              <RenameForm path={path} name={item.name} onCancel={() => setRenaming(null)}
                onDone={() => { setRenaming(null); setReload((value) => value + 1); }} />
            )}
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
