// The sessions list (GET /api/v1/sessions, most recently updated first) with a search over
// what it shows: title, id and agent. It stays current through the caller's live channel
// (GET /api/v1/live): sessions created, renamed and deleted, by this page or any other client,
// show without polling. Each time the channel opens (again) the list is read again, and what
// the channel sent meanwhile is applied on top.
import { useMemo, useRef, useState } from 'react';
import { listAll } from './api.js';
import { useLive } from './live.js';
import { href } from './route.js';

// The list after one event of the caller's channel.
function applyEvent(sessions, event) {
  switch (event.type) {
    case 'thread_created':
      return [event.session, ...sessions.filter((session) => session.id !== event.session.id)];
    case 'thread_changed':
      return sessions.map((session) => (session.id === event.session_id ? { ...session, title: event.title ?? null } : session));
    case 'thread_deleted':
      return sessions.filter((session) => session.id !== event.session_id);
    default:
      return sessions;
  }
}

export function Sessions({ current, generation }) {
  const [sessions, setSessions] = useState(null);
  const [error, setError] = useState(null);
  const [query, setQuery] = useState('');
  // The events that came while the list was being read: applied once it has been.
  const pending = useRef(null);

  // `generation` changes with the key: the channel is opened again with the new one.
  useLive('live', {
    onOpen: () => {
      const read = [];
      pending.current = read;
      listAll('sessions?limit=25', 200)
        .then((found) => {
          if (pending.current !== read) return;
          pending.current = null;
          setSessions(read.reduce(applyEvent, found));
          setError(null);
        })
        .catch((failure) => pending.current === read && setError(failure.message));
    },
    onEvent: (event) => {
      if (pending.current) pending.current.push(event);
      else setSessions((listed) => (listed ? applyEvent(listed, event) : listed));
    },
    onEnd: (failure) => failure && setError(failure.message),
  }, generation);

  const shown = useMemo(() => {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    return (sessions ?? []).filter((session) => {
      const haystack = `${session.title ?? ''} ${session.id} ${session.agent_name ?? ''}`.toLowerCase();
      return words.every((word) => haystack.includes(word));
    });
  }, [sessions, query]);

  return (
    <section className="sessions">
      <label htmlFor="session-search" className="visually-hidden">Search sessions</label>
      <input id="session-search" type="search" placeholder="Search sessions" value={query} onChange={(event) => setQuery(event.target.value)} />
      {error && <p className="error" role="alert">{error}</p>}
      {sessions === null && !error && <p className="muted">Loading…</p>}
      {sessions !== null && shown.length === 0 && <p className="muted">{query ? 'No session matches.' : 'No sessions yet.'}</p>}
      <ul aria-label="Sessions list">
        {shown.map((session) => (
          <li key={session.id}>
            <a href={href({ view: 'chat', id: session.id })} aria-current={session.id === current ? 'page' : undefined}>
              <span className="session-title">{session.title || session.id}</span>
              <span className="session-meta">{session.agent_name ?? 'inline agent'} · {formatTime(session.updated_at)}</span>
            </a>
          </li>
        ))}
      </ul>
    </section>
  );
}

function formatTime(timestamp) {
  if (!timestamp) return '';
  const date = new Date(timestamp);
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay ? date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : date.toLocaleDateString();
}
