// One chat: useChat against POST /api/v1/chat (the chat id is the session id), with the
// session's history rebuilt from its events, a running turn resumed after a reload, a stop
// button that cancels the turn, and a composer with file attachments. The session's live
// channel (GET /api/v1/sessions/{id}/live) keeps its title, mode, model and panels current, and
// tells of turns the page did not start (a follow-up, another client's), which it then follows:
// nothing is polled.
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { api, apiBase, authHeaders, errorMessage, listAll, reportingFetch } from './api.js';
import { formatBytes } from './format.js';
import { loadHistory } from './history.js';
import { useLive } from './live.js';
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

// How long Stop waits for the cancelled turn to end before showing the session as it is.
const CANCEL_WAIT_MS = 10_000;

export function Chat({ id, fresh: freshAtFirst, onStarted }) {
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
  // How many turns the page's own requests started whose `agent_start` the live channel has
  // yet to bring: those are streamed already, any other is followed.
  const ownStarts = useRef(0);
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
    if (complete) {
      answered.current = false;
      ownStarts.current += 1;
    }
    return complete;
  }, []);
  // Answers whose turn was cancelled (stopped here, or elsewhere) are marked so.
  const [cancelled, setCancelled] = useState(() => new Set());
  const onFinish = useCallback(({ message, isAbort }) => {
    if (isAbort && message?.role === 'assistant') setCancelled((ids) => new Set(ids).add(message.id));
  }, []);
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

  const busy = status === 'submitted' || status === 'streaming';
  const busyRef = useRef(busy);
  busyRef.current = busy;

  // The display state the live channel keeps (title, mode, model, tasks, plans, follow-ups,
  // state, the running turn), and who waits for the running turn to end.
  const [display, setDisplay] = useState(null);
  const displayRef = useRef(null);
  const idleWaiters = useRef([]);
  // Bumped when a turn ends: the grants (not on the channel) are read again.
  const [turnsEnded, setTurnsEnded] = useState(0);
  const showDisplay = (next) => {
    displayRef.current = next;
    setDisplay(next);
    // The session as the page shows it follows the display state (a plan approved switches the
    // mode; another client renames the session or switches its model).
    setSession((known) => (known ? withDisplay(known, next) : known));
    if (!next.running_turn_id) {
      idleWaiters.current.splice(0).forEach((resolve) => resolve());
    }
  };
  // Resolves once no turn runs (as the channel has it), or after `ms`.
  const whenIdle = (ms) => new Promise((resolve) => {
    if (displayRef.current && !displayRef.current.running_turn_id) return resolve();
    const timer = setTimeout(resolve, ms);
    idleWaiters.current.push(() => {
      clearTimeout(timer);
      resolve();
    });
  });

  // Following the server: the turns the page did not start itself (a follow-up, a turn another
  // client started, one a reload found running) are read from the session's history and their
  // stream resumed. `following` is set while that (or the first load, or Stop) is under way;
  // `followAgain` when a turn started meanwhile, to be followed once the page is free.
  const following = useRef(false);
  const followAgain = useRef(false);
  const follow = useCallback(async (work) => {
    if (following.current) {
      followAgain.current = true;
      return;
    }
    following.current = true;
    try {
      await work();
      while (followAgain.current && !busyRef.current) {
        followAgain.current = false;
        setMessages((await loadHistory(id)).messages);
        await resumeStream();
        const settled = await loadHistory(id);
        if (!settled.running) setMessages(settled.messages);
      }
    } catch {
      // The page keeps what it shows; the next turn the channel tells of loads the session again.
    } finally {
      following.current = false;
    }
  }, [id, setMessages, resumeStream]);
  const followServer = useCallback(() => {
    followAgain.current = true;
    return follow(async () => {});
  }, [follow]);

  // An existing session: its history, then its running turn if any.
  useEffect(() => {
    if (fresh) return;
    let live = true;
    follow(async () => {
      try {
        const [found, history] = await Promise.all([api('GET', `sessions/${encodeURIComponent(id)}`), loadHistory(id)]);
        if (!live) return;
        setSession(withDisplay(found.data, displayRef.current));
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
    });
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id, fresh]);

  // The session exists on the server once the first message has been answered: then its
  // channel opens, and a new chat reads the session once.
  const hasAnswer = messages.some((message) => message.role === 'assistant');
  const [exists, setExists] = useState(!fresh);
  useEffect(() => {
    if (!exists && started && (status === 'streaming' || (status === 'ready' && hasAnswer))) setExists(true);
  }, [exists, started, status, hasAnswer]);
  useEffect(() => {
    if (!fresh || !exists || session) return;
    api('GET', `sessions/${encodeURIComponent(id)}`).then((found) => setSession((known) => known ?? withDisplay(found.data, displayRef.current)), () => {});
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [exists]);

  useLive(exists ? `sessions/${encodeURIComponent(id)}/live` : null, {
    // The channel of a session deleted elsewhere ends, and opening it again answers 404.
    onEnd: (failure) => failure?.status === 404 && setLoadError('This session was deleted.'),
    onOpen: (opened) => {
      // Reopened after a drop: turns may have run meanwhile; the history is read again.
      if (opened > 1 && !busyRef.current) {
        ownStarts.current = 0;
        followServer();
      }
    },
    onEvent: (event) => {
      const known = displayRef.current;
      switch (event.type) {
        case 'display_state_changed': {
          // The channel's first snapshot: the turn the page's first message started (a new
          // chat's channel opens once it runs) is in it, not in an `agent_start` to come.
          if (!known && !busyRef.current) ownStarts.current = 0;
          else if (!known && ownStarts.current > 0 && (event.display.running_turn_id || fresh)) ownStarts.current -= 1;
          showDisplay(event.display);
          return;
        }
        case 'agent_start':
          if (known) showDisplay({ ...known, running_turn_id: event.turn_id, last_turn_id: event.turn_id });
          if (ownStarts.current > 0) {
            // The turn the page's own request started: the page streams it already.
            ownStarts.current -= 1;
          } else if (busyRef.current) {
            // Started once the page's own turn ended (a follow-up): followed once it is free.
            followAgain.current = true;
          } else {
            followServer();
          }
          return;
        case 'agent_end':
          if (known) showDisplay({ ...known, running_turn_id: null, last_turn_status: event.status });
          setTurnsEnded((count) => count + 1);
          return;
        default: {
          if (!known) return;
          const changed = changedDisplay(known, event);
          if (changed) showDisplay(changed);
        }
      }
    },
  });
  // A turn that started while the page streamed its own is followed once that one ends.
  useEffect(() => {
    if (!busy && followAgain.current && !following.current) follow(async () => {});
  }, [busy, follow]);
  // A request of the page's that failed may have started no turn: the next `agent_start` is
  // followed (at worst a turn the page streamed already is read once more).
  useEffect(() => {
    if (status === 'error') ownStarts.current = 0;
  }, [status]);

  // The saved agent's manifest: its modes and whether it has a sandbox.
  const [manifest, setManifest] = useState(null);
  useEffect(() => {
    if (!session?.agent_name) return;
    api('GET', `agents/${encodeURIComponent(session.agent_name)}`).then((found) => setManifest(found.data.manifest), () => {});
  }, [session?.agent_name]);
  const remove = async () => {
    if (!confirm('Delete this session and its sandbox?')) return;
    await api('DELETE', `sessions/${encodeURIComponent(id)}`).then(() => {
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
    ownStarts.current += 1;
    await sendMessage({ text, files });
    // A new session is titled after its first message, for the list and its search.
    const title = text.trim().split('\n')[0].slice(0, 80) || files?.[0]?.filename;
    if (first && title) {
      await api('PATCH', `sessions/${encodeURIComponent(id)}`, { title }).catch(() => {});
    }
  };
  const regenerate = () => {
    ownStarts.current += 1;
    return chat.regenerate();
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
  // A follow-up waits for the running turn to end, then starts the next turn, which the live
  // channel tells of and the page follows.
  const queue = async (text) => {
    await api('POST', `sessions/${encodeURIComponent(id)}/follow-ups`, { content: text });
  };
  // Stop: the stream ends here and the turn on the server; once the channel says the turn has
  // ended the page shows the session as the server has it (what the turn did before it
  // stopped, and nothing the page does not know of), without a reload.
  const cancel = async () => {
    stop();
    await api('POST', `sessions/${encodeURIComponent(id)}/cancel`, {}).catch(() => {});
    await follow(async () => {
      await whenIdle(CANCEL_WAIT_MS);
      const history = await loadHistory(id);
      setMessages(history.messages);
      // A turn still running is one the page did not start: it is followed like a resumed one.
      if (history.running) await resumeStream();
    });
  };
  const [inspecting, setInspecting] = useState(false);
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
      ownStarts.current += 1;
      try {
        await api('POST', `sessions/${encodeURIComponent(id)}/turns`, { stream: false, input: [decision] });
      } catch (failure) {
        ownStarts.current -= 1;
        throw failure;
      }
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
            <button type="button" onClick={regenerate}>Retry</button>
          </div>
        )}
        {error && (
          <div className="error" role="alert">
            {errorMessage(error)}{' '}
            <button type="button" onClick={clearError}>Dismiss</button>
          </div>
        )}
      </div>
      {started && <Panels sessionId={id} display={display} turnsEnded={turnsEnded} sandbox={manifest ? Boolean(manifest.config?.sandbox?.enabled) : Boolean(session && !session.agent_name)} />}
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

// The session with what the live channel's display state says of it now (a GET answered
// before a change the channel has brought since is not shown over it).
function withDisplay(session, display) {
  if (!display) return session;
  const shown = { title: display.title ?? null, mode: display.mode ?? null, model: display.model ?? null };
  const same = Object.entries(shown).every(([field, value]) => (session[field] ?? null) === value);
  return same ? session : { ...session, ...shown };
}

// The display state after an event of the session's channel that changes what the page shows
// (the `display_state_changed` that follows it would too, a moment later); null for others.
function changedDisplay(display, event) {
  switch (event.type) {
    case 'thread_changed':
      return { ...display, title: event.title ?? null };
    case 'mode_changed':
      return { ...display, mode: event.mode ?? null };
    case 'model_changed':
      return { ...display, model: event.model ?? null };
    case 'state_changed':
      return { ...display, state: event.state };
    case 'task_updated':
      return { ...display, tasks: event.tasks };
    case 'plans_changed':
      return { ...display, plans: event.plans };
    case 'follow_up_queued':
      return { ...display, follow_ups: event.follow_ups };
    default:
      return null;
  }
}
