// One chat: useChat against POST /api/v1/chat (the chat id is the session id), with the
// session's history rebuilt from its events, a running turn resumed after a reload, a stop
// button that cancels the turn, and a composer with file attachments.
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { api, apiBase, authHeaders, errorMessage, listAll, reportingFetch } from './api.js';
import { formatBytes } from './format.js';
import { loadHistory } from './history.js';
import { Message } from './Message.jsx';
import { Inspector } from './Inspector.jsx';
import { Panels } from './Panels.jsx';
import { CloneButton, ModelPicker, TerminalCommand } from './SessionBar.jsx';
import { href } from './route.js';

const AGENT_STORAGE = 'teamster.agent';
const QUESTION_TOOL = 'ask_user_question';

// Whether a part is a call the user has yet to answer: an approval, or a question.
function waitsForUser(part) {
  const name = part.type === 'dynamic-tool' ? part.toolName : part.type.startsWith('tool-') ? part.type.slice(5) : null;
  return name !== null && (part.state === 'approval-requested' || (name === QUESTION_TOOL && part.state === 'input-available'));
}

export function Chat({ id, fresh: freshAtFirst, onStarted, onTurnEnded }) {
  // Whether the chat began here, new: kept for the component's life (its first message moves
  // the URL to #/chat/<id>, which makes the prop false).
  const [fresh] = useState(freshAtFirst);
  const [agents, setAgents] = useState(null);
  const [agent, setAgent] = useState(() => localStorage.getItem(AGENT_STORAGE) ?? '');
  const [session, setSession] = useState(null);
  const [loading, setLoading] = useState(!fresh);
  const [loadError, setLoadError] = useState(null);
  const [started, setStarted] = useState(!fresh);
  // Set when the user answered a waiting call: the answers go out once every call has one.
  const answered = useRef(false);
  const agentRef = useRef(agent);
  agentRef.current = agent;
  // The message list follows new output while the user is at its end.
  const list = useRef(null);
  const atEnd = useRef(true);

  const transport = useMemo(
    () =>
      new DefaultChatTransport({
        api: `${apiBase}chat`,
        headers: () => authHeaders(),
        fetch: reportingFetch,
        // keepRunning: the turn outlives this page, so a reload resumes it; stop cancels it.
        body: () => ({ agent: agentRef.current || undefined, keepRunning: true }),
      }),
    [],
  );
  // The answers go out once no call of the last message waits for the user any more: a call
  // still running (a sub-agent's, waiting on its own gated call) does not hold them back.
  const sendAutomaticallyWhen = useCallback(({ messages }) => {
    const last = messages.at(-1);
    if (!answered.current || last?.role !== 'assistant') return false;
    const complete = !last.parts.some(waitsForUser);
    if (complete) answered.current = false;
    return complete;
  }, []);
  // Answers whose turn was cancelled (stopped here, or elsewhere) are marked so.
  const [cancelled, setCancelled] = useState(() => new Set());
  const onFinish = useCallback(({ message, isAbort }) => {
    if (isAbort && message?.role === 'assistant') setCancelled((ids) => new Set(ids).add(message.id));
    onTurnEnded?.();
  }, [onTurnEnded]);
  const chat = useChat({ id, transport, sendAutomaticallyWhen, onFinish });
  const { messages, status, error, setMessages, resumeStream, sendMessage, stop, clearError } = chat;

  // Agents for the picker of a new chat.
  useEffect(() => {
    if (!fresh) return;
    // The picker starts on the agent last used: this browser's last new chat, else the agent of
    // the most recent session, else `demo`, else the first.
    Promise.all([listAll('agents'), api('GET', 'sessions?limit=1').catch(() => ({ data: [] }))])
      .then(([found, recent]) => {
        setAgents(found);
        const known = (name) => Boolean(name) && found.some((item) => item.name === name);
        const choice = [agentRef.current, recent.data?.[0]?.agent_name, 'demo'].find(known) ?? found[0]?.name;
        if (choice && choice !== agentRef.current) setAgent(choice);
      })
      .catch(() => setAgents([]));
  }, [fresh]);

  // An existing session: its history, then its running turn if any.
  useEffect(() => {
    if (fresh) return;
    let live = true;
    (async () => {
      try {
        const [found, history] = await Promise.all([api('GET', `sessions/${encodeURIComponent(id)}`), loadHistory(id)]);
        if (!live) return;
        setSession(found.data);
        setMessages(history.messages);
        setLoading(false);
        await resumeStream();
        if (live && history.running) {
          // The resumed stream ended (or the turn ended before it was asked for): the stored
          // events are the whole story now.
          const settled = await loadHistory(id);
          if (live && !settled.running) setMessages(settled.messages);
        }
      } catch (failure) {
        if (live) {
          setLoadError(failure.status === 404 ? 'There is no such session.' : failure.message);
          setLoading(false);
        }
      }
    })();
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id, fresh]);

  const busy = status === 'submitted' || status === 'streaming';
  // The session as the server has it (its mode changes when a plan is approved), read again
  // after each turn once it exists.
  const hasAnswer = messages.some((message) => message.role === 'assistant');
  useEffect(() => {
    if (!started || status !== 'ready' || !hasAnswer) return;
    let live = true;
    api('GET', `sessions/${encodeURIComponent(id)}`).then((found) => live && setSession(found.data), () => {});
    return () => {
      live = false;
    };
  }, [id, started, status, hasAnswer]);
  // The saved agent's manifest: its modes and whether it has a sandbox.
  const [manifest, setManifest] = useState(null);
  useEffect(() => {
    if (!session?.agent_name) return;
    api('GET', `agents/${encodeURIComponent(session.agent_name)}`).then((found) => setManifest(found.data.manifest), () => {});
  }, [session?.agent_name]);
  const remove = async () => {
    if (!confirm('Delete this session and its sandbox?')) return;
    await api('DELETE', `sessions/${encodeURIComponent(id)}`).then(() => {
      onTurnEnded?.();
      location.hash = href({ view: 'chat', id: null });
    }, (failure) => alert(failure.message));
  };
  const send = async (text, files) => {
    const first = !started && messages.length === 0;
    if (!started) {
      setStarted(true);
      localStorage.setItem(AGENT_STORAGE, agent);
      onStarted?.(id);
    }
    await sendMessage({ text, files });
    // A new session is titled after its first message, for the list and its search.
    const title = text.trim().split('\n')[0].slice(0, 80) || files?.[0]?.filename;
    if (first && title) {
      await api('PATCH', `sessions/${encodeURIComponent(id)}`, { title }).then(() => onTurnEnded?.(), () => {});
    }
  };
  // Instructions for the running turn, taken before its next model call.
  const [steers, setSteers] = useState([]);
  useEffect(() => {
    if (!busy) setSteers([]);
  }, [busy]);
  const steer = async (text) => {
    await api('POST', `sessions/${encodeURIComponent(id)}/steer`, { content: text });
    setSteers((notes) => [...notes, text]);
  };
  // A follow-up waits for the running turn to end, then starts the next turn, which the page
  // follows once the stream it has ends.
  const [queued, setQueued] = useState(0);
  const queue = async (text) => {
    await api('POST', `sessions/${encodeURIComponent(id)}/follow-ups`, { content: text });
    setQueued((count) => count + 1);
  };
  useEffect(() => {
    if (status !== 'ready' || queued === 0) return;
    setQueued(0);
    (async () => {
      const deadline = Date.now() + 5_000;
      while (Date.now() < deadline) {
        const [history, waiting] = await Promise.all([loadHistory(id), api('GET', `sessions/${encodeURIComponent(id)}/follow-ups`)]);
        if (history.running || waiting.data.length === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 150));
      }
      await followServer();
    })().catch(() => {});
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [status, queued]);
  // Stop: the stream ends here and the turn on the server; then the page shows the session as
  // the server has it once the turn has ended (what the turn did before it stopped, and nothing
  // the page does not know of), without a reload.
  const cancel = async () => {
    stop();
    await api('POST', `sessions/${encodeURIComponent(id)}/cancel`, {}).catch(() => {});
    const deadline = Date.now() + 10_000;
    try {
      let history = await loadHistory(id);
      while (history.running && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 150));
        history = await loadHistory(id);
      }
      setMessages(history.messages);
      // A turn still running is one the page did not start: it is followed like a resumed one.
      if (history.running) await resumeStream();
    } catch {
      // The page keeps what it shows; the next turn's end loads the session again.
    }
  };
  const [inspecting, setInspecting] = useState(false);
  // The session as the server has it: its history, then its running turn followed live.
  const followServer = async () => {
    setMessages((await loadHistory(id)).messages);
    await resumeStream();
    const settled = await loadHistory(id);
    if (!settled.running) setMessages(settled.messages);
  };
  const answer = {
    // "Always allow": the native API takes the grant with the approval (the chat route takes
    // approvals of this call only), and the page follows the turn that answer starts.
    approveAlways: async (callId) => {
      const split = callId.lastIndexOf('.');
      const decision = {
        type: 'user.tool_approval',
        thread_id: split < 0 ? 'main' : callId.slice(0, split),
        tool_call_id: split < 0 ? callId : callId.slice(split + 1),
        approval: { status: 'allow', always: 'tool' },
      };
      await api('POST', `sessions/${encodeURIComponent(id)}/turns`, { stream: false, input: [decision] });
      await followServer();
    },
    approve: (approvalId, approved, reason) => {
      answered.current = true;
      chat.addToolApprovalResponse({ id: approvalId, approved, reason: reason || undefined });
    },
    reply: (tool, toolCallId, output) => {
      answered.current = true;
      chat.addToolOutput({ tool, toolCallId, output });
    },
  };
  const lastMessage = messages.at(-1);
  useEffect(() => {
    if (atEnd.current && list.current) list.current.scrollTop = list.current.scrollHeight;
  }, [messages, status]);
  const onScroll = () => {
    const element = list.current;
    atEnd.current = element.scrollHeight - element.scrollTop - element.clientHeight < 80;
  };

  if (loading) return <p className="muted center" role="status">Loading the session…</p>;
  if (loadError) return <p className="error center" role="alert">{loadError}</p>;
  return (
    <div className="chat">
      <div className="chat-head">
        {fresh && !started ? (
          <AgentPicker agents={agents} agent={agent} onChange={setAgent} />
        ) : (
          <div className="row">
            <p className="chat-title">
              <span className="muted">Agent</span> <strong>{session?.agent_name ?? agent ?? 'inline agent'}</strong>
              <span className="muted"> · {session?.title || id}</span>
            </p>
            {session && manifest?.modes?.length > 0 && <ModePicker session={session} modes={manifest.modes} busy={busy} onChange={setSession} />}
            {session && <ModelPicker session={session} busy={busy} onChange={setSession} />}
            {session && <CloneButton session={session} busy={busy} />}
            {session && (
              <button type="button" className="link" aria-expanded={inspecting} onClick={() => setInspecting(!inspecting)}>
                {inspecting ? 'Close the inspector' : 'Inspect turns'}
              </button>
            )}
            {session && <button type="button" className="link" onClick={remove} disabled={busy}>Delete session</button>}
          </div>
        )}
        {session && <TerminalCommand sessionId={id} />}
        {session && inspecting && <Inspector sessionId={id} model={session.model || manifest?.model?.name} generation={`${status}:${messages.length}`} />}
      </div>
      <p className="visually-hidden" role="status">{busy ? 'The agent is answering.' : hasAnswer && status === 'ready' ? 'The agent has answered.' : ''}</p>
      <div className="messages" ref={list} onScroll={onScroll} aria-busy={busy}>
        {messages.length === 0 && <p className="muted center">Send a message to start.</p>}
        {messages.map((message) => (
          <Message
            key={message.id}
            message={message}
            sessionId={id}
            waiting={message === lastMessage && !busy}
            cancelled={cancelled.has(message.id)}
            answer={answer}
          />
        ))}
        {steers.map((note, index) => (
          <p key={index} className="muted steer">Sent to the running turn: {note}</p>
        ))}
        {status === 'submitted' && <p className="muted spinner">Waiting for the agent…</p>}
        {!busy && lastMessage?.role === 'assistant' && (
          <div className="retry">
            <button type="button" onClick={() => chat.regenerate()}>Retry</button>
          </div>
        )}
        {error && (
          <div className="error" role="alert">
            {errorMessage(error)}{' '}
            <button type="button" onClick={clearError}>Dismiss</button>
          </div>
        )}
      </div>
      {started && <Panels sessionId={id} refresh={queued} status={hasAnswer ? status : 'pending'} sandbox={manifest ? Boolean(manifest.config?.sandbox?.enabled) : Boolean(session && !session.agent_name)} />}
      <Composer busy={busy} disabled={fresh && !started && !agent} onSend={send} onSteer={steer} onQueue={queue} onStop={cancel} />
    </div>
  );
}

// The session's mode, for agents that have modes (a plan approved in one switches to another).
function ModePicker({ session, modes, busy, onChange }) {
  const [problem, setProblem] = useState(null);
  const current = session.mode ?? (modes.find((mode) => mode.default) ?? modes[0]).id;
  const change = async (mode) => {
    try {
      setProblem(null);
      onChange((await api('PATCH', `sessions/${encodeURIComponent(session.id)}`, { mode })).data);
    } catch (failure) {
      setProblem(failure.message);
    }
  };
  return (
    <div className="row">
      <label htmlFor="mode-picker">Mode</label>
      <select id="mode-picker" value={current} disabled={busy} onChange={(event) => change(event.target.value)}>
        {modes.map((mode) => (
          <option key={mode.id} value={mode.id}>{mode.name ?? mode.id}</option>
        ))}
      </select>
      {problem && <span className="error" role="alert">{problem}</span>}
    </div>
  );
}

function AgentPicker({ agents, agent, onChange }) {
  if (agents === null) return <p className="muted">Loading agents…</p>;
  if (agents.length === 0) {
    return (
      <p className="muted">
        No agents yet: <a href={href({ view: 'agents' })}>make one</a>.
      </p>
    );
  }
  return (
    <div className="row">
      <label htmlFor="agent-picker">Agent</label>
      <select id="agent-picker" value={agent} onChange={(event) => onChange(event.target.value)}>
        {agents.map((item) => (
          <option key={item.id} value={item.name}>{item.name}</option>
        ))}
      </select>
    </div>
  );
}

// The message box: Enter sends, Shift+Enter is a new line; files are attached as data URLs.
// While a turn runs, Enter steers it instead.
function Composer({ busy, disabled, onSend, onSteer, onQueue, onStop }) {
  const [text, setText] = useState('');
  const [files, setFiles] = useState([]);
  const [problem, setProblem] = useState(null);
  const fileInput = useRef(null);

  const submit = async (event) => {
    event?.preventDefault();
    if (busy && text.trim()) {
      try {
        setProblem(null);
        await onSteer(text.trim());
        setText('');
      } catch (failure) {
        setProblem(failure.message);
      }
      return;
    }
    if (busy || disabled || (!text.trim() && files.length === 0)) return;
    const parts = await Promise.all(files.map(toFilePart));
    setText('');
    setFiles([]);
    if (fileInput.current) fileInput.current.value = '';
    await onSend(text, parts.length ? parts : undefined);
  };

  return (
    <form className="composer" onSubmit={submit} aria-label="Send a message">
      {files.length > 0 && (
        <ul className="attachments" aria-label="Attached files">
          {files.map((file, index) => (
            <li key={`${file.name}-${index}`}>
              {file.name} <span className="muted">({formatBytes(file.size)})</span>
              <button type="button" aria-label={`Remove ${file.name}`} onClick={() => setFiles(files.filter((_, other) => other !== index))}>×</button>
            </li>
          ))}
        </ul>
      )}
      {problem && <p className="error" role="alert">{problem}</p>}
      <div className="composer-row">
        <label htmlFor="attach" className="button" title="Attach files">
          Attach
          <input id="attach" ref={fileInput} type="file" multiple className="visually-hidden"
            onChange={(event) => setFiles([...files, ...event.target.files])} />
        </label>
        <label htmlFor="message" className="visually-hidden">Message</label>
        <textarea
          id="message"
          rows={2}
          placeholder={busy ? 'Steer the running turn (Enter sends)' : 'Message the agent (Enter sends, Shift+Enter for a new line)'}
          value={text}
          onChange={(event) => setText(event.target.value)}
          onKeyDown={(event) => {
            if (event.key === 'Enter' && !event.shiftKey && !event.nativeEvent.isComposing) submit(event);
          }}
        />
        {busy && text.trim() && <button type="submit">Steer</button>}
        {busy && text.trim() && (
          <button type="button" title="Send once the running turn ends" onClick={async () => {
            try {
              setProblem(null);
              await onQueue(text.trim());
              setText('');
            } catch (failure) {
              setProblem(failure.message);
            }
          }}>Queue</button>
        )}
        {busy ? (
          <button type="button" className="danger" onClick={onStop}>Stop</button>
        ) : (
          <button type="submit" className="primary" disabled={disabled}>Send</button>
        )}
      </div>
    </form>
  );
}

function toFilePart(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ type: 'file', mediaType: file.type || 'application/octet-stream', filename: file.name, url: reader.result });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
