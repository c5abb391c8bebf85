// Saved agents (/api/v1/agents): the list, and an editor of one agent's manifest as JSON or
// YAML. What the server refuses (4xx) is shown beside the editor, with the field it names;
// "Check" shows what the manifest would run with (where the server offers the check).
import { useEffect, useId, useMemo, useRef, useState } from 'react';
import YAML from 'yaml';
import { CheckReport, checkAgent, useCheckOffered } from './AgentCheck.jsx';
import { keysAt, validate, yamlCursor } from './schema.js';
import { api, listAll } from './api.js';
import { href } from './route.js';

const NEW_MANIFEST = { model: { name: '' }, instructions: 'You are a helpful assistant.' };

export function Agents({ name, generation }) {
  const [agents, setAgents] = useState(null);
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);

  useEffect(() => {
    listAll('agents').then(setAgents, (failure) => setError(failure.message));
  }, [generation, reload]);

  const creating = name === 'new';
  const selected = agents?.find((agent) => agent.name === name || agent.id === name);
  return (
    <div className="split">
      <section className="list" aria-labelledby="agents-title">
        <h2 id="agents-title">Agents</h2>
        <a className="button primary" href={href({ view: 'agents', name: 'new' })}>New agent</a>
        {error && <p className="error" role="alert">{error}</p>}
        <ul>
          {(agents ?? []).map((agent) => (
            <li key={agent.id}>
              <a href={href({ view: 'agents', name: agent.name })} aria-current={agent === selected ? 'page' : undefined}>
                {agent.name} <span className="muted">v{agent.version}</span>
              </a>
            </li>
          ))}
        </ul>
      </section>
      <section className="editor-pane">
        {creating && <AgentEditor key="new" onSaved={() => setReload(reload + 1)} />}
        {selected && <AgentEditor key={selected.id} agent={selected} onSaved={() => setReload(reload + 1)} />}
        {!creating && !selected && agents && <p className="muted">{name ? `There is no agent ${name}.` : 'Pick an agent to edit, or make a new one.'}</p>}
      </section>
    </div>
  );
}

// The manifest schema the server publishes, where it does (its OpenAPI document lists it).
function useManifestSchema() {
  const [schema, setSchema] = useState(null);
  useEffect(() => {
    api('GET', 'openapi.json')
      .then((document) => (document.paths?.['/api/v1/schemas/agent-manifest.json']?.get ? api('GET', 'schemas/agent-manifest.json') : null))
      .then((found) => found && setSchema(found), () => setSchema(null));
  }, []);
  return schema;
}

function format(manifest, syntax) {
  return syntax === 'yaml' ? YAML.stringify(manifest) : `${JSON.stringify(manifest, null, 2)}\n`;
}

function AgentEditor({ agent, onSaved }) {
  const [syntax, setSyntax] = useState(() => localStorage.getItem('teamster.syntax') ?? 'yaml');
  const [agentName, setAgentName] = useState(agent?.name ?? '');
  const [text, setText] = useState(() => format(agent?.manifest ?? NEW_MANIFEST, syntax));
  const [problem, setProblem] = useState(null);
  const [notice, setNotice] = useState(null);
  const [saving, setSaving] = useState(false);
  const ids = { name: useId(), manifest: useId(), problem: useId() };
  const checkOffered = useCheckOffered();
  const schema = useManifestSchema();
  const editor = useRef(null);
  const [cursor, setCursor] = useState(null);
  // What the schema says of the text as it is typed (nothing while it does not parse).
  const live = useMemo(() => {
    if (!schema) return null;
    try {
      return validate(syntax === 'yaml' ? YAML.parse(text) : JSON.parse(text), schema);
    } catch {
      return null;
    }
  }, [schema, text, syntax]);
  // Keys the schema allows where a YAML key is being typed.
  const suggestions = useMemo(() => {
    if (!schema || syntax !== 'yaml' || !cursor) return [];
    return keysAt(schema, cursor.path).filter(({ key }) => key.startsWith(cursor.partial) && key !== cursor.partial).slice(0, 8);
  }, [schema, syntax, cursor]);
  const follow = (element) => setCursor(element.selectionStart === element.selectionEnd ? yamlCursor(element.value, element.selectionStart) : null);
  const complete = (key) => {
    const next = `${text.slice(0, cursor.start)}${key}: ${text.slice(cursor.start + cursor.partial.length)}`;
    const at = cursor.start + key.length + 2;
    setText(next);
    setCursor(null);
    requestAnimationFrame(() => {
      editor.current?.focus();
      editor.current?.setSelectionRange(at, at);
    });
  };
  const [report, setReport] = useState(null);
  const [checking, setChecking] = useState(false);

  const parse = (source, from) => (from === 'yaml' ? YAML.parse(source) : JSON.parse(source));
  const switchSyntax = (next) => {
    if (next === syntax) return;
    try {
      setText(format(parse(text, syntax), next));
      setProblem(null);
    } catch (failure) {
      setProblem({ message: `The manifest is not valid ${syntax.toUpperCase()}: ${failure.message}` });
      return;
    }
    setSyntax(next);
    localStorage.setItem('teamster.syntax', next);
  };

  // The manifest being edited as `{ manifest }`, or null (with the problem shown) when it does not parse.
  const parsedManifest = () => {
    try {
      return { manifest: parse(text, syntax) };
    } catch (failure) {
      setProblem({ message: `The manifest is not valid ${syntax.toUpperCase()}: ${failure.message}` });
      return null;
    }
  };

  const save = async (event) => {
    event.preventDefault();
    setNotice(null);
    const parsed = parsedManifest();
    if (parsed === null) return;
    const { manifest } = parsed;
    setSaving(true);
    try {
      if (agent) {
        const saved = await api('PUT', `agents/${encodeURIComponent(agent.id)}`, { manifest });
        setNotice(`Saved version ${saved.data.version}.`);
      } else {
        await api('POST', 'agents', { name: agentName.trim(), manifest });
        location.hash = href({ view: 'agents', name: agentName.trim() });
      }
      setProblem(null);
      onSaved();
    } catch (failure) {
      setProblem({ message: failure.message, param: failure.param, status: failure.status });
    } finally {
      setSaving(false);
    }
  };

  const check = async () => {
    setNotice(null);
    const parsed = parsedManifest();
    if (parsed === null) return;
    const { manifest } = parsed;
    setChecking(true);
    try {
      setReport(await checkAgent(agent?.name ?? agentName.trim(), manifest));
      setProblem(null);
    } catch (failure) {
      setReport(null);
      setProblem({ message: failure.message, param: failure.param, status: failure.status });
    } finally {
      setChecking(false);
    }
  };

  const remove = async () => {
    if (!confirm(`Delete the agent ${agent.name}?`)) return;
    try {
      await api('DELETE', `agents/${encodeURIComponent(agent.id)}`);
      location.hash = href({ view: 'agents' });
      onSaved();
    } catch (failure) {
      setProblem({ message: failure.message, param: failure.param, status: failure.status });
    }
  };

  return (
    <form className="agent-editor" onSubmit={save} aria-labelledby="editor-title">
      <h2 id="editor-title">{agent ? `Agent ${agent.name}` : 'New agent'}</h2>
      {!agent && (
        <div className="field">
          <label htmlFor={ids.name}>Name</label>
          <input id={ids.name} required value={agentName} onChange={(event) => setAgentName(event.target.value)} />
        </div>
      )}
      <fieldset className="row syntax">
        <legend>Format</legend>
        {['yaml', 'json'].map((option) => (
          <label key={option}>
            <input type="radio" name="syntax" value={option} checked={syntax === option} onChange={() => switchSyntax(option)} /> {option.toUpperCase()}
          </label>
        ))}
      </fieldset>
      <div className="field">
        <label htmlFor={ids.manifest}>Manifest</label>
        <textarea
          id={ids.manifest}
          className="code"
          spellCheck={false}
          rows={18}
          ref={editor}
          value={text}
          aria-invalid={problem || live?.length ? true : undefined}
          aria-describedby={problem ? ids.problem : undefined}
          onChange={(event) => {
            setText(event.target.value);
            follow(event.target);
          }}
          onSelect={(event) => follow(event.target)}
        />
      </div>
      {suggestions.length > 0 && (
        <div className="row suggestions" role="group" aria-label="Complete the key">
          {suggestions.map(({ key, description }) => (
            <button key={key} type="button" title={description} onClick={() => complete(key)}>{key}</button>
          ))}
        </div>
      )}
      {live?.length > 0 && (
        <ul className="schema-problems" aria-label="Schema problems" aria-live="polite">
          {live.slice(0, 10).map((item, index) => (
            <li key={index} className="error"><code>{item.param || '(the manifest)'}</code> {item.message}</li>
          ))}
        </ul>
      )}
      {problem && (
        <div id={ids.problem} className="error" role="alert">
          {problem.status ? `The server refused the manifest (${problem.status})` : 'Not saved'}
          {problem.param && <> at <code>{problem.param}</code></>}: {problem.message}
        </div>
      )}
      {notice && <p className="notice" role="status">{notice}</p>}
      {report && <CheckReport report={report} />}
      <div className="row">
        <button type="submit" className="primary" disabled={saving}>{saving ? 'Saving…' : 'Save'}</button>
        {checkOffered && <button type="button" onClick={check} disabled={checking}>{checking ? 'Checking…' : 'Check'}</button>}
        {agent && <a className="button" href={`#/`} onClick={() => localStorage.setItem('teamster.agent', agent.name)}>Chat with it</a>}
        {agent && <button type="button" className="danger" onClick={remove}>Delete</button>}
      </div>
    </form>
  );
}
