// A live `teamster serve` on a fresh SQLite file with the fake model as its provider (as
// clients/ai-sdk-tests does), optionally with `--auth api-keys` and an admin key made by
// `teamster keys create` before it starts. The binaries are target/debug's unless
// $TEAMSTER_BIN and $FAKE_MODEL_BIN name others.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { TeamsterClient } from '@teamster/client';

const root = path.resolve(import.meta.dirname, '../../../..');
const binary = (variable: string, name: string) => process.env[variable] ?? path.join(root, 'target/debug', name);

interface Started {
  child: ChildProcess;
  url: string;
}

// Starts a program and resolves with the URL of its `listening on` line.
function start(program: string, args: string[], cwd: string): Promise<Started> {
  const child = spawn(program, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${program} did not start:\n${output}`)), 30_000);
    const read = (data: Buffer) => {
      output += data.toString();
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve({ child, url: match[1] });
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('error', (error) => reject(error));
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${program} exited (${code}):\n${output}`));
    });
  });
}

export interface Server {
  url: string;
  /** A client of the server (with the admin key when the server needs keys). */
  client: TeamsterClient;
  /** The admin key made with `teamster keys create`, on a keyed server. */
  adminKey?: string;
  close(): void;
}

/** `args`: more flags of `teamster serve` (`--heartbeat-secs 1`). */
export async function startServer(options: { auth?: 'api-keys'; args?: string[] } = {}): Promise<Server> {
  const workdir = mkdtempSync(path.join(tmpdir(), 'teamster-ts-client-'));
  // Sandboxes run as users of their own, who must be able to pass through to the sandbox root.
  chmodSync(workdir, 0o711);
  const database = `sqlite://${workdir}/teamster.sqlite`;
  let adminKey: string | undefined;
  if (options.auth === 'api-keys') {
    const made = await promisify(execFile)(binary('TEAMSTER_BIN', 'teamster'), [
      'keys', 'create', '--subject', 'root', '--tenant', 'ops', '--role', 'operator', '--database', database, '--data-dir', workdir,
    ]);
    adminKey = made.stdout.trim();
  }
  const fake = await start(binary('FAKE_MODEL_BIN', 'fake-model'), ['--listen', '127.0.0.1:0'], workdir);
  let teamster: Started;
  try {
    teamster = await start(binary('TEAMSTER_BIN', 'teamster'), [
      'serve', '--listen', '127.0.0.1:0', '--database', database, '--no-example', '--data-dir', workdir,
      '--sandbox-root', path.join(workdir, 'sandboxes'), ...(options.auth ? ['--auth', options.auth] : []),
      ...(options.args ?? []),
    ], workdir);
  } catch (error) {
    fake.child.kill();
    throw error;
  }
  // A test file that dies without its after() hook leaves no server behind.
  const stop = () => {
    teamster.child.kill();
    fake.child.kill();
  };
  process.once('exit', stop);
  const client = new TeamsterClient({ baseUrl: teamster.url, apiKey: adminKey });
  const provider = {
    type: 'custom', name: 'fake', base_url: `${fake.url}/v1`, auth: { api_key: 'sk-fake-0123456789abcdef' },
    models: [{ name: 'fake-model', model_id: 'fake-model', properties: {} }],
  };
  // Settings are outside this client's scope: a plain request registers the fake provider.
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (adminKey) headers.authorization = `Bearer ${adminKey}`;
  const registered = await fetch(`${teamster.url}/api/v1/settings/model-providers`, {
    method: 'PUT', headers, body: JSON.stringify({ manifest: provider }),
  });
  if (!registered.ok) throw new Error(`registering the fake provider: ${registered.status} ${await registered.text()}`);
  return {
    url: teamster.url,
    client,
    adminKey,
    close() {
      stop();
      process.removeListener('exit', stop);
      rmSync(workdir, { recursive: true, force: true });
    },
  };
}

let names = 0;
/** A name no other test uses. */
export function unique(prefix: string): string {
  return `${prefix}-${process.pid}-${++names}`;
}

/** Polls `check` every 20 ms until it returns something, for at most `ms`. */
export async function waitFor<T>(check: () => Promise<T | undefined> | T | undefined, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
