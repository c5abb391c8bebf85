//! `teamster settings`: a running server's model providers and MCP servers, listed, deleted
//! and renamed (an MCP server also applied from a file) through `/api/v1/settings/...` (its
//! operator's), and an MCP server's connection tested through `/api/v1/mcp-servers/{name}/test`.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};

use crate::args::{McpServersCommand, ProvidersCommand, SettingsArgs, SettingsCommand};
use crate::client::Api;

pub async fn run(args: SettingsArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(&args.client.server, args.client.key());
    match args.command {
        SettingsCommand::Providers { command } => providers(&api, command).await,
        SettingsCommand::McpServers { command } => mcp_servers(&api, command).await,
    }
}

async fn providers(api: &Api, command: ProvidersCommand) -> anyhow::Result<ExitCode> {
    match command {
        ProvidersCommand::List => {
            for provider in api.get("/settings/model-providers").await?["data"].as_array().into_iter().flatten() {
                let models: Vec<&str> =
                    provider["manifest"]["models"].as_array().into_iter().flatten().filter_map(|model| model["name"].as_str()).collect();
                println!("{}\t{}\t{}", text_of(&provider["name"]), text_of(&provider["manifest"]["type"]), models.join(","));
            }
        }
        ProvidersCommand::Delete { name } => {
            api.send(reqwest::Method::DELETE, &format!("/settings/model-providers/{}", segment(&name)), &Value::Null).await?;
            println!("deleted model provider {name}");
        }
        ProvidersCommand::Rename { name, new_name } => {
            let path = format!("/settings/model-providers/{}", segment(&name));
            let renamed = api.send(reqwest::Method::PATCH, &path, &json!({ "name": new_name })).await?;
            println!("renamed model provider {name} to {}", text_of(&renamed["data"]["name"]));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn mcp_servers(api: &Api, command: McpServersCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpServersCommand::List => {
            for server in api.get("/settings/mcp-servers").await?["data"].as_array().into_iter().flatten() {
                let manifest = &server["manifest"];
                let place = manifest["url"].as_str().or(manifest["command"].as_str()).unwrap_or("");
                println!("{}\t{}\t{place}", text_of(&server["name"]), text_of(&manifest["type"]));
            }
        }
        McpServersCommand::Apply { file } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let manifest: Value = serde_yaml::from_str(&text).with_context(|| format!("{} is not YAML or JSON", file.display()))?;
            let saved = api.send(reqwest::Method::PUT, "/settings/mcp-servers", &json!({ "manifest": manifest })).await?;
            println!("MCP server {} is configured", text_of(&saved["data"]["name"]));
        }
        McpServersCommand::Delete { name } => {
            api.send(reqwest::Method::DELETE, &format!("/settings/mcp-servers/{}", segment(&name)), &Value::Null).await?;
            println!("deleted MCP server {name}");
        }
        McpServersCommand::Rename { name, new_name } => {
            let path = format!("/settings/mcp-servers/{}", segment(&name));
            let renamed = api.send(reqwest::Method::PATCH, &path, &json!({ "name": new_name })).await?;
            println!("renamed MCP server {name} to {}", text_of(&renamed["data"]["name"]));
        }
        McpServersCommand::Test { name } => {
            let verdict = &api.send(reqwest::Method::POST, &format!("/mcp-servers/{}/test", segment(&name)), &json!({})).await?["data"];
            let tools: Vec<&str> = verdict["tools"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if verdict["ok"] == true {
                println!("MCP server {name} works ({} ms): {} tools: {}", verdict["elapsed_ms"], tools.len(), tools.join(", "));
            } else {
                eprintln!("MCP server {name} does not work ({}): {}", text_of(&verdict["error_code"]), text_of(&verdict["error"]));
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A JSON string as text, `?` for anything else.
fn text_of(value: &Value) -> &str {
    value.as_str().unwrap_or("?")
}

/// A name as one path segment (names are plain, but a typo with `/` or `?` must not change the
/// route).
fn segment(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes()).collect()
}
