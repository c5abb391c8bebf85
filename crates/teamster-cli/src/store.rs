//! Opening the store a command names (`--database`, or the SQLite file in the data directory).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::args::StoreArgs;

/// An opened store, with its URL (password masked for messages).
pub struct OpenStore {
    pub store: Arc<dyn teamster_store::Store>,
    /// The URL without its password, for messages and logs.
    pub shown: String,
}

/// The data directory: `$XDG_DATA_HOME/teamster`, `~/.local/share/teamster`, or `.teamster`.
fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir).join("teamster");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/teamster"),
        None => PathBuf::from(".teamster"),
    }
}

/// The data directory the arguments name, or the default.
pub fn data_dir(args: &StoreArgs) -> PathBuf {
    args.data_dir.clone().unwrap_or_else(default_data_dir)
}

/// The database URL the arguments name: `--database`, or the SQLite file in the data directory.
pub fn database_url(args: &StoreArgs) -> String {
    match &args.database {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", data_dir(args).join("teamster.db").display()),
    }
}

/// Opens the store the arguments name.
pub async fn open(args: &StoreArgs) -> anyhow::Result<OpenStore> {
    let database = database_url(args);
    let shown = without_password(&database);
    let store: Arc<dyn teamster_store::Store> = if database.starts_with("sqlite:") {
        Arc::new(teamster_store_sqlite::SqliteStore::connect(&database).await.with_context(|| format!("opening {database}"))?)
    } else if database.starts_with("postgres://") || database.starts_with("postgresql://") {
        let store = teamster_store_postgres::PostgresStore::connect(&database);
        Arc::new(store.await.with_context(|| format!("opening {shown}"))?)
    } else {
        bail!("unsupported database URL {shown:?}: use sqlite://PATH or postgres://USER@HOST/DATABASE");
    };
    Ok(OpenStore { store, shown })
}

/// A database URL with the password of its `user:password@` part masked.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@').and_then(|(credentials, host)| Some((credentials.split_once(':')?.0, host))) {
        Some((user, host)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_are_shown_without_their_password() {
        assert_eq!(without_password("postgres://app:s3cr@t@db:5432/teamster"), "postgres://app:***@db:5432/teamster");
        assert_eq!(without_password("postgresql://app:pw@db?sslmode=require"), "postgresql://app:***@db?sslmode=require");
        for unchanged in ["postgres://app@db/teamster", "postgres://db/x?user=a:b@c", "sqlite:///tmp/t.db", "sqlite::memory:"] {
            assert_eq!(without_password(unchanged), unchanged);
        }
    }
}
