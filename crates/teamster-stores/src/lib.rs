//! The store a database URL names, for every program that opens one (the `teamster` binary and
//! the library's embedded runtime): `sqlite::memory:`, `sqlite://PATH` or a bare file path for
//! SQLite, `postgres://…` (or `postgresql://…`) for PostgreSQL. Each backend is a feature; a URL
//! of a backend this build lacks is refused by name.
//!
//! Invariant: this crate only chooses and opens a backend. It knows no SQL and no service.

use std::sync::Arc;

use teamster_store::Store;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL names no backend this build has.
    #[error("unsupported database {shown:?}: use {supported}")]
    Unsupported { shown: String, supported: &'static str },
    /// The backend could not open the store.
    #[error("opening {shown}: {source}")]
    Store {
        shown: String,
        #[source]
        source: teamster_store::Error,
    },
}

/// The backends a URL can name, as [`OpenError::Unsupported`] lists them.
const SUPPORTED: &str = match (cfg!(feature = "sqlite"), cfg!(feature = "postgres")) {
    (true, true) => "sqlite::memory:, sqlite://PATH, a file path, or postgres://USER@HOST/DATABASE",
    (true, false) => "sqlite::memory:, sqlite://PATH or a file path (this build has no PostgreSQL)",
    (false, true) => "postgres://USER@HOST/DATABASE (this build has no SQLite)",
    (false, false) => "nothing: this build has no store backend",
};

/// The backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend `url` names, whether or not this build has it.
    pub fn of(url: &str) -> Option<Backend> {
        let is_path = !url.trim().is_empty() && !url.contains("://") && !url.starts_with("sqlite:");
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else if url.starts_with("sqlite:") || is_path {
            Some(Backend::Sqlite)
        } else {
            None
        }
    }
}

/// Opens the store `url` names (see the crate comment). Messages show the URL without its
/// password.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, OpenError> {
    let shown = without_password(url);
    let failed = |source| OpenError::Store { shown: shown.clone(), source };
    match Backend::of(url) {
        #[cfg(feature = "sqlite")]
        Some(Backend::Sqlite) => Ok(Arc::new(teamster_store_sqlite::SqliteStore::connect(url).await.map_err(failed)?)),
        #[cfg(feature = "postgres")]
        Some(Backend::Postgres) => Ok(Arc::new(teamster_store_postgres::PostgresStore::connect(url).await.map_err(failed)?)),
        _ => Err(OpenError::Unsupported { shown, supported: SUPPORTED }),
    }
}

/// A database URL with the password of its `user:password@` part masked, for messages and logs.
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

    #[test]
    fn urls_name_their_backend() {
        for (url, backend) in [
            ("sqlite::memory:", Some(Backend::Sqlite)),
            ("sqlite:///var/lib/teamster/teamster.db", Some(Backend::Sqlite)),
            ("teamster.db", Some(Backend::Sqlite)),
            ("postgres://app@db/teamster", Some(Backend::Postgres)),
            ("postgresql://app@db/teamster", Some(Backend::Postgres)),
            ("mysql://app@db/teamster", None),
            ("", None),
        ] {
            assert_eq!(Backend::of(url), backend, "{url}");
        }
    }

    #[tokio::test]
    async fn an_unknown_scheme_is_refused_without_its_password() {
        let refused = open_store("mysql://app:hunter2@db/teamster").await.err().expect("refused");
        let message = refused.to_string();
        assert!(message.contains("mysql://app:***@db/teamster") && !message.contains("hunter2"), "{message}");
        assert!(message.contains("postgres://"), "{message}");
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_in_memory_opens() {
        let store = open_store("sqlite::memory:").await.expect("opened");
        assert!(store.list_agents().await.expect("listed").is_empty());
    }
}
