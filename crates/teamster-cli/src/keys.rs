//! `teamster keys`: API keys, straight in the store. Whoever can open the store is the
//! operator, so this is how the first operator key (`--role operator`) is made; every key of
//! every tenant is listed and revocable here. With `--server` (and an operator's or tenant
//! admin's `--api-key`) the same commands go through the server's `/api/v1/keys` instead.

use std::process::ExitCode;

use teamster_service::{ApiKeys, NewKey, Role};

use crate::args::{KeysArgs, KeysCommand, RoleArg};

pub async fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
    if let Some(server) = &args.server {
        return on_server(server, args.api_key.as_deref(), args.command).await;
    }
    if args.api_key.as_deref().is_some_and(|key| !key.is_empty()) && std::env::var_os("TEAMSTER_API_KEY").is_none() {
        anyhow::bail!("--api-key manages the keys of a running server: give its --server URL too (without --server, keys are made in the store)");
    }
    let opened = crate::store::open(&args.store).await?;
    let keys = ApiKeys::new(opened.store.as_ref());
    match args.command {
        KeysCommand::Create { subject, tenant, role, service_account } => {
            let role = match role {
                RoleArg::Operator => Role::Operator,
                RoleArg::Admin => Role::Admin,
                RoleArg::Member => Role::Member,
            };
            let created = keys.create(NewKey { subject, service_account, tenant, role }).await?;
            eprintln!("key {} for {} (tenant {}, {role:?}); it is shown this once:", created.key.id, created.key.subject.subject_slug, created.key.tenant);
            println!("{}", created.secret);
        }
        KeysCommand::List => {
            for key in keys.list().await? {
                let state = key.revoked_at.as_deref().map_or("active".to_owned(), |at| format!("revoked {at}"));
                println!("{}\t{}\t{}\t{:?}\t{}\t{state}", key.id, key.tenant, key.subject.subject_slug, key.role, key.created_at);
            }
        }
        KeysCommand::Revoke { id } => {
            let key = keys.revoke(&id).await?;
            println!("revoked {} ({})", key.id, key.subject.subject_slug);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `keys create|list|revoke` through a running server's `/api/v1/keys`, as the key's caller.
async fn on_server(server: &str, api_key: Option<&str>, command: KeysCommand) -> anyhow::Result<ExitCode> {
    let api = crate::client::Api::new(server, api_key);
    match command {
        KeysCommand::Create { subject, tenant, role, service_account } => {
            let role = match role {
                RoleArg::Operator => "operator",
                RoleArg::Admin => "admin",
                RoleArg::Member => "member",
            };
            let body = serde_json::json!({ "subject": subject, "tenant": tenant, "role": role, "service_account": service_account });
            let created = api.send(reqwest::Method::POST, "/keys", &body).await?;
            let key = &created["data"];
            eprintln!(
                "key {} for {} (tenant {}, {}); it is shown this once:",
                key["id"].as_str().unwrap_or("?"),
                key["subject"]["subject_slug"].as_str().unwrap_or("?"),
                key["tenant"].as_str().unwrap_or("?"),
                key["role"].as_str().unwrap_or("?")
            );
            println!("{}", key["secret"].as_str().unwrap_or_default());
        }
        KeysCommand::List => {
            for key in api.get("/keys").await?["data"].as_array().into_iter().flatten() {
                let state = key["revoked_at"].as_str().map_or("active".to_owned(), |at| format!("revoked {at}"));
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{state}",
                    key["id"].as_str().unwrap_or("?"),
                    key["tenant"].as_str().unwrap_or("?"),
                    key["subject"]["subject_slug"].as_str().unwrap_or("?"),
                    key["role"].as_str().unwrap_or("?"),
                    key["created_at"].as_str().unwrap_or("?")
                );
            }
        }
        KeysCommand::Revoke { id } => {
            let key = api.send(reqwest::Method::DELETE, &format!("/keys/{id}"), &serde_json::json!({})).await?;
            println!("revoked {} ({})", key["data"]["id"].as_str().unwrap_or("?"), key["data"]["subject"]["subject_slug"].as_str().unwrap_or("?"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
