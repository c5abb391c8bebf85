//! Skills with real git: a repository served by `git daemon` on a free local port, fetched into
//! a `SkillCache` (once per commit), refused or failing with git's own words and never a secret,
//! and mounted read-only into a real bubblewrap sandbox.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use teamster_sandbox::{Bubblewrap, ExecOutput, ExecRequest, Limits, SandboxError, SandboxProvider};
use teamster_skills::{GitAuth, GitSource, SkillCache, SkillError};

/// A fresh directory under the system's temporary directory, removed on drop.
struct Root(PathBuf);

impl Root {
    fn new(name: &str) -> Root {
        let path = std::env::temp_dir().join(format!("teamster-skills-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Root(path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs git in `dir` with no configuration but a committer; panics when it fails.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git is installed");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn write(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

const PDF_SKILL_MD: &str = "---\nname: pdf\ndescription: >\n  Extracts text and tables\n  from PDF files.\nlicense: MIT\n---\n# PDF\n\nRun `scripts/extract.sh`.\n";

/// A repository of skills: `skills/pdf` (a good one with a script), `skills/bad` (no
/// description), `skills/big` (an oversized SKILL.md) and a README at the root, pushed to
/// `served/repo.git` with the annotated tag `v1`.
struct Repo {
    work: PathBuf,
    served: PathBuf,
}

impl Repo {
    fn new(root: &Path) -> Repo {
        let served = root.join("served");
        let work = root.join("work");
        std::fs::create_dir_all(&served).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        git(&served, &["init", "--quiet", "--bare", "repo.git"]);
        git(&work, &["init", "--quiet"]);
        write(&work.join("README.md"), "Skills.\n");
        write(&work.join("skills/pdf/SKILL.md"), PDF_SKILL_MD);
        write(&work.join("skills/pdf/scripts/extract.sh"), "#!/bin/sh\necho extracted\n");
        std::fs::set_permissions(work.join("skills/pdf/scripts/extract.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&work.join("skills/bad/SKILL.md"), "---\nname: bad\n---\nNo description.\n");
        write(&work.join("skills/big/SKILL.md"), &format!("---\ndescription: big\n---\n{}", "x".repeat(300 * 1024)));
        let repo = Repo { work, served };
        repo.commit("first");
        git(&repo.work, &["tag", "-a", "v1", "-m", "v1"]);
        git(&repo.work, &["push", "--quiet", "../served/repo.git", "v1"]);
        repo
    }

    /// Commits everything and pushes `main`; returns the commit.
    fn commit(&self, message: &str) -> String {
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "--quiet", "-m", message]);
        git(&self.work, &["push", "--quiet", "../served/repo.git", "main"]);
        git(&self.work, &["rev-parse", "HEAD"])
    }
}

/// `git-daemon` serving a directory on a free port of 127.0.0.1, killed on drop.
struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(base: &Path) -> Daemon {
        let port = free_port();
        // `git-daemon` itself: `git daemon` would run it as a child, which killing `git` leaves.
        let exec_path = git(base, &["--exec-path"]);
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args(["--export-all", "--listen=127.0.0.1", "--reuseaddr"])
            .arg(format!("--base-path={}", base.display()))
            .arg(format!("--port={port}"))
            .arg(base)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon did not listen on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, port }
    }

    fn url(&self) -> String {
        format!("git://127.0.0.1:{}/repo.git", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn source(name: &str, url: &str, reference: &str, path: Option<&str>) -> GitSource {
    GitSource { name: name.to_owned(), url: url.to_owned(), reference: reference.to_owned(), path: path.map(str::to_owned) }
}

/// The inode and modification time of a path: unchanged when nothing rewrote it.
fn identity(path: &Path) -> (u64, i64, i64) {
    let meta = std::fs::metadata(path).unwrap();
    (meta.ino(), meta.mtime(), meta.mtime_nsec())
}

/// Every path under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            out.push(entry.path().strip_prefix(base).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                walk(base, &entry.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Waits (at most five seconds) until the cache's scratch directory is empty.
async fn assert_scratch_cleaned(cache_root: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<_> = std::fs::read_dir(cache_root.join("tmp")).map(|entries| entries.flatten().map(|entry| entry.path()).collect()).unwrap_or_default();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "scratch left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_git_skill_is_fetched_once_per_commit() {
    let root = Root::new("fetch");
    let repo = Repo::new(&root.0);
    let daemon = Daemon::start(&repo.served);
    let cache_root = root.0.join("cache");
    let cache = SkillCache::new(cache_root.clone());
    let first_commit = git(&repo.work, &["rev-parse", "HEAD"]);

    let skill = cache.fetch_git(&source("pdf-tools", &daemon.url(), "main", Some("skills/pdf")), &[]).await.unwrap();
    assert_eq!(skill.name, "pdf-tools", "mounted under the name it was given");
    assert_eq!(skill.description, "Extracts text and tables from PDF files.");
    assert_eq!(skill.body, "# PDF\n\nRun `scripts/extract.sh`.");
    assert_eq!(skill.commit.as_deref(), Some(first_commit.as_str()));
    assert!(skill.dir.starts_with(cache_root.join("commits")) && skill.dir.ends_with(format!("{}", skill.dir.file_name().unwrap().to_string_lossy())));
    assert!(skill.dir.file_name().unwrap().to_string_lossy().ends_with(&first_commit));
    // Only the skill's own files: no .git, nothing from elsewhere in the repository.
    assert_eq!(files(&skill.dir), ["SKILL.md", "scripts", "scripts/extract.sh"]);
    assert_eq!(std::fs::read_to_string(skill.dir.join("SKILL.md")).unwrap(), PDF_SKILL_MD);
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&skill.dir), mode(&skill.dir.join("SKILL.md")), mode(&skill.dir.join("scripts/extract.sh"))), (0o755, 0o644, 0o755));
    assert_scratch_cleaned(&cache_root).await;

    // The same ref again, by tag (annotated, peeled to its commit) and by SHA: the same files,
    // untouched.
    let before = identity(&skill.dir);
    for reference in ["main", "v1", "refs/heads/main", first_commit.as_str(), &first_commit.to_uppercase()] {
        let again = cache.fetch_git(&source("pdf-tools", &daemon.url(), reference, Some("./skills/pdf/")), &[]).await.unwrap();
        assert_eq!((again.dir.as_path(), again.commit.as_deref()), (skill.dir.as_path(), Some(first_commit.as_str())), "{reference}");
    }
    assert_eq!(identity(&skill.dir), before);

    // A new commit on the branch: the cache trusts what it resolved for a while; a cache that
    // asks every time sees the new commit, in a directory of its own.
    write(&repo.work.join("skills/pdf/SKILL.md"), &PDF_SKILL_MD.replace("from PDF files.", "from PDFs, v2."));
    let second_commit = repo.commit("second");
    let trusted = cache.fetch_git(&source("pdf", &daemon.url(), "main", Some("skills/pdf")), &[]).await.unwrap();
    assert_eq!(trusted.commit.as_deref(), Some(first_commit.as_str()));
    let eager = SkillCache::new(cache_root.clone()).with_ref_ttl(Duration::ZERO);
    let updated = eager.fetch_git(&source("pdf", &daemon.url(), "main", Some("skills/pdf")), &[]).await.unwrap();
    assert_eq!(updated.commit.as_deref(), Some(second_commit.as_str()));
    assert_eq!(updated.description, "Extracts text and tables from PDFs, v2.");
    assert_ne!(updated.dir, skill.dir);
    assert_eq!(identity(&skill.dir), before, "the older commit's files stay as they were");

    // With the server gone, what the cache resolved moments ago needs no network: a commit by
    // SHA, a branch. A cache that has not reached the repository lately serves nothing from its
    // files, a commit by SHA included (its caller's access is not known), and fails with git's
    // message.
    let url = daemon.url();
    drop(daemon);
    let by_sha = cache.fetch_git(&source("pdf", &url, &first_commit, Some("skills/pdf")), &[]).await.unwrap();
    assert_eq!(by_sha.dir, skill.dir);
    let offline = SkillCache::new(cache_root.clone());
    let unknown_access = offline.fetch_git(&source("pdf", &url, &first_commit, Some("skills/pdf")), &[]).await;
    assert!(matches!(unknown_access, Err(SkillError::Git { .. })), "{unknown_access:?}");
    let remembered = eager.fetch_git(&source("pdf", &url, "main", Some("skills/pdf")), &[]).await;
    assert!(matches!(remembered, Err(SkillError::Git { .. })), "a zero TTL asks again: {remembered:?}");
    let recent = cache.fetch_git(&source("pdf", &url, "main", Some("skills/pdf")), &[]).await.unwrap();
    assert_eq!(recent.commit.as_deref(), Some(first_commit.as_str()));
    let unreachable = offline.fetch_git(&source("pdf", &url, "main", Some("skills/pdf")), &[]).await.unwrap_err();
    assert!(unreachable.to_string().contains("unable to connect"), "{unreachable}");
}

#[tokio::test]
async fn concurrent_fetches_of_one_commit_agree() {
    let root = Root::new("concurrent");
    let repo = Repo::new(&root.0);
    let daemon = Daemon::start(&repo.served);
    let cache_root = root.0.join("cache");
    // Two caches on one root: two replicas sharing storage.
    let (one, two) = (SkillCache::new(cache_root.clone()), SkillCache::new(cache_root.clone()));
    let pdf = source("pdf", &daemon.url(), "main", Some("skills/pdf"));
    let (a, b, c, d) = tokio::join!(one.fetch_git(&pdf, &[]), two.fetch_git(&pdf, &[]), one.fetch_git(&pdf, &[]), two.fetch_git(&pdf, &[]));
    let dirs: Vec<PathBuf> = [a, b, c, d].into_iter().map(|skill| skill.unwrap().dir).collect();
    assert!(dirs.iter().all(|dir| *dir == dirs[0]), "{dirs:?}");
    assert_eq!(files(&dirs[0]), ["SKILL.md", "scripts", "scripts/extract.sh"]);
    assert_eq!(std::fs::read_dir(cache_root.join("commits")).unwrap().count(), 1);
    assert_scratch_cleaned(&cache_root).await;
}

#[tokio::test]
async fn failures_carry_gits_message_and_never_a_secret() {
    let root = Root::new("failures");
    let repo = Repo::new(&root.0);
    let daemon = Daemon::start(&repo.served);
    let cache_root = root.0.join("cache");
    let cache = SkillCache::new(cache_root.clone());
    let url = daemon.url();

    type Expected = fn(&SkillError) -> bool;
    let cases: [(GitSource, Expected, &str); 9] = [
        (source("pdf", &url, "no-such-branch", Some("skills/pdf")), |e| matches!(e, SkillError::Git { .. }), "couldn't find remote ref no-such-branch"),
        (source("pdf", &url, &"0".repeat(40), Some("skills/pdf")), |e| matches!(e, SkillError::Git { .. }), "not our ref"),
        (source("pdf", &url.replace("repo.git", "missing.git"), "main", None), |e| matches!(e, SkillError::Git { .. }), "fatal:"),
        (source("pdf", &url, "main", Some("skills/nothing")), |e| matches!(e, SkillError::Invalid { field: "path", .. }), "has no directory \"skills/nothing\""),
        (source("pdf", &url, "main", Some("skills/pdf/SKILL.md")), |e| matches!(e, SkillError::Invalid { field: "path", .. }), "has no directory"),
        (source("bad", &url, "main", Some("skills/bad")), |e| matches!(e, SkillError::Malformed(_)), "has no `description:`"),
        (source("big", &url, "main", Some("skills/big")), |e| matches!(e, SkillError::TooLarge { .. }), "SKILL.md is over the limit of 256 KiB"),
        (source("root", &url, "main", None), |e| matches!(e, SkillError::Malformed(_)), "has no SKILL.md"),
        (source("pdf", &format!("file://{}", repo.served.join("repo.git").display()), "main", None), |e| matches!(e, SkillError::Invalid { field: "url", .. }), "only https://, http:// and git://"),
    ];
    for (source, expected, message) in cases {
        let error = cache.fetch_git(&source, &[]).await.unwrap_err();
        assert!(expected(&error) && error.to_string().contains(message), "{source:?}: {error:?}");
    }
    for url in ["ext::sh -c 'touch /tmp/pwned'", "ssh://git@127.0.0.1/repo.git", "/srv/repo.git"] {
        let error = cache.fetch_git(&source("pdf", url, "main", None), &[]).await.unwrap_err();
        assert!(matches!(error, SkillError::Invalid { field: "url", .. }), "{url}: {error:?}");
    }

    // Unreachable servers, with credentials in the URL and for the host: git's message, no secret.
    let closed = free_port();
    let auth = [GitAuth { hosts: vec!["127.0.0.1".into()], username: "user".into(), password: "secret".into() }];
    for url in [format!("git://user:secret@127.0.0.1:{closed}/repo.git"), format!("https://user:secret@127.0.0.1:{closed}/repo.git")] {
        let error = cache.fetch_git(&source("pdf", &url, "main", None), &auth).await.unwrap_err();
        let (shown, debug) = (error.to_string(), format!("{error:?}"));
        assert!(matches!(error, SkillError::Git { .. }) && shown.contains("fatal:"), "{url}: {shown}");
        for leaked in ["secret", "dXNlcjpzZWNyZXQ="] {
            assert!(!shown.contains(leaked) && !debug.contains(leaked), "{url}: {shown} / {debug}");
        }
    }
    assert_scratch_cleaned(&cache_root).await;
    assert!(!Path::new("/tmp/pwned").exists());
}

#[tokio::test]
async fn local_skills_are_used_in_place() {
    let root = Root::new("local");
    let dir = root.0.join("notes");
    write(&dir.join("SKILL.md"), "---\nname: notes\ndescription: 'Keeps notes.'\n---\nWrite them down.\n");
    let cache = SkillCache::new(root.0.join("cache"));
    let skill = cache.load_local("notes", &dir).await.unwrap();
    assert_eq!((skill.description.as_str(), skill.body.as_str(), skill.commit), ("Keeps notes.", "Write them down.", None));
    assert_eq!(skill.dir, std::fs::canonicalize(&dir).unwrap());
    assert!(!root.0.join("cache").exists(), "a local skill is not copied");

    let linked = root.0.join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink(dir.join("SKILL.md"), linked.join("SKILL.md")).unwrap();
    let error = cache.load_local("linked", &linked).await.unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
    assert!(matches!(cache.load_local("../notes", &dir).await, Err(SkillError::Invalid { field: "name", .. })));
    assert!(cache.load_local("missing", &root.0.join("missing")).await.is_err());
}

fn ok(output: &ExecOutput) -> &str {
    assert_eq!(output.exit_code, Some(0), "{output:?}");
    &output.stdout
}

fn run(command: &str) -> ExecRequest {
    ExecRequest { command: command.to_owned(), timeout_seconds: Some(30), ..ExecRequest::default() }
}

#[tokio::test]
async fn a_mounted_skill_is_readable_but_not_writable() {
    let root = Root::new("mount");
    let repo = Repo::new(&root.0);
    let daemon = Daemon::start(&repo.served);
    let skill = SkillCache::new(root.0.join("cache")).fetch_git(&source("pdf", &daemon.url(), "main", Some("skills/pdf")), &[]).await.unwrap();
    let sandboxes = Bubblewrap::start(root.0.join("sandboxes"), Limits::default())
        .await
        .expect("bubblewrap works on this machine (apt-get install bubblewrap)");
    let id = sandboxes.provision("ses_skills", &teamster_sandbox::SandboxOwner::new("default", "user:test")).await.unwrap().sandbox_id;
    sandboxes.mount_skill(&id, "pdf", &skill.dir).await.unwrap();

    assert_eq!(ok(&sandboxes.exec(&id, run("cat /workspace/skills/pdf/SKILL.md")).await.unwrap()), PDF_SKILL_MD);
    assert_eq!(ok(&sandboxes.exec(&id, run("ls -A /workspace/skills/pdf")).await.unwrap()), "SKILL.md\nscripts\n");
    assert_eq!(ok(&sandboxes.exec(&id, run("/workspace/skills/pdf/scripts/extract.sh")).await.unwrap()), "extracted\n");
    for attempt in [
        "touch /workspace/skills/pdf/new",
        "echo changed >> /workspace/skills/pdf/SKILL.md",
        "rm -rf /workspace/skills/pdf/scripts",
        "chmod 777 /workspace/skills/pdf/SKILL.md",
        "mv /workspace/skills/pdf/SKILL.md /workspace/taken",
        "mkdir /workspace/skills/mine",
    ] {
        let output = sandboxes.exec(&id, run(attempt)).await.unwrap();
        assert_ne!(output.exit_code, Some(0), "{attempt}: {output:?}");
    }
    assert!(sandboxes.write_file(&id, "skills/pdf/SKILL.md", b"changed").await.is_err());
    assert_eq!(std::fs::read_to_string(skill.dir.join("SKILL.md")).unwrap(), PDF_SKILL_MD);
    assert_eq!(files(&skill.dir), ["SKILL.md", "scripts", "scripts/extract.sh"]);

    // A second skill, then the first name again for another directory: it replaces the first.
    let notes = root.0.join("notes");
    write(&notes.join("SKILL.md"), "---\ndescription: Notes.\n---\n");
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o755)).unwrap();
    sandboxes.mount_skill(&id, "notes", &notes).await.unwrap();
    assert_eq!(ok(&sandboxes.exec(&id, run("ls /workspace/skills")).await.unwrap()), "notes\npdf\n");
    sandboxes.mount_skill(&id, "pdf", &notes).await.unwrap();
    assert_eq!(ok(&sandboxes.exec(&id, run("cat /workspace/skills/pdf/SKILL.md")).await.unwrap()), "---\ndescription: Notes.\n---\n");

    // The mount points are the sandbox's own: a link the command plants in its workspace
    // leads nowhere on the host.
    let trap = root.0.join("trap");
    std::fs::create_dir_all(&trap).unwrap();
    std::fs::set_permissions(&trap, std::fs::Permissions::from_mode(0o777)).unwrap();
    let plant = format!("rm /workspace/skills && ln -s /oldroot{} /workspace/skills", trap.display());
    ok(&sandboxes.exec(&id, run(&plant)).await.unwrap());
    assert_eq!(ok(&sandboxes.exec(&id, run("cat /skills/notes/SKILL.md")).await.unwrap()), "---\ndescription: Notes.\n---\n");
    assert_eq!(std::fs::read_dir(&trap).unwrap().count(), 0, "nothing was made on the host");

    type Expected = fn(&SandboxError) -> bool;
    let refused: [(&str, &str, PathBuf, Expected); 4] = [
        (id.as_str(), "../x", skill.dir.clone(), |e| matches!(e, SandboxError::InvalidRequest(_))),
        (id.as_str(), "x", root.0.join("missing"), |e| matches!(e, SandboxError::InvalidPath { .. })),
        (id.as_str(), "x", skill.dir.join("SKILL.md"), |e| matches!(e, SandboxError::InvalidPath { .. })),
        ("sbx_00000000000000000000000000000000", "x", skill.dir.clone(), |e| matches!(e, SandboxError::NotFound(_))),
    ];
    for (sandbox, name, dir, expected) in refused {
        let error = sandboxes.mount_skill(sandbox, name, &dir).await.unwrap_err();
        assert!(expected(&error), "{name} {}: {error:?}", dir.display());
    }
}
