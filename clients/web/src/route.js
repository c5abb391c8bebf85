// The UI's routes live in the URL fragment, so the server only ever serves one page:
// `#/` a new chat, `#/chat/<id>` a session, `#/agents[/<name>]`, `#/settings`.
import { useEffect, useState } from 'react';

export function parseRoute(hash = location.hash) {
  const parts = hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'chat' && parts[1]) return { view: 'chat', id: parts[1] };
  if (parts[0] === 'agents') return { view: 'agents', name: parts[1] ?? null };
  if (parts[0] === 'settings') return { view: 'settings' };
  return { view: 'chat', id: null };
}

export function href(route) {
  switch (route.view) {
    case 'agents': return route.name ? `#/agents/${encodeURIComponent(route.name)}` : '#/agents';
    case 'settings': return '#/settings';
    default: return route.id ? `#/chat/${encodeURIComponent(route.id)}` : '#/';
  }
}

export function useRoute() {
  const [route, setRoute] = useState(parseRoute);
  useEffect(() => {
    const changed = () => setRoute(parseRoute());
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return route;
}
