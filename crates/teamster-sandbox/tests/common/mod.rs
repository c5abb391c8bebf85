//! Set-up shared by the tests that start a real bubblewrap provider.

use std::path::PathBuf;

use teamster_sandbox::{Bubblewrap, Limits, SandboxOwner};

/// A fresh sandbox root under the system's temporary directory, removed on drop. Its name
/// carries the test file's (`teamster-confinement-…`, `teamster-network-…`), the given name and
/// the process id.
pub struct Root(pub PathBuf);

impl Root {
    pub fn new(name: &str) -> Root {
        let path = std::env::temp_dir().join(format!(
            "teamster-{}-{name}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        Root(path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A bubblewrap provider over `root` with `limits`; panics when bubblewrap does not work here.
pub async fn provider(root: &Root, limits: Limits) -> Bubblewrap {
    Bubblewrap::start(&root.0, limits).await.expect("bubblewrap works on this machine (apt-get install bubblewrap)")
}

/// The owner of the tests' sandboxes (one subject, unless a test says otherwise).
pub fn owner() -> SandboxOwner {
    SandboxOwner::new("default", "user:test")
}
