// The native API, relative to the page (so a tenant prefix in front of the page is kept), with
// the API key the user pasted as `Authorization: Bearer`. The key lives in sessionStorage: it
// survives a reload of the tab, and is gone with the tab, never written to disk for later
// visits (as localStorage would keep it, for any script of the origin to read at any time).

const KEY_STORAGE = 'teamster.apiKey';

export const apiBase = new URL('api/v1/', document.baseURI).href;

// A key an earlier version kept in localStorage moves to this tab's sessionStorage, and leaves
// localStorage for good.
const kept = localStorage.getItem(KEY_STORAGE);
if (kept !== null) {
  if (!sessionStorage.getItem(KEY_STORAGE)) sessionStorage.setItem(KEY_STORAGE, kept);
  localStorage.removeItem(KEY_STORAGE);
}

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) ?? '';
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

export function authHeaders() {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// An API answer that is not 2xx: its status and the spec's error body.
export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = error.code;
    this.param = error.param;
  }
}

// Listeners told when the server answers 401 (no session, or the key is missing or wrong);
// each gets whether the server offers OIDC sign-in (its `Teamster-Login: oidc` header).
const unauthorizedListeners = new Set();
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

// fetch, reporting 401s (the chat transport's fetch too).
export async function reportingFetch(input, init) {
  const response = await fetch(input, init);
  if (response.status === 401) {
    const oidc = response.headers.get('teamster-login') === 'oidc';
    unauthorizedListeners.forEach((listener) => listener({ oidc }));
  }
  return response;
}

// Where the browser goes to sign in with the server's identity provider; it comes back to this
// page (path and route).
export function signInUrl() {
  const url = new URL('auth/login', apiBase);
  url.searchParams.set('return_to', location.pathname + location.hash);
  return url.href;
}

// Who the page is: `{type: 'default' | 'oidc-connected', email, role}`, `{oidc: true}` when the
// server wants a sign-in, or null when it wants a key.
export async function whoAmI() {
  const response = await fetch(new URL('auth/me', apiBase), { headers: authHeaders() });
  if (response.ok) return response.json();
  if (response.status === 401 && response.headers.get('teamster-login') === 'oidc') return { oidc: true };
  return null;
}

// Ends the browser's OIDC session (the server clears its cookie).
export async function signOut() {
  await fetch(new URL('auth/logout', apiBase), { method: 'POST' });
}

// The reason of a failed sign-in the server sent the browser back with (`?error=<code>`),
// removed from the address bar.
export function takeSignInError() {
  const url = new URL(location.href);
  const error = url.searchParams.get('error');
  if (error === null) return null;
  url.searchParams.delete('error');
  history.replaceState(null, '', url.href);
  return error;
}

// A fetch that adds the key and reports 401s; `path` is relative to /api/v1/.
export function apiFetch(path, init = {}) {
  return reportingFetch(new URL(path, apiBase), { ...init, headers: { ...authHeaders(), ...init.headers } });
}

// The message of a failed chat request: the AI SDK gives the response body as the error's text.
export function errorMessage(error) {
  try {
    return JSON.parse(error.message).error.message ?? error.message;
  } catch {
    return error.message || 'The request failed.';
  }
}

// A JSON request; resolves with the parsed body, or rejects with an ApiError.
export async function api(method, path, body) {
  const init = { method };
  if (body !== undefined) {
    init.headers = { 'content-type': 'application/json' };
    init.body = JSON.stringify(body);
  }
  const response = await apiFetch(path, init);
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { error: { message: text } };
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

// Every page of a list endpoint, up to `max` items.
export async function listAll(path, max = 500) {
  const items = [];
  let token;
  do {
    const separator = path.includes('?') ? '&' : '?';
    const page = await api('GET', token ? `${path}${separator}page_token=${encodeURIComponent(token)}` : path);
    items.push(...page.data);
    token = page.pagination?.next_page_token;
  } while (token && items.length < max);
  return items;
}

// Saves a response body as a file the browser downloads.
export async function download(path, fallbackName) {
  const response = await apiFetch(path);
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new ApiError(response.status, body);
  }
  const disposition = response.headers.get('content-disposition') ?? '';
  const utf8 = /filename\*=UTF-8''([^;]+)/i.exec(disposition);
  const plain = /filename="([^"]+)"/i.exec(disposition);
  const name = utf8 ? decodeURIComponent(utf8[1]) : plain ? plain[1] : fallbackName;
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
  return name;
}

// A new chat id: also the id of the session the chat makes.
export function newChatId() {
  const random = crypto.getRandomValues(new Uint8Array(9));
  return `chat-${Array.from(random, (byte) => byte.toString(16).padStart(2, '0')).join('')}`;
}
