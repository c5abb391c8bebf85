// The live channels the page subscribes to instead of polling: a session's
// (`GET /api/v1/sessions/{id}/live`: its display state, then what happens to it) and the
// caller's (`GET /api/v1/live`: its sessions created, renamed, deleted). Read with fetch, not
// EventSource, so that they go with the same credentials as every other request: the API key's
// `Authorization` header (which EventSource cannot send) or the sign-in cookie. A channel that
// drops is opened again after a wait that doubles from 1 s to 30 s (reset once one opens); a
// refusal (401, 403, 404) ends it. A channel opened again starts from a fresh snapshot, which
// `onOpen` is told of.
import { useEffect, useRef } from 'react';
import { ApiError, apiFetch } from './api.js';

const FIRST_RETRY_MS = 1_000;
const LAST_RETRY_MS = 30_000;

// Subscribes to the channel at `path` (relative to /api/v1/): `onEvent(event)` for each event,
// `onOpen(opened)` each time it opens (`opened` counts from 1), `onEnd(error)` when it ends for
// good (the error of a refusal, or null when the server ended it and it was not to be opened
// again). Returns the function that closes it.
export function subscribe(path, { onEvent, onOpen, onEnd }) {
  const controller = new AbortController();
  let opened = 0;
  (async () => {
    let wait = FIRST_RETRY_MS;
    while (!controller.signal.aborted) {
      try {
        const response = await apiFetch(path, { headers: { accept: 'text/event-stream' }, signal: controller.signal });
        if (!response.ok) {
          const body = await response.json().catch(() => null);
          const error = new ApiError(response.status, body);
          // A refusal stays one: the session is gone, or the page has no right to it (the
          // page asks for a key on a 401, and subscribes again with it).
          if (response.status < 500 && response.status !== 408 && response.status !== 429) {
            onEnd?.(error);
            return;
          }
          throw error;
        }
        opened += 1;
        wait = FIRST_RETRY_MS;
        onOpen?.(opened);
        for await (const event of events(response.body)) onEvent(event);
        // The server ended it: a deleted session's channel ends so, and opening it again
        // answers 404, which ends it here.
      } catch (failure) {
        if (controller.signal.aborted) return;
        console.debug?.(`live channel ${path}: ${failure.message}`);
      }
      if (controller.signal.aborted) return;
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, wait);
        controller.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        }, { once: true });
      });
      wait = Math.min(wait * 2, LAST_RETRY_MS);
    }
  })();
  return () => controller.abort();
}

// Subscribes while the component is mounted and `path` is set, again when `generation` changes
// (a new key); the handlers may change at every render without the channel being opened again.
export function useLive(path, handlers, generation = 0) {
  const current = useRef(handlers);
  current.current = handlers;
  useEffect(() => {
    if (!path) return undefined;
    return subscribe(path, {
      onEvent: (event) => current.current.onEvent?.(event),
      onOpen: (opened) => current.current.onOpen?.(opened),
      onEnd: (error) => current.current.onEnd?.(error),
    });
  }, [path, generation]);
}

// The events of an SSE body: each message's `data:` lines joined, parsed as JSON (every live
// event names its `type` in its body, as in the message's `event:`); comments (`: ping`) skipped.
async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let data = [];
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += value;
      const lines = buffer.split('\n');
      // The last piece may be a line cut in two.
      buffer = lines.pop();
      for (const raw of lines) {
        const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
        if (line === '') {
          if (data.length > 0) yield JSON.parse(data.join('\n'));
          data = [];
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line[5] === ' ' ? 6 : 5));
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
