//! `teamster agents apply|list|get`: saved agents on a running server, from
//! `truefoundry-agent` manifest files. `apply --dry-run` saves nothing and prints the server's
//! check of the manifest (`POST /api/v1/agents/check`): what it would run with and why.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use teamster_protocol::AgentManifest;
use teamster_protocol::agent_check::AgentCheckReport;

use crate::args::{AgentsCommand, ClientArgs};
use crate::client::Api;

/// The keys of a manifest file that are not keys of the agent it saves: the manifest's own
/// (`type`, `name`, `tags`, `ownedBy`, `sample_inputs`) and those its conversion rewrites.
const MANIFEST_ONLY: [&str; 7] = ["type", "name", "tags", "ownedBy", "sample_inputs", "variables", "description"];
/// The keys of one entry of a manifest's `variables`.
const VARIABLE_KEYS: [&str; 2] = ["default_value", "description"];

pub async fn run(client: &ClientArgs, command: AgentsCommand) -> anyhow::Result<ExitCode> {
    let api = Api::of(client);
    match command {
        AgentsCommand::Apply { file, model, dry_run } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let raw: Value = serde_yaml::from_str(&text).with_context(|| format!("{} is not a truefoundry-agent manifest", file.display()))?;
            let (name, spec) = manifest_spec(&raw, model.as_deref()).with_context(|| format!("{} is not a truefoundry-agent manifest", file.display()))?;
            if dry_run {
                let report = api.send(reqwest::Method::POST, "/agents/check", &json!({ "name": name, "manifest": spec })).await?;
                let report: AgentCheckReport = serde_json::from_value(report["data"].clone()).context("the server's check is not a report")?;
                print!("{}", describe(&name, &report));
                return Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
            }
            let (saved, before) = match api.agent_by_name(&name).await? {
                Some(existing) => {
                    let id = existing["id"].as_str().unwrap_or_default();
                    let saved = api.send(reqwest::Method::PUT, &format!("/agents/{id}"), &json!({ "manifest": spec })).await?;
                    (saved, Some(existing["version"].clone()))
                }
                None => (api.send(reqwest::Method::POST, "/agents", &json!({ "name": name, "manifest": spec })).await?, None),
            };
            let name = saved["data"]["name"].as_str().unwrap_or("?");
            let version = &saved["data"]["version"];
            if before.as_ref() == Some(version) {
                println!("agent {name} is unchanged at version {version}");
            } else {
                println!("agent {name} is at version {version}");
            }
        }
        AgentsCommand::List => {
            let agents = api.get("/agents").await?;
            for agent in agents["data"].as_array().into_iter().flatten() {
                println!(
                    "{}\tv{}\t{}",
                    agent["name"].as_str().unwrap_or("?"),
                    agent["version"],
                    agent["manifest"]["model"]["name"].as_str().unwrap_or("?")
                );
            }
        }
        AgentsCommand::Get { name } => match api.agent_by_name(&name).await? {
            Some(agent) => println!("{}", serde_json::to_string_pretty(&agent)?),
            None => bail!("no agent named {name:?}"),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// The agent's name and the manifest the server stores, from a manifest file's contents. The
/// keys a manifest shares with an agent go to the server as the file wrote them, so that the
/// server refuses a key neither has (naming the key likely meant) instead of this command
/// dropping it; the manifest's own keys are converted as [`AgentManifest::to_spec`] does.
fn manifest_spec(raw: &Value, model: Option<&str>) -> anyhow::Result<(String, Value)> {
    let Value::Object(fields) = raw else { bail!("a manifest is a mapping of keys, such as `name:` and `model:`") };
    for (name, variable) in fields.get("variables").and_then(Value::as_object).into_iter().flatten() {
        for key in variable.as_object().into_iter().flatten().map(|(key, _)| key) {
            if !VARIABLE_KEYS.contains(&key.as_str()) {
                bail!("variables.{name}.{key} is not a key of a variable: a variable has {}", VARIABLE_KEYS.join(" and "));
            }
        }
    }
    let manifest: AgentManifest = serde_json::from_value(raw.clone())?;
    if manifest.kind != AgentManifest::TYPE {
        bail!("its type is {:?}; expected {:?}", manifest.kind, AgentManifest::TYPE);
    }
    let converted = serde_json::to_value(manifest.to_spec())?;
    let mut spec: Map<String, Value> = fields.iter().filter(|(key, _)| !MANIFEST_ONLY.contains(&key.as_str())).map(|(key, value)| (key.clone(), value.clone())).collect();
    for key in ["variables", "variable_descriptions", "description"] {
        if let Some(value) = converted.get(key) {
            spec.insert(key.to_owned(), value.clone());
        }
    }
    if let Some(model) = model {
        spec.entry("model").or_insert_with(|| json!({}))["name"] = json!(model);
    }
    Ok((manifest.name, Value::Object(spec)))
}

/// The check's report as the terminal shows it: problems first, then what the agent would run
/// with, tool by tool.
fn describe(name: &str, report: &AgentCheckReport) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    if report.ok {
        line(format!("agent {name}: the manifest can be saved (nothing was saved: --dry-run)"));
    } else {
        line(format!("agent {name}: saving would be refused (nothing was saved: --dry-run)"));
    }
    for problem in &report.problems {
        line(format!("  problem: {}{}", at(problem.param.as_deref()), problem.message));
    }
    for warning in &report.warnings {
        line(format!("  warning: {}{}", at(warning.param.as_deref()), warning.message));
    }
    if !report.models.is_empty() {
        line("models:".to_owned());
    }
    for model in &report.models {
        match (&model.model_id, &model.error) {
            (_, Some(error)) => line(format!("  {}  {}: unavailable: {error}", model.param, model.name)),
            (Some(id), None) => line(format!("  {}  {}: resolves to {id}", model.param, model.name)),
            (None, None) => line(format!("  {}  {}", model.param, model.name)),
        }
    }
    if !report.mcp_servers.is_empty() {
        line("MCP servers:".to_owned());
    }
    for server in &report.mcp_servers {
        match &server.error {
            Some(error) => line(format!("  {}  {}: not connected: {error}", server.param, server.name)),
            None => line(format!("  {}  {}: connected, {} tools listed", server.param, server.name, server.listed_tools)),
        }
    }
    let mode = report.mode.as_deref().map(|mode| format!(" in the starting mode {mode:?}")).unwrap_or_default();
    line(format!("tools a new session is offered{mode} ({}):", report.tools.len()));
    let width = report.tools.iter().map(|tool| tool.name.len()).max().unwrap_or(0);
    let sources = report.tools.iter().map(|tool| tool.source.len()).max().unwrap_or(0);
    for tool in &report.tools {
        let approval = if tool.requires_approval { "asks for approval" } else { "runs at once" };
        let loaded = if tool.preloaded { "" } else { " (found with search_tools)" };
        line(format!("  {:width$}  {:sources$}  {approval}{loaded}: {}", tool.name, tool.source, tool.approval_reason));
    }
    if !report.absent_tools.is_empty() {
        line(format!("tools it does not get ({}):", report.absent_tools.len()));
    }
    let width = report.absent_tools.iter().map(|tool| tool.name.len()).max().unwrap_or(0);
    let sources = report.absent_tools.iter().map(|tool| tool.source.len()).max().unwrap_or(0);
    for tool in &report.absent_tools {
        line(format!("  {:width$}  {:sources$}  {}", tool.name, tool.source, tool.reason));
    }
    out
}

/// `param: ` before a problem's message, when it names a key.
fn at(param: Option<&str>) -> String {
    param.map(|param| format!("{param}: ")).unwrap_or_default()
}
