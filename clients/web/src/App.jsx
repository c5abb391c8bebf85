// The page: a header (views, sign-in or API key), the sessions sidebar and the current view.
import { Suspense, lazy, useCallback, useEffect, useRef, useState } from 'react';
import { apiKey, newChatId, onUnauthorized, setApiKey, signInUrl, signOut, takeSignInError, whoAmI } from './api.js';
import { Chat } from './Chat.jsx';
import { href, useRoute } from './route.js';
import { Sessions } from './Sessions.jsx';

// The editors (and their YAML parser) load when first opened: the chat does not wait for them.
const Agents = lazy(() => import('./Agents.jsx').then((module) => ({ default: module.Agents })));
const Settings = lazy(() => import('./Settings.jsx').then((module) => ({ default: module.Settings })));

export function App() {
  const route = useRoute();
  // A new chat's id, made here so that the chat keeps its component when its URL becomes
  // #/chat/<id> after the first message.
  const [draftId, setDraftId] = useState(newChatId);
  const [needsKey, setNeedsKey] = useState(false);
  const [keyDialog, setKeyDialog] = useState(false);
  // Bumped when the key changes: lists load again (and the sessions' live channel opens again
  // with the new key).
  const [generation, setGeneration] = useState(0);
  // Bumped when the key changes: the chat loads again too.
  const [keyGeneration, setKeyGeneration] = useState(0);
  const [menuOpen, setMenuOpen] = useState(false);
  // Who the page is (`/api/v1/auth/me`), and whether the server offers OIDC sign-in.
  const [me, setMe] = useState(null);
  const [oidc, setOidc] = useState(false);
  // Why the last sign-in failed, from the server's `?error=` redirect.
  const [signInError, setSignInError] = useState(takeSignInError);

  useEffect(() => onUnauthorized(({ oidc: offered }) => {
    if (offered) setOidc(true);
    setNeedsKey(true);
  }), []);
  useEffect(() => {
    whoAmI().then((answer) => {
      if (answer?.oidc) setOidc(true);
      else setMe(answer);
    }).catch(() => {});
  }, [keyGeneration]);
  const signedIn = me?.type === 'oidc-connected';
  useEffect(() => setMenuOpen(false), [route.view, route.id]);

  const chatId = route.view === 'chat' ? (route.id ?? draftId) : null;
  const startNewChat = () => {
    setDraftId(newChatId());
    location.hash = '#/';
  };
  const refresh = useCallback(() => setGeneration((value) => value + 1), []);
  // A new chat's first message makes its session: the URL names it, and the next new chat
  // gets another id.
  const started = useCallback((id) => location.replace(href({ view: 'chat', id })), []);
  useEffect(() => {
    if (route.id === draftId) setDraftId(newChatId());
  }, [route.id, draftId]);

  return (
    <div className="app">
      <header className="topbar">
        <button type="button" className="menu-toggle" aria-expanded={menuOpen} aria-controls="sidebar" onClick={() => setMenuOpen(!menuOpen)}>
          Sessions
        </button>
        <a className="brand" href="#/">Teamster</a>
        <nav aria-label="Views">
          <a href={href({ view: 'chat', id: null })} aria-current={route.view === 'chat' ? 'page' : undefined}>Chat</a>
          <a href={href({ view: 'agents' })} aria-current={route.view === 'agents' ? 'page' : undefined}>Agents</a>
          <a href={href({ view: 'settings' })} aria-current={route.view === 'settings' ? 'page' : undefined}>Settings</a>
        </nav>
        {signedIn && <span className="muted who" title={`Role: ${me.role}`}>{me.email}</span>}
        {signedIn && (
          <button type="button" className="secondary" onClick={async () => { await signOut(); location.reload(); }}>
            Sign out
          </button>
        )}
        {oidc && !signedIn && <a className="button primary" href={signInUrl()}>Sign in</a>}
        {!signedIn && (
          <button type="button" className="secondary" onClick={() => setKeyDialog(true)}>
            {apiKey() ? 'API key ✓' : 'API key'}
          </button>
        )}
      </header>
      <div className="body">
        <aside id="sidebar" className={menuOpen ? 'sidebar open' : 'sidebar'} aria-label="Sessions"
          onKeyDown={(event) => event.key === 'Escape' && setMenuOpen(false)}>
          <button type="button" className="close-sidebar" onClick={() => setMenuOpen(false)}>Close</button>
          <button type="button" className="primary new-chat" onClick={startNewChat}>New chat</button>
          <Sessions current={chatId} generation={generation} />
        </aside>
        <main className="main">
          {route.view === 'chat' && <Chat key={`${chatId}:${keyGeneration}`} id={chatId} fresh={chatId === draftId} onStarted={started} />}
          <Suspense fallback={<p className="muted center" role="status">Loading…</p>}>
            {route.view === 'agents' && <Agents name={route.name} generation={generation} />}
            {route.view === 'settings' && <Settings generation={generation} />}
          </Suspense>
        </main>
      </div>
      {signInError && (
        <div className="sign-in-error" role="alert">
          Sign-in failed ({signInError}). <a href={signInUrl()}>Try again</a>
          <button type="button" onClick={() => setSignInError(null)}>Dismiss</button>
        </div>
      )}
      {(needsKey || keyDialog) && (
        <KeyDialog
          required={needsKey}
          oidc={oidc}
          onClose={() => setKeyDialog(false)}
          onSaved={() => {
            setNeedsKey(false);
            setKeyDialog(false);
            setKeyGeneration((value) => value + 1);
            refresh();
          }}
        />
      )}
    </div>
  );
}

// Asks the user to sign in (servers with OIDC) or for the API key (servers started with
// `--auth api-keys`); the key is kept in the tab's sessionStorage, the sign-in is the server's cookie.
function KeyDialog({ required, oidc, onClose, onSaved }) {
  const [value, setValue] = useState(apiKey());
  const input = useRef(null);
  useEffect(() => input.current?.focus(), []);
  const save = (event) => {
    event.preventDefault();
    setApiKey(value.trim());
    onSaved();
  };
  return (
    <div className="dialog-backdrop">
      <form className="dialog" role="dialog" aria-modal="true" aria-labelledby="key-title" onSubmit={save}
        onKeyDown={(event) => event.key === 'Escape' && !required && onClose()}>
        <h2 id="key-title">{required ? (oidc ? 'Sign in to use this server' : 'This server needs an API key') : 'API key'}</h2>
        {oidc && (
          <p>
            <a className="button primary" href={signInUrl()}>Sign in</a> with your organization's account, or use an API key.
          </p>
        )}
        <p>The key is kept in this tab only, until it closes, and sent as <code>Authorization: Bearer</code>.</p>
        <label htmlFor="api-key">API key</label>
        <input id="api-key" ref={input} type="password" autoComplete="off" value={value} onChange={(event) => setValue(event.target.value)} />
        <div className="row">
          <button type="submit" className="primary">Save key</button>
          {value && <button type="button" onClick={() => { setApiKey(''); setValue(''); onSaved(); }}>Forget key</button>}
          {!required && <button type="button" onClick={onClose}>Cancel</button>}
        </div>
      </form>
    </div>
  );
}
