// The sessions list (GET /api/v1/sessions, most recently updated first) with a search over
// what it shows: title, id and agent.
import { useEffect, useMemo, useState } from 'react';
import { listAll } from './api.js';
import { href } from './route.js';

export function Sessions({ current, generation }) {
  const [sessions, setSessions] = useState(null);
  const [error, setError] = useState(null);
  const [query, setQuery] = useState('');

  useEffect(() => {
    let live = true;
    listAll('sessions?limit=25', 200)
      .then((found) => live && (setSessions(found), setError(null)))
      .catch((failure) => live && setError(failure.message));
    return () => {
      live = false;
    };
  }, [generation, current]);

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
