//! [`SkillCache`]: skills fetched from git on the host, once per commit. Under its root:
//! `commits/<key>-<commit>/` (a skill's files at one commit, `key` a hash of the URL without
//! credentials and the path; never changed once there), `tmp/` (a scratch bare repository and
//! checkout per fetch, renamed into `commits/` when complete, so concurrent fetches of one
//! commit, from this process or another replica sharing the root, never see half a skill) and
//! `home/` (git's `HOME`, empty). Resolving a ref asks the remote (`git ls-remote`), also for a
//! full commit SHA, to learn that the caller's credentials reach the repository; the answer is
//! kept in memory for a short while, for those credentials only.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use teamster_egress::EgressPolicy;

use super::document::read_skill_md;
use super::git::{Failure, Git};
use super::redact::tail;
use super::source::{Checked, GitAuth, GitSource, check, is_full_sha};
use super::{MAX_SKILL_BYTES, MAX_SKILL_FILES, Skill, SkillError, check_name};

/// The most of git's error output an error shows.
const MAX_MESSAGE_BYTES: usize = 4 * 1024;
/// The most `git ls-remote` and `git ls-tree` may print.
const MAX_LISTING_BYTES: usize = 8 * 1024 * 1024;
/// Where a fetch puts what it fetched in its scratch repository.
const FETCHED_REF: &str = "refs/teamster/fetched";
/// The most a git command that should print nothing may print.
const MAX_QUIET_BYTES: usize = 64 * 1024;
/// Resolved refs remembered at most; older ones are dropped beyond it.
const MAX_REMEMBERED: usize = 4096;

/// Skills on the host: git skills fetched once per commit into a directory (which may be shared
/// storage, for several replicas), local skills read in place.
///
/// A commit in the cache is served only to a caller whose credentials (or lack of them) reached
/// its repository lately: what one caller fetched from a private repository is not another's
/// for naming the same URL and commit.
#[derive(Debug)]
pub struct SkillCache {
    root: PathBuf,
    git_timeout: Duration,
    ref_ttl: Duration,
    /// `(url, ref, Authorization header)` → the commit it named, and when that was learned
    /// (which is also when those credentials last reached the repository).
    resolved: Mutex<HashMap<ResolvedKey, (String, Instant)>>,
}

type ResolvedKey = (String, String, Option<String>);

/// Names of scratch directories: unique in this process, and across processes by the pid.
static SCRATCH_COUNTER: AtomicU64 = AtomicU64::new(0);

impl SkillCache {
    /// How long one git command may run by default.
    pub const DEFAULT_GIT_TIMEOUT: Duration = Duration::from_secs(120);
    /// How long a resolved branch or tag is trusted by default before the remote is asked again.
    pub const DEFAULT_REF_TTL: Duration = Duration::from_secs(60);

    /// A cache keeping its files under `root` (created when first needed; its directories are
    /// made enterable by other users, since sandboxes run as users of their own and must reach
    /// the skills mounted into them).
    pub fn new(root: PathBuf) -> SkillCache {
        SkillCache {
            root,
            git_timeout: SkillCache::DEFAULT_GIT_TIMEOUT,
            ref_ttl: SkillCache::DEFAULT_REF_TTL,
            resolved: Mutex::new(HashMap::new()),
        }
    }

    /// The same cache with another time limit for each git command.
    pub fn with_git_timeout(mut self, timeout: Duration) -> SkillCache {
        self.git_timeout = timeout;
        self
    }

    /// The same cache trusting a resolved branch or tag for `ttl` (zero: ask every time).
    pub fn with_ref_ttl(mut self, ttl: Duration) -> SkillCache {
        self.ref_ttl = ttl;
        self
    }

    /// Fetches a git skill: resolves `source.reference` (a branch, a tag, a full ref or a full
    /// commit SHA) to a commit, fetches that commit once (a commit already in the cache is not
    /// fetched again), puts the files of `source.path` (the repository's root when `None`) into
    /// `commits/<key>-<commit>/` under the root, and parses its `SKILL.md`.
    ///
    /// `auth` gives basic credentials for `https://` URLs whose host matches; they reach git
    /// through its environment only, and no file of the skill. Errors carry git's message with
    /// every secret replaced by `***`.
    pub async fn fetch_git(&self, source: &GitSource, auth: &[GitAuth]) -> Result<Skill, SkillError> {
        self.fetch_git_within(source, auth, None).await
    }

    /// [`SkillCache::fetch_git`] for a source a member named: its host must resolve to
    /// addresses `egress` allows (not this host or its private network, unless the operator
    /// allows them), and git is pinned to the addresses checked (`http.curloptResolve`, or a
    /// `git://` URL rewritten to the address) and follows no redirects, so neither a DNS
    /// answer that changes nor a redirect leads it elsewhere. `None` checks nothing (a source
    /// the operator configured).
    pub async fn fetch_git_within(&self, source: &GitSource, auth: &[GitAuth], egress: Option<&EgressPolicy>) -> Result<Skill, SkillError> {
        let checked = check(source, auth)?;
        let key = cache_key(&checked.shown_url, checked.path.as_deref());
        let pinned = match egress {
            Some(egress) => pin(&checked, egress).await?,
            None => Vec::new(),
        };
        let git = Git::new(self.root.join("home"), self.git_timeout)?.with_config(pinned);
        let (known, fetch_ref) = match self.remembered(&checked) {
            Some(commit) => (Some(commit), checked.reference.clone()),
            None => {
                self.prepare().await?;
                // Asking the remote also shows that these credentials reach the repository, before
                // the cache serves a commit that other credentials fetched.
                match self.resolve(&git, &checked).await? {
                    Some((commit, full_ref)) => (Some(commit), full_ref),
                    None if checked.is_commit() => (Some(checked.reference.clone()), checked.reference.clone()),
                    // Not a branch or tag the remote lists: the fetch says what git thinks of it.
                    None => (None, checked.reference.clone()),
                }
            }
        };
        if let Some(commit) = &known {
            let dir = self.commit_dir(&key, commit);
            if tokio::fs::symlink_metadata(&dir).await.is_ok_and(|meta| meta.is_dir()) {
                self.remember(&checked, commit);
                return skill_at(&source.name, dir, commit).await;
            }
        }
        self.prepare().await?;
        let commit = self.fetch(&git, &checked, &fetch_ref, &key).await?;
        self.remember(&checked, &commit);
        skill_at(&source.name, self.commit_dir(&key, &commit), &commit).await
    }

    /// A skill in a local directory, used in place (no copy): checks the name, reads and parses
    /// its `SKILL.md`.
    pub async fn load_local(&self, name: &str, dir: &Path) -> Result<Skill, SkillError> {
        check_name(name)?;
        let dir = tokio::fs::canonicalize(dir).await.map_err(SkillError::io(format!("opening the skill directory {}", dir.display())))?;
        if !tokio::fs::metadata(&dir).await.is_ok_and(|meta| meta.is_dir()) {
            return Err(SkillError::Invalid { field: "directory", reason: format!("{} is not a directory", dir.display()) });
        }
        let read_dir = dir.clone();
        let document = blocking(move || read_skill_md(&read_dir)).await?;
        Ok(Skill { name: name.to_owned(), description: document.description, body: document.body, dir, commit: None })
    }

    /// The commit a ref was resolved to lately, if within the time to trust it.
    fn remembered(&self, checked: &Checked<'_>) -> Option<String> {
        let resolved = self.resolved.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (commit, at) = resolved.get(&resolved_key(checked))?;
        (at.elapsed() < self.ref_ttl).then(|| commit.clone())
    }

    fn remember(&self, checked: &Checked<'_>, commit: &str) {
        if self.ref_ttl.is_zero() {
            return;
        }
        let mut resolved = self.resolved.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if resolved.len() >= MAX_REMEMBERED {
            let ttl = self.ref_ttl;
            resolved.retain(|_, (_, at)| at.elapsed() < ttl);
            if resolved.len() >= MAX_REMEMBERED {
                resolved.clear();
            }
        }
        resolved.insert(resolved_key(checked), (commit.to_owned(), Instant::now()));
    }

    fn commit_dir(&self, key: &str, commit: &str) -> PathBuf {
        self.root.join("commits").join(format!("{key}-{commit}"))
    }

    /// Makes the cache's directories: the root and `commits/` enterable by everyone (not
    /// listable), `tmp/` and `home/` private.
    async fn prepare(&self) -> Result<(), SkillError> {
        for (dir, mode) in [(self.root.clone(), 0o711), (self.root.join("commits"), 0o711), (self.root.join("tmp"), 0o700), (self.root.join("home"), 0o700)] {
            tokio::fs::create_dir_all(&dir).await.map_err(SkillError::io(format!("creating {}", dir.display())))?;
            set_mode(&dir, mode).await?;
        }
        Ok(())
    }

    /// Asks the remote what `reference` names: a commit and the full ref, or `None` when it
    /// lists no such branch or tag.
    async fn resolve(&self, git: &Git, checked: &Checked<'_>) -> Result<Option<(String, String)>, SkillError> {
        let reference = &checked.reference;
        let peeled = format!("{reference}^{{}}");
        let args = [OsStr::new("ls-remote"), OsStr::new("--"), OsStr::new(checked.url), OsStr::new(reference), OsStr::new(&peeled)];
        let listing = run(git, checked, None, &args, MAX_LISTING_BYTES, "list the refs of").await?;
        let listing = String::from_utf8_lossy(&listing);
        let refs: HashMap<&str, &str> = listing.lines().filter_map(|line| line.split_once('\t')).map(|(oid, name)| (name, oid)).collect();
        let candidates = if reference == "HEAD" || reference.starts_with("refs/") {
            vec![reference.clone()]
        } else {
            vec![format!("refs/heads/{reference}"), format!("refs/tags/{reference}")]
        };
        Ok(candidates.into_iter().find_map(|candidate| {
            let oid = refs.get(format!("{candidate}^{{}}").as_str()).or_else(|| refs.get(candidate.as_str()))?;
            is_full_sha(oid).then(|| (oid.to_ascii_lowercase(), candidate))
        }))
    }

    /// Fetches `fetch_ref` into a scratch repository, checks out the skill's directory next to
    /// it, and renames that into `commits/`; returns the commit.
    async fn fetch(&self, git: &Git, checked: &Checked<'_>, fetch_ref: &str, key: &str) -> Result<String, SkillError> {
        let scratch = Scratch::create(&self.root.join("tmp")).await?;
        let repo = scratch.path.join("repo.git");
        let shown = &checked.shown_url;
        run(git, checked, None, &[OsStr::new("init"), OsStr::new("--bare"), OsStr::new("--quiet"), repo.as_os_str()], MAX_QUIET_BYTES, "set up a repository for")
            .await?;

        let refspec = format!("+{fetch_ref}:{FETCHED_REF}");
        let fetch_args =
            ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--depth=1", "--"].map(OsStr::new).into_iter().chain([OsStr::new(checked.url), OsStr::new(&refspec)]);
        let fetch_args: Vec<&OsStr> = fetch_args.collect();
        let action = format!("fetch {fetch_ref} from");
        run_in(git, &repo, checked, checked.header.as_deref(), &fetch_args, MAX_QUIET_BYTES, &action).await?;

        let peel = format!("{FETCHED_REF}^{{commit}}");
        let commit = run_in(git, &repo, checked, None, &[OsStr::new("rev-parse"), OsStr::new("--verify"), OsStr::new(&peel)], 1024, "read the commit of")
            .await?;
        let commit = String::from_utf8_lossy(&commit).trim().to_ascii_lowercase();
        if !is_full_sha(&commit) {
            return Err(SkillError::Git { action: "read the commit of".to_owned(), url: shown.clone(), message: "git named no commit".to_owned() });
        }

        let tree = match &checked.path {
            Some(path) => format!("{commit}:{path}"),
            None => format!("{commit}^{{tree}}"),
        };
        let kind = run_in(git, &repo, checked, None, &[OsStr::new("cat-file"), OsStr::new("-t"), OsStr::new(&tree)], 1024, "read").await;
        if !kind.is_ok_and(|kind| kind.trim_ascii() == b"tree") {
            let path = checked.path.as_deref().unwrap_or(".");
            return Err(SkillError::Invalid {
                field: "path",
                reason: format!("the repository {shown} has no directory {path:?} at commit {commit}"),
            });
        }
        check_tree_size(git, &repo, checked, &tree).await?;

        let files = scratch.path.join("files");
        tokio::fs::create_dir(&files).await.map_err(SkillError::io("creating a checkout directory"))?;
        let work_tree = ["--work-tree".as_ref(), files.as_os_str()];
        let checkout = [OsStr::new("read-tree"), OsStr::new("--reset"), OsStr::new("-u"), OsStr::new(&tree)];
        let args: Vec<&OsStr> = work_tree.into_iter().chain(checkout).collect();
        run_in(git, &repo, checked, None, &args, MAX_QUIET_BYTES, "check out the skill from").await?;

        let settled = files.clone();
        blocking(move || settle(&settled)).await?;
        let check_files = files.clone();
        blocking(move || read_skill_md(&check_files)).await?;

        let target = self.commit_dir(key, &commit);
        match tokio::fs::rename(&files, &target).await {
            Ok(()) => {}
            // Another fetch of the same commit got there first: its copy is as good.
            Err(_) if tokio::fs::symlink_metadata(&target).await.is_ok_and(|meta| meta.is_dir()) => {}
            Err(error) => return Err(SkillError::io(format!("moving the skill into {}", target.display()))(error)),
        }
        scratch.remove().await;
        Ok(commit)
    }
}

/// Resolves the source's host under the egress policy, and the git configuration that keeps
/// git on the addresses allowed: for `http(s)`, curl's resolve list and no redirects; for
/// `git://`, whose daemon protocol has no redirects, the URL rewritten to the first address.
async fn pin(checked: &Checked<'_>, egress: &EgressPolicy) -> Result<Vec<(String, String)>, SkillError> {
    let destination = &checked.destination;
    let refused = |reason: String| SkillError::Refused { url: checked.shown_url.clone(), reason };
    let addresses = egress.resolve(&destination.host, destination.port).await.map_err(|error| refused(error.to_string()))?;
    let literal = destination.host.parse::<IpAddr>().is_ok();
    let shown = |address: &SocketAddr| match address.ip() {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    };
    let mut config = Vec::new();
    if destination.scheme == "git" {
        let first = addresses.first().ok_or_else(|| refused("its host has no address".to_owned()))?;
        if !literal {
            config.push((format!("url.git://{}:{}/.insteadOf", shown(first), destination.port), format!("git://{}/", destination.authority)));
        }
        return Ok(config);
    }
    config.push(("http.followRedirects".to_owned(), "false".to_owned()));
    if !literal {
        let list: Vec<String> = addresses.iter().map(shown).collect();
        config.push(("http.curloptResolve".to_owned(), format!("{}:{}:{}", destination.host, destination.port, list.join(","))));
    }
    Ok(config)
}

/// What a resolved ref is remembered by: the URL, the ref and the credentials that reached it.
fn resolved_key(checked: &Checked<'_>) -> ResolvedKey {
    (checked.url.to_owned(), checked.reference.clone(), checked.header.clone())
}

/// The skill whose files are in `dir`, from its `SKILL.md`.
async fn skill_at(name: &str, dir: PathBuf, commit: &str) -> Result<Skill, SkillError> {
    let read = dir.clone();
    let document = blocking(move || read_skill_md(&read)).await?;
    Ok(Skill { name: name.to_owned(), description: document.description, body: document.body, dir, commit: Some(commit.to_owned()) })
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, SkillError> + Send + 'static) -> Result<T, SkillError> {
    tokio::task::spawn_blocking(work).await.map_err(|error| SkillError::io("reading the skill's files")(std::io::Error::other(error)))?
}

/// Refuses a tree whose files hold more than [`MAX_SKILL_BYTES`] or number more than
/// [`MAX_SKILL_FILES`], before anything is written.
async fn check_tree_size(git: &Git, repo: &Path, checked: &Checked<'_>, tree: &str) -> Result<(), SkillError> {
    let too_large = |what: &str, limit: String| SkillError::TooLarge { what: format!("the skill's {what}"), limit };
    let files_limit = || too_large("number of files", format!("{MAX_SKILL_FILES} files"));
    let args = ["ls-tree", "-r", "-t", "-l", "-z", tree].map(OsStr::new);
    let result = git.run(Some(repo), &args, None, MAX_LISTING_BYTES).await;
    if matches!(result, Ok(None)) {
        // Over the listing limit: far more files than any skill has.
        return Err(files_limit());
    }
    let listing = outcome(git, checked, "list the files of", result)?;
    let (mut bytes, mut entries) = (0u64, 0u64);
    for entry in listing.split(|byte| *byte == 0).filter(|entry| !entry.is_empty()) {
        entries += 1;
        // `<mode> <type> <object> <size>\t<path>`; the size is `-` for directories.
        let meta = entry.split(|byte| *byte == b'\t').next().unwrap_or_default();
        let size = meta.split(|byte| *byte == b' ').filter(|part| !part.is_empty()).nth(3).unwrap_or_default();
        bytes += std::str::from_utf8(size).ok().and_then(|size| size.parse::<u64>().ok()).unwrap_or(0);
    }
    if entries > MAX_SKILL_FILES {
        return Err(files_limit());
    }
    if bytes > MAX_SKILL_BYTES {
        return Err(too_large("files", format!("{} MiB", MAX_SKILL_BYTES / (1024 * 1024))));
    }
    Ok(())
}

/// Runs git outside any repository.
async fn run(git: &Git, checked: &Checked<'_>, header: Option<&str>, args: &[&OsStr], max_stdout: usize, action: &str) -> Result<Vec<u8>, SkillError> {
    outcome(git, checked, action, git.run(None, args, header, max_stdout).await)
}

/// Runs git on the scratch repository `repo`.
async fn run_in(
    git: &Git,
    repo: &Path,
    checked: &Checked<'_>,
    header: Option<&str>,
    args: &[&OsStr],
    max_stdout: usize,
    action: &str,
) -> Result<Vec<u8>, SkillError> {
    outcome(git, checked, action, git.run(Some(repo), args, header, max_stdout).await)
}

/// A git command's outcome as the cache reports it, secrets redacted.
fn outcome(git: &Git, checked: &Checked<'_>, action: &str, result: Result<Option<Vec<u8>>, Failure>) -> Result<Vec<u8>, SkillError> {
    let url = checked.shown_url.clone();
    match result {
        Ok(Some(stdout)) => Ok(stdout),
        Ok(None) => Err(SkillError::Io { context: format!("git printed too much to {action} {url}"), source: std::io::ErrorKind::FileTooLarge.into() }),
        Err(Failure::Exited(stderr)) => {
            let message = tail(&checked.redactor.redact(&stderr), MAX_MESSAGE_BYTES);
            let message = if message.is_empty() { "git failed without saying why".to_owned() } else { message };
            Err(SkillError::Git { action: action.to_owned(), url, message })
        }
        Err(Failure::TimedOut) => Err(SkillError::TimedOut { action: action.to_owned(), url, seconds: git.timeout().as_secs() }),
        Err(Failure::Io(error)) => Err(SkillError::io(format!("running git to {action} {url}"))(error)),
    }
}

/// The part of a checkout directory's name that tells sources apart: a hash of the URL (without
/// credentials) and the path.
fn cache_key(url: &str, path: Option<&str>) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{url}\n{}", path.unwrap_or("")).as_bytes());
    digest.as_ref()[..8].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Gives a checked-out skill the modes sandboxes need (directories `0755`, files `0644`, or
/// `0755` when executable; symbolic links untouched) and checks its size again.
fn settle(dir: &Path) -> Result<(), SkillError> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(dir: &Path, bytes: &mut u64, entries: &mut u64) -> Result<(), SkillError> {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(SkillError::io("setting a skill directory's mode"))?;
        for entry in std::fs::read_dir(dir).map_err(SkillError::io("listing the skill's files"))? {
            let entry = entry.map_err(SkillError::io("listing the skill's files"))?;
            let meta = entry.metadata().map_err(SkillError::io("reading the skill's files"))?;
            *entries += 1;
            if meta.is_dir() {
                walk(&entry.path(), bytes, entries)?;
            } else if meta.is_file() {
                *bytes += meta.len();
                let mode = if meta.permissions().mode() & 0o111 != 0 { 0o755 } else { 0o644 };
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).map_err(SkillError::io("setting a skill file's mode"))?;
            }
        }
        Ok(())
    }
    let (mut bytes, mut entries) = (0, 0);
    walk(dir, &mut bytes, &mut entries)?;
    if bytes > MAX_SKILL_BYTES || entries > MAX_SKILL_FILES {
        return Err(SkillError::TooLarge { what: "the skill's files".to_owned(), limit: format!("{} MiB or {MAX_SKILL_FILES} files", MAX_SKILL_BYTES / (1024 * 1024)) });
    }
    Ok(())
}

async fn set_mode(path: &Path, mode: u32) -> Result<(), SkillError> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).await.map_err(SkillError::io(format!("setting the mode of {}", path.display())))
}

/// A fetch's scratch directory (a bare repository and a checkout), removed when done, also when
/// the fetch fails or its future is dropped.
struct Scratch {
    path: PathBuf,
    removed: bool,
}

impl Scratch {
    async fn create(parent: &Path) -> Result<Scratch, SkillError> {
        let started = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let count = SCRATCH_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("fetch-{}-{started}-{count}", std::process::id()));
        tokio::fs::create_dir(&path).await.map_err(SkillError::io(format!("creating {}", path.display())))?;
        Ok(Scratch { path, removed: false })
    }

    async fn remove(mut self) {
        let _ = tokio::fs::remove_dir_all(&self.path).await;
        self.removed = true;
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let path = std::mem::take(&mut self.path);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || std::fs::remove_dir_all(path))),
            Err(_) => drop(std::fs::remove_dir_all(path)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn member_sources_are_pinned_to_their_checked_addresses() {
        let source = |url: &str| GitSource { name: "s".to_owned(), url: url.to_owned(), reference: "main".to_owned(), path: None };
        let pinned = |url: &'static str, policy: EgressPolicy| async move {
            let source = source(url);
            pin(&check(&source, &[]).unwrap(), &policy).await
        };
        let localhost = || EgressPolicy::parse(["localhost"]).unwrap();

        let config = pinned("http://LocalHost:8080/r.git", localhost()).await.unwrap();
        assert!(config.contains(&("http.followRedirects".to_owned(), "false".to_owned())), "{config:?}");
        let (_, resolve) = config.iter().find(|(name, _)| name == "http.curloptResolve").expect("no resolve entry");
        assert!(resolve.starts_with("localhost:8080:") && resolve.contains("127.0.0.1"), "{resolve}");

        let config = pinned("git://localhost/r.git", localhost()).await.unwrap();
        let [(name, value)] = &config[..] else { panic!("{config:?}") };
        assert!(name.starts_with("url.git://") && name.ends_with(":9418/.insteadOf") && !name.contains("localhost"), "{name}");
        assert_eq!(value, "git://localhost/");

        for url in ["http://localhost:8080/r.git", "git://127.0.0.1/r.git", "https://[::1]/r.git", "http://10.0.0.1/r.git"] {
            let source = source(url);
            let refused = pin(&check(&source, &[]).unwrap(), &EgressPolicy::new()).await;
            assert!(matches!(refused, Err(SkillError::Refused { .. })), "{url}: {refused:?}");
        }
        // An allowed literal address needs no pin, but still no redirects.
        let config = pinned("http://127.0.0.1:8080/r.git", EgressPolicy::parse(["127.0.0.1"]).unwrap()).await.unwrap();
        assert_eq!(config, vec![("http.followRedirects".to_owned(), "false".to_owned())]);
    }

    #[test]
    fn a_resolved_ref_is_remembered_for_the_credentials_that_reached_it_only() {
        let cache = SkillCache::new(PathBuf::from("/nonexistent"));
        let source = GitSource {
            name: "pdf".to_owned(),
            url: "https://git.example.com/private.git".to_owned(),
            reference: "main".to_owned(),
            path: None,
        };
        let auth = |password: &str| GitAuth { hosts: vec!["git.example.com".to_owned()], username: "u".to_owned(), password: password.to_owned() };
        let (owner, other) = ([auth("owner-token")], [auth("other-token")]);
        let commit = "0123456789abcdef0123456789abcdef01234567";
        cache.remember(&check(&source, &owner).unwrap(), commit);
        assert_eq!(cache.remembered(&check(&source, &owner).unwrap()).as_deref(), Some(commit));
        for auth in [&other[..], &[]] {
            assert_eq!(cache.remembered(&check(&source, auth).unwrap()), None, "{auth:?}");
        }
    }
}
