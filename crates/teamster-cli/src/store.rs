//! Opening the store a command names (`--database`, or the SQLite file in the data directory),
//! through `teamster_stores::open_store` as the library's runtime does.

use std::path::PathBuf;
use std::sync::Arc;


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
    let store = teamster_stores::open_store(&database).await?;
    Ok(OpenStore { store, shown: teamster_stores::without_password(&database) })
}
