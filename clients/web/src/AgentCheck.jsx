// The agent editor's "Check": `POST /api/v1/agents/check` with the manifest being edited, and its
// report ("why this toolset"): what saving would refuse, the models resolved, the MCP servers
// connected, the tools a new session's model is offered with whether each asks for approval and
// why, and the tools it does not get and why. Offered only where the server has the route.
import { useEffect, useState } from 'react';
import { api } from './api.js';

// Whether the server offers the check (its OpenAPI document lists the route).
export function useCheckOffered() {
  const [offered, setOffered] = useState(false);
  useEffect(() => {
    api('GET', 'openapi.json').then((document) => setOffered(Boolean(document.paths?.['/api/v1/agents/check']?.post)), () => setOffered(false));
  }, []);
  return offered;
}

export async function checkAgent(name, manifest) {
  return (await api('POST', 'agents/check', { ...(name ? { name } : {}), manifest })).data;
}

export function CheckReport({ report }) {
  return (
    <section className="check-report" aria-label="Check report">
      <p className={report.ok ? 'notice' : 'error'} role="status">
        {report.ok ? 'Saving would succeed.' : `Saving would be refused: ${report.problems.length} problem${report.problems.length === 1 ? '' : 's'}.`}
        {report.mode && <span className="muted"> Tools of the starting mode {report.mode}.</span>}
      </p>
      {[...report.problems.map((item) => ['error', item]), ...report.warnings.map((item) => ['warning', item])].map(([kind, item], index) => (
        <p key={index} className={kind === 'error' ? 'error' : 'muted'}>
          {kind === 'error' ? 'Problem' : 'Warning'}{item.param && <> at <code>{item.param}</code></>}: {item.message}
        </p>
      ))}
      {report.models.length > 0 && (
        <ul aria-label="Models">
          {report.models.map((model) => (
            <li key={model.param}>
              <code>{model.param}</code> {model.name}: {model.available ? <span className="notice">available{model.model_id ? ` (${model.model_id})` : ''}</span> : <span className="error">{model.error ?? 'not available'}</span>}
            </li>
          ))}
        </ul>
      )}
      {report.mcp_servers.length > 0 && (
        <ul aria-label="MCP servers">
          {report.mcp_servers.map((server) => (
            <li key={server.param}>
              MCP server {server.name}: {server.connected ? <span className="notice">connected, {server.listed_tools} tools</span> : <span className="error">{server.error ?? 'not connected'}</span>}
            </li>
          ))}
        </ul>
      )}
      <table className="timeline" aria-label="Tools">
        <thead>
          <tr><th scope="col">Tool</th><th scope="col">From</th><th scope="col">Approval</th><th scope="col">Why</th></tr>
        </thead>
        <tbody>
          {report.tools.map((tool) => (
            <tr key={tool.name}>
              <td><span className="tool-name">{tool.name}</span>{!tool.preloaded && <span className="muted"> (found by search)</span>}</td>
              <td>{tool.source}</td>
              <td>{tool.requires_approval ? 'asks' : 'runs at once'}</td>
              <td>{tool.approval_reason}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {report.absent_tools.length > 0 && (
        <details>
          <summary>Tools it does not get ({report.absent_tools.length})</summary>
          <table className="timeline" aria-label="Absent tools">
            <tbody>
              {report.absent_tools.map((tool) => (
                <tr key={`${tool.source}/${tool.name}`}>
                  <td><span className="tool-name">{tool.name}</span></td>
                  <td>{tool.source}</td>
                  <td>{tool.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </details>
      )}
    </section>
  );
}
