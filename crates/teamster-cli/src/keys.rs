//! `teamster keys`: API keys, straight in the store. Whoever can open the store is the
//! operator, so this is how the first operator key (`--role operator`) is made; every key of
//! every tenant is listed and revocable here.

use std::process::ExitCode;

use teamster_service::{ApiKeys, NewKey, Role};

use crate::args::{KeysArgs, KeysCommand, RoleArg};

pub async fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
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
