// A live `teamster serve` on a fresh SQLite file with the fake model as its provider, and a
// Chat on the AI SDK's own AbstractChat and DefaultChatTransport (what @ai-sdk/react's useChat
// wraps), kept in memory.
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { AbstractChat, DefaultChatTransport } from 'ai';

const root = path.resolve(import.meta.dirname, '../../..');
const binary = (variable, name) => process.env[variable] ?? path.join(root, 'target/debug', name);

// Starts a program and resolves with the URL of its `listening on` line.
function start(program, args, cwd) {
  const child = spawn(program, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${program} did not start:\n${output}`)), 30_000);
    const read = (data) => {
      output += data;
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve({ child, url: match[1] });
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => reject(new Error(`${program} exited (${code}):\n${output}`)));
  });
}

export async function startServer() {
  const workdir = mkdtempSync(path.join(tmpdir(), 'teamster-ai-sdk-'));
  // Sandboxes run as users of their own, who must be able to pass through to the sandbox root.
  chmodSync(workdir, 0o711);
  const fake = await start(binary('FAKE_MODEL_BIN', 'fake-model'), ['--listen', '127.0.0.1:0'], workdir);
  let teamster;
  try {
    teamster = await start(binary('TEAMSTER_BIN', 'teamster'), [
      'serve', '--listen', '127.0.0.1:0', '--database', `sqlite://${workdir}/teamster.sqlite`,
      '--no-example', '--data-dir', workdir, '--sandbox-root', path.join(workdir, 'sandboxes'),
    ], workdir);
  } catch (error) {
    fake.child.kill();
    throw error;
  }
  const server = {
    url: teamster.url,
    async api(method, route, body) {
      const response = await fetch(`${teamster.url}${route}`, {
        method,
        headers: { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    },
    close() {
      teamster.child.kill();
      fake.child.kill();
    },
  };
  const provider = {
    type: 'custom', name: 'fake', base_url: `${fake.url}/v1`, auth: { api_key: 'sk-fake-0123456789abcdef' },
    models: [{ name: 'fake-model', model_id: 'fake-model', properties: {} }],
  };
  await expectStatus(server.api('PUT', '/api/v1/settings/model-providers', { manifest: provider }), 200);
  return server;
}

// The suite's test MCP server (tests/mcp_servers/tools_server.py, on the official Python SDK)
// over streamable HTTP, from the Python that scripts/test names in TEAMSTER_TEST_PYTHON.
export async function startMcpServer() {
  const python = process.env.TEAMSTER_TEST_PYTHON;
  if (!python) throw new Error('TEAMSTER_TEST_PYTHON must name a Python with the mcp package (scripts/test sets it)');
  const script = path.join(root, 'tests/mcp_servers/tools_server.py');
  const child = spawn(python, [script, '--transport', 'streamable-http', '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the MCP test server did not start within 30 s')), 30_000);
    let output = '';
    child.stdout.on('data', (data) => {
      output += data;
      const match = /^LISTENING (\d+)$/m.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.on('exit', (code) => reject(new Error(`the MCP test server exited (${code})`)));
  });
  return { url: `http://127.0.0.1:${port}/mcp`, close: () => child.kill() };
}

export async function expectStatus(pending, status) {
  const response = await pending;
  if (response.status !== status) {
    throw new Error(`expected ${status}, got ${response.status}: ${JSON.stringify(response.body)}`);
  }
  return response.body;
}

// The chat state as useChat keeps it, without React.
class MemoryState {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) { this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)]; }
  snapshot(thing) { return structuredClone(thing); }
}

export class Chat extends AbstractChat {
  constructor({ server, agent, id, body, ...options }) {
    const transport = new DefaultChatTransport({ api: `${server.url}/api/v1/chat`, body: { agent, ...body } });
    super({ id, transport, state: new MemoryState(), ...options });
  }
}
