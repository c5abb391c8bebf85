// @teamster/client: a TypeScript client for Teamster's native /api/v1 API.
export { TeamsterClient, AgentsApi, SessionsApi, TurnsApi, KeysApi } from './client.js';
export type { TeamsterClientOptions, StreamOptions, LiveOptions } from './client.js';
export { TeamsterError } from './errors.js';
export { TurnStream } from './stream.js';
export { LiveStream } from './live.js';
export type { ReconnectOptions } from './stream.js';
export { TurnAccumulator, foldDelta, foldEvents, messageText, toolCalls } from './fold.js';
export type { ParsedToolCall, PendingCall, ThreadView } from './fold.js';
export { approve, deny, respond, userMessage } from './input.js';
export type { CallRef } from './input.js';
export { SseParser, parseSse } from './sse.js';
export type { SseMessage } from './sse.js';
export type * from './types.js';
export type { components, paths } from './generated/api.js';
