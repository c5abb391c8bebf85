//! [`Bubblewrap`]: the local provider. Each session's sandbox is a directory under the root,
//! `ROOT/sbx_<hash of the session id>/`, holding `workspace/` and `tmp/` (what commands see as
//! `/workspace` and `/tmp`), `session` (the session id), `last_used` (touched by every
//! command, for the idle sweep) and `skills/` (one file per mounted skill, named by the skill and
//! holding its directory on the host, so every replica sharing the root mounts the same).
//! What `workspace/` and `tmp/` hold is bounded by the disk quota (`quota.rs`). The root also
//! holds `.seccomp-<arch>.bpf`, the compiled seccomp filter of every command (`seccomp.rs`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::cgroup::{CgroupLimits, Cgroups, CommandCgroup};
use crate::gates::CommandGates;
use crate::command::{NetworkEntry, SandboxCommand};
use crate::network::Network;
use crate::output::{capture, capture_tapped};
use crate::relay::OutputRelay;
use teamster_tools::ProgressSink;
use crate::programs::{find_program, running_as_root};
use crate::provider::{
    ChangedFile, ExecOutput, ExecRequest, MAX_CHANGED_FILES, OpenedFile, OverQuota, Provisioned, SandboxProvider, WorkspaceState,
};
use crate::quota::{Ledger, Usage};
use crate::seccomp;
use crate::skill_mounts::{SKILLS_MOUNT_DIR, is_skill_name};
use crate::listing::{Listing, list_beneath};
use crate::workspace::{Area, Created, create_beneath, open_beneath, sandbox_dir, sandbox_path};
use crate::{CgroupPolicy, Limits, SandboxError, SandboxOwner};

/// The file under the root bound at `/etc/resolv.conf` in network sandboxes.
const RESOLV_CONF_FILE: &str = ".resolv.conf";
/// The longest command a call may give.
const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// The most variables a call may set, and the longest value.
const MAX_ENV_VARS: usize = 64;
const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
/// Users the sandboxes run as when the harness runs as root: one per sandbox, from this range.
const SANDBOX_UID_BASE: u32 = 200_000;
const SANDBOX_UID_COUNT: u32 = 100_000;
/// How long the output pipes may stay open after the sandbox's process has exited.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// The directory of a sandbox recording its mounted skills.
const SKILLS_RECORD: &str = "skills";
/// Where the workspace links to the skills, as a name in the workspace.
const SKILLS_LINK: &str = "skills";

/// The local sandbox provider on bubblewrap.
#[derive(Debug)]
pub struct Bubblewrap {
    root: PathBuf,
    limits: Limits,
    bwrap: PathBuf,
    prlimit: PathBuf,
    /// The compiled seccomp filter every command runs under (none on architectures without one).
    seccomp: Option<PathBuf>,
    /// `setpriv`, when the harness runs as root and each sandbox gets a user of its own.
    setpriv: Option<PathBuf>,
    /// The last measured usage of each sandbox, for the disk quota.
    ledger: Arc<Ledger>,
    /// Where commands' control groups are made, when the host lets this process make them.
    cgroups: Option<Cgroups>,
    /// Turns true once the sandboxes found under the root at start are measured (their usage
    /// counts toward their owners' quotas).
    learned: tokio::sync::watch::Receiver<bool>,
    /// Stops a sandbox's commands when its workspace is destroyed.
    gates: CommandGates,
}

impl Bubblewrap {
    /// A provider keeping its sandboxes under `root` (created if missing). Fails with
    /// [`SandboxError::Unavailable`], saying why, when `bwrap` is missing or cannot make a
    /// sandbox here (no user namespaces, a root other users cannot traverse).
    pub async fn start(root: impl Into<PathBuf>, limits: Limits) -> Result<Bubblewrap, SandboxError> {
        let root = root.into();
        // No descriptor the harness was started with may reach a sandbox.
        crate::inherited::close_on_exec().map_err(SandboxError::io("marking inherited descriptors close-on-exec"))?;
        let find = |name: &str| {
            find_program(name).ok_or_else(|| SandboxError::Unavailable(format!("`{name}` is not installed")))
        };
        let bwrap = find("bwrap")?;
        let prlimit = find("prlimit")?;
        let setpriv = if running_as_root() { Some(find("setpriv")?) } else { None };
        tokio::fs::create_dir_all(&root).await.map_err(SandboxError::io(format!("creating {}", root.display())))?;
        set_mode(&root, 0o711).await?;
        let root = tokio::fs::canonicalize(&root).await.map_err(SandboxError::io("resolving the sandbox root"))?;
        if setpriv.is_some()
            && let Some((dir, mode)) = untraversable(&root)?
        {
            return Err(SandboxError::Unavailable(format!(
                "the sandbox root {} is inside {}, which other users cannot enter (mode {mode:o}), and sandboxes run as \
                 users of their own; choose a sandbox root under a directory others may traverse, such as \
                 /var/lib/teamster/sandboxes",
                root.display(),
                dir.display(),
            )));
        }
        // As root, the harness enters every directory; otherwise it may have to open up one a
        // command shut, to measure it.
        let ledger = Arc::new(Ledger::new(&limits, setpriv.is_none()));
        let seccomp = match seccomp::native() {
            Some(arch) => Some(write_filter(&root, arch).await?),
            None => None,
        };
        let cgroups = start_cgroups(&limits)?;
        let (learning, learned) = tokio::sync::watch::channel(false);
        let provider = Bubblewrap { root, limits, bwrap, prlimit, seccomp, setpriv, ledger, cgroups, learned, gates: CommandGates::default() };
        // The probe runs under the filter too: where bwrap cannot apply it, sandboxes are unavailable.
        provider.check_it_works().await?;
        let (root, ledger) = (provider.root.clone(), provider.ledger.clone());
        tokio::spawn(async move {
            if let Err(error) = learn_sandboxes(&root, &ledger).await {
                tracing::warn!(%error, "the sandboxes under the root could not be listed; their usage counts once they are used");
            }
            let _ = learning.send(true);
        });
        Ok(provider)
    }

    /// Waits until the sandboxes found under the root at start are measured, so their usage
    /// counts toward their owners' quotas (a command may start before: it is checked by what
    /// is measured so far).
    pub async fn learned(&self) {
        let _ = self.learned.clone().wait_for(|learned| *learned).await;
    }

    /// The sandbox id of a session: the same on every replica sharing the root.
    pub fn sandbox_id(session_id: &str) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, session_id.as_bytes());
        let hex: String = digest.as_ref()[..16].iter().map(|byte| format!("{byte:02x}")).collect();
        format!("sbx_{hex}")
    }

    /// Removes the sandboxes no command has used for `idle`; returns how many.
    pub async fn sweep_idle(&self, idle: Duration) -> Result<usize, SandboxError> {
        let mut removed = 0;
        let mut entries =
            tokio::fs::read_dir(&self.root).await.map_err(SandboxError::io("listing the sandbox root"))?;
        while let Some(entry) = entries.next_entry().await.map_err(SandboxError::io("listing the sandbox root"))? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_sandbox_id(&name) {
                continue;
            }
            let used = tokio::fs::metadata(entry.path().join("last_used")).await.and_then(|meta| meta.modified());
            let age = used.ok().and_then(|used| SystemTime::now().duration_since(used).ok());
            if age.is_some_and(|age| age >= idle) {
                self.ledger.forget(&name);
                remove_tree(&entry.path()).await?;
                removed += 1;
            }
        }
        // Sandboxes other replicas made under a shared root count toward their owners' quotas here too.
        learn_sandboxes(&self.root, &self.ledger).await?;
        Ok(removed)
    }

    /// The directory of a sandbox id, if the id is well formed.
    fn dir(&self, sandbox_id: &str) -> Result<PathBuf, SandboxError> {
        if !is_sandbox_id(sandbox_id) {
            return Err(SandboxError::NotFound(sandbox_id.chars().take(64).collect()));
        }
        Ok(self.root.join(sandbox_id))
    }

    /// The mark a destroyed workspace leaves beside where its directory was, until the session's
    /// next provision (or its deletion) removes it.
    fn tombstone(&self, sandbox_id: &str) -> PathBuf {
        self.root.join(format!(".{sandbox_id}.destroyed"))
    }

    /// The directory of an existing sandbox.
    async fn existing(&self, sandbox_id: &str) -> Result<PathBuf, SandboxError> {
        let dir = self.dir(sandbox_id)?;
        match tokio::fs::metadata(dir.join(Area::Workspace.dir_name())).await {
            Ok(meta) if meta.is_dir() => Ok(dir),
            _ => Err(SandboxError::NotFound(sandbox_id.to_owned())),
        }
    }

    /// The user a sandbox runs as, when the harness runs as root.
    fn run_as(&self, sandbox_id: &str) -> Option<(&Path, u32)> {
        let setpriv = self.setpriv.as_deref()?;
        let hash = u32::from_str_radix(&sandbox_id[4..12], 16).unwrap_or(0);
        Some((setpriv, SANDBOX_UID_BASE + hash % SANDBOX_UID_COUNT))
    }

    /// Runs `true` in a scratch sandbox, so a provider that cannot work says so at start-up.
    /// The scratch sandbox is this process's own: replicas sharing the root may start at once.
    async fn check_it_works(&self) -> Result<(), SandboxError> {
        let started = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let scratch = format!("teamster-sandbox-probe-{}-{started}", std::process::id());
        let probe = self.provision(&scratch, &SandboxOwner::new("teamster", "probe")).await?;
        let request = ExecRequest { command: "true".to_owned(), timeout_seconds: Some(30), ..ExecRequest::default() };
        let outcome = self.exec(&probe.sandbox_id, request).await;
        let _ = self.destroy(&scratch).await;
        match outcome? {
            ExecOutput { exit_code: Some(0), .. } => Ok(()),
            failed => Err(SandboxError::Unavailable(format!(
                "bubblewrap cannot start a sandbox under {}: {}",
                self.root.display(),
                failed.stderr.trim()
            ))),
        }
    }

    /// Writes the seccomp filter again when it is gone from the root (removed by hand, or by a
    /// cleanup of shared storage): without it no command could start.
    async fn restore_filter(&self) -> Result<(), SandboxError> {
        let (Some(path), Some(arch)) = (&self.seccomp, seccomp::native()) else { return Ok(()) };
        if tokio::fs::try_exists(path).await.unwrap_or(true) {
            return Ok(());
        }
        tracing::warn!(path = %path.display(), "the seccomp filter was removed; writing it again");
        write_filter(&self.root, arch).await.map(drop)
    }

    /// Starts a sandboxed command with piped output, in a control group of its own when there
    /// are any (kept until the command's end: dropping it kills what is left in it).
    async fn spawn(
        &self,
        sandbox_id: &str,
        dir: &Path,
        run: Run<'_>,
        stdin: Stdio,
    ) -> Result<(tokio::process::Child, Option<CommandCgroup>), SandboxError> {
        self.restore_filter().await?;
        let cgroup = match &self.cgroups {
            Some(cgroups) => Some(cgroups.create().map_err(SandboxError::io("making the command's cgroup"))?),
            None => None,
        };
        let cgroup_procs = cgroup.as_ref().map(CommandCgroup::procs_files).unwrap_or_default();
        let Run { cwd, env, command, network, skills, over_quota } = run;
        let resolv_conf = self.root.join(RESOLV_CONF_FILE);
        let workspace = dir.join(Area::Workspace.dir_name());
        let tmp = dir.join(Area::Tmp.dir_name());
        let line = SandboxCommand {
            bwrap: &self.bwrap,
            prlimit: &self.prlimit,
            seccomp: self.seccomp.as_deref(),
            run_as: self.run_as(sandbox_id),
            workspace: &workspace,
            tmp: &tmp,
            skills,
            cwd,
            env,
            network: network.map(|network| NetworkEntry { enter: network.enter(), resolv_conf: &resolv_conf }),
            limits: &self.limits,
            cgroup_procs: &cgroup_procs,
            over_quota,
            command,
        };
        let (program, args) = line.argv();
        // The sandbox's init (bwrap) keeps the environment it was started with, readable in
        // `/proc/1/environ`: nothing of the harness's, not even its directory (which the shell
        // opening the seccomp filter exports as PWD).
        let child = Command::new(program)
            .args(args)
            .env_clear()
            .current_dir("/")
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(SandboxError::io("starting bwrap"))?;
        Ok((child, cgroup))
    }
}

#[async_trait]
impl SandboxProvider for Bubblewrap {
    async fn provision(&self, session_id: &str, owner: &SandboxOwner) -> Result<Provisioned, SandboxError> {
        owner.check()?;
        let sandbox_id = Bubblewrap::sandbox_id(session_id);
        let dir = self.dir(&sandbox_id)?;
        // `create_dir` is atomic, also on storage several replicas share: one of them creates it.
        let created = match tokio::fs::create_dir(&dir).await {
            Ok(()) => {
                let _ = tokio::fs::remove_file(self.tombstone(&sandbox_id)).await;
                true
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(error) => return Err(SandboxError::io(format!("creating {}", dir.display()))(error)),
        };
        if created || tokio::fs::metadata(dir.join(Area::Tmp.dir_name())).await.is_err() {
            set_mode(&dir, 0o711).await?;
            tokio::fs::write(dir.join("session"), session_id).await.map_err(SandboxError::io("recording the session"))?;
            for area in [Area::Workspace, Area::Tmp] {
                let path = dir.join(area.dir_name());
                match tokio::fs::create_dir(&path).await {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(error) => return Err(SandboxError::io(format!("creating {}", path.display()))(error)),
                }
                set_mode(&path, 0o700).await?;
                if let Some((_, uid)) = self.run_as(&sandbox_id) {
                    std::os::unix::fs::chown(&path, Some(uid), Some(uid))
                        .map_err(SandboxError::io("giving the sandbox's directories to its user"))?;
                }
            }
            touch(&dir.join("last_used")).await?;
        }
        // The session's creator owns its sandbox for good: a record is written once (also into a
        // sandbox made before owners were recorded), and then believed over the caller's.
        let owner = match SandboxOwner::recorded(&dir).await {
            Some(recorded) => recorded,
            None => {
                owner.record(&dir).await?;
                owner.clone()
            }
        };
        if created {
            self.ledger.record_empty(&sandbox_id, &owner);
        } else if !self.ledger.knows(&sandbox_id) {
            self.ledger.own(&sandbox_id, &owner);
            // A sandbox this process has not measured yet (made before it started, or by another
            // replica): measured now, and its first command waits for that.
            drop(self.ledger.measure(&sandbox_id, &dir, true));
        }
        Ok(Provisioned { sandbox_id, created })
    }

    async fn exec(&self, sandbox_id: &str, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.exec_streaming(sandbox_id, request, &teamster_tools::NoProgress).await
    }

    async fn exec_streaming(&self, sandbox_id: &str, request: ExecRequest, output: &dyn ProgressSink) -> Result<ExecOutput, SandboxError> {
        let pass = self.gates.enter(sandbox_id).await;
        let dir = self.existing(sandbox_id).await?;
        check_command(&request)?;
        // The start directory is made and entered inside the sandbox: any path is harmless there.
        let cwd = PathBuf::from(request.cwd.as_deref().map(str::trim).filter(|cwd| !cwd.is_empty()).unwrap_or("."));
        touch(&dir.join("last_used")).await?;
        // Files stamped after this mark changed while the command ran (or with it: commands in
        // one sandbox may overlap). The mark and the files are stamped by the kernel's coarse
        // file clock: a file written in the mark's tick would be missed, but starting the
        // sandbox takes longer than a tick, and a command's writes come after that.
        let since = tokio::fs::metadata(dir.join("last_used")).await.and_then(|meta| meta.modified()).unwrap_or_else(|_| SystemTime::now());
        let timeout = self.limits.timeout(request.timeout_seconds);
        let skills = mounted_skills(&dir).await;
        // The usage the command starts from: the last measurement, once those of the commands
        // before it landed. Over the quota, the command cannot write to files.
        let before = self.ledger.settled(sandbox_id).await;
        let over_before = before.and_then(|usage| self.ledger.over(sandbox_id, &usage, &Usage::EMPTY));
        // A network of its own, set up before the command starts and ended with it (this value
        // is dropped when the command ends, times out, or its call is cancelled).
        let network = match request.network {
            // Boxed: setting a namespace up is a large future, kept off the caller's stack.
            true => Some(Box::pin(self.network(sandbox_id)).await?),
            false => None,
        };
        let run = Run {
            cwd: &cwd,
            env: &request.env,
            command: &request.command,
            network: network.as_ref(),
            skills: &skills,
            over_quota: over_before.is_some(),
        };
        // However the command ends (also dropped, with a cancelled turn), the sandbox is measured
        // afterwards, in the background.
        let _measure_after = self.ledger.measure_after(sandbox_id, &dir);
        let started = Instant::now();
        let (mut child, cgroup) = self.spawn(sandbox_id, &dir, run, Stdio::null()).await?;
        let limit = self.limits.max_output_bytes;
        // What the command prints goes to `output` while it runs, as much as its result keeps.
        let (mut relay, out_tap, err_tap) = OutputRelay::new(output);
        let stdout = tokio::spawn(capture_tapped(child.stdout.take().expect("stdout is piped"), limit, Some(out_tap)));
        let stderr = tokio::spawn(capture_tapped(child.stderr.take().expect("stderr is piped"), limit, Some(err_tap)));
        let ended = relay
            .during(async {
                tokio::select! {
                    biased;
                    status = child.wait() => Ended::Exited(status),
                    () = tokio::time::sleep(timeout) => Ended::TimedOut,
                    over = self.ledger.watch(sandbox_id, &dir, before) => Ended::OverQuota(over),
                    () = pass.closing() => Ended::Destroyed,
                }
            })
            .await;
        let (status, timed_out, outgrown) = match ended {
            Ended::Exited(status) => (status.map_err(SandboxError::io("waiting for the command"))?, false, None),
            Ended::TimedOut | Ended::OverQuota(_) | Ended::Destroyed => {
                // Killing bwrap ends the sandbox's PID namespace, and every process in it.
                let _ = child.start_kill();
                let status = child.wait().await.map_err(SandboxError::io("waiting for the killed command"))?;
                match ended {
                    Ended::OverQuota(over) => (status, false, Some(over)),
                    Ended::Destroyed => {
                        if let Some(cgroup) = &cgroup {
                            cgroup.kill_all();
                        }
                        return Err(SandboxError::Destroyed(sandbox_id.to_owned()));
                    }
                    _ => (status, true, None),
                }
            }
        };
        let duration = started.elapsed();
        // Whatever the command left running (or, with no PID namespace to end, escaped) goes.
        if let Some(cgroup) = &cgroup {
            cgroup.kill_all();
        }
        let out_of_memory = cgroup.as_ref().is_some_and(CommandCgroup::ran_out_of_memory);
        let over_quota = outgrown.or(over_before);
        let drained = |task: tokio::task::JoinHandle<crate::output::Captured>| async move {
            match tokio::time::timeout(DRAIN_GRACE, task).await {
                Ok(Ok(captured)) => captured,
                _ => crate::output::Captured::default(),
            }
        };
        let (stdout, stderr) = (drained(stdout).await, drained(stderr).await);
        relay.finish();
        let files = self.ledger.changed_files(&dir, since, MAX_CHANGED_FILES).await;
        let inside = Area::Workspace.inside();
        let files = files
            .into_iter()
            .map(|(relative, size)| ChangedFile { path: format!("{inside}/{}", relative.to_string_lossy()), size })
            .collect();
        use std::os::unix::process::ExitStatusExt;
        Ok(ExecOutput {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout: stdout.text(),
            stderr: match out_of_memory {
                // Said where the model reads it: a process killed for no visible reason invites a retry.
                true => format!(
                    "{}\n[a process was killed: the command's processes together used more than {} MiB of memory]\n",
                    stderr.text().trim_end(),
                    crate::mib(self.limits.max_command_memory_bytes)
                ),
                false => stderr.text(),
            },
            stdout_dropped: stdout.dropped,
            stderr_dropped: stderr.dropped,
            duration,
            over_quota,
            files,
        })
    }

    async fn open_file(&self, sandbox_id: &str, path: &str) -> Result<OpenedFile, SandboxError> {
        let named = sandbox_path(path)?;
        let area = self.existing(sandbox_id).await?.join(named.area.dir_name());
        // Resolved beneath the area by the kernel: a link to the host is refused unfollowed.
        let file = open_beneath(&area, &named.relative, path)?;
        let meta = file.metadata().map_err(SandboxError::io("reading a file's metadata"))?;
        if !meta.is_file() {
            return Err(SandboxError::NoSuchFile(path.to_owned()));
        }
        let limit = self.limits.max_transfer_bytes;
        if meta.len() > limit {
            return Err(SandboxError::TooLarge { what: format!("file {path}"), limit });
        }
        // A command may write to the file meanwhile: no more than its length now is read.
        Ok(OpenedFile { len: meta.len(), reader: Box::pin(tokio::fs::File::from_std(file).take(meta.len())) })
    }

    async fn write_file(&self, sandbox_id: &str, path: &str, contents: &[u8]) -> Result<(), SandboxError> {
        let _pass = self.gates.enter(sandbox_id).await;
        let dir = self.existing(sandbox_id).await?;
        let named = sandbox_path(path)?;
        let limit = self.limits.max_transfer_bytes;
        if contents.len() as u64 > limit {
            return Err(SandboxError::TooLarge { what: format!("file {path}"), limit });
        }
        self.check_room(sandbox_id, &dir, path, contents.len() as u64).await?;
        let _measure_after = self.ledger.measure_after(sandbox_id, &dir);
        // Written by the harness beneath the area, made the sandbox user's: no shell starts.
        let owner = self.run_as(sandbox_id).map(|(_, uid)| uid);
        if let Created::File(file) = create_beneath(&dir.join(named.area.dir_name()), &named.relative, path, owner)? {
            let mut file = tokio::fs::File::from_std(file);
            let written = async {
                file.write_all(contents).await?;
                file.flush().await
            };
            return written.await.map_err(SandboxError::io(format!("writing {path}")));
        }
        // Without `openat2`, the file is written from inside the sandbox, as its user: a
        // symbolic link in the workspace resolves in the sandbox's view, never the host's.
        let env = BTreeMap::from([("TEAMSTER_TARGET".to_owned(), named.inside().to_string_lossy().into_owned())]);
        let command = r#"mkdir -p -- "$(dirname -- "$TEAMSTER_TARGET")" && cat > "$TEAMSTER_TARGET""#;
        // With the skills mounted, so writing into one fails rather than vanishing.
        let skills = mounted_skills(&dir).await;
        let run = Run { cwd: Path::new("."), env: &env, command, network: None, skills: &skills, over_quota: false };
        let (mut child, _cgroup) = self.spawn(sandbox_id, &dir, run, Stdio::piped()).await?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stderr = tokio::spawn(capture(child.stderr.take().expect("stderr is piped"), 4096));
        let written = async {
            stdin.write_all(contents).await?;
            stdin.shutdown().await?;
            drop(stdin);
            child.wait().await
        };
        let status = tokio::time::timeout(self.limits.default_timeout, written)
            .await
            .map_err(|_| SandboxError::io(format!("writing {path}"))(std::io::ErrorKind::TimedOut.into()))?
            .map_err(SandboxError::io(format!("writing {path}")))?;
        if status.success() {
            return Ok(());
        }
        let stderr = stderr.await.map(|captured| captured.text()).unwrap_or_default();
        Err(SandboxError::InvalidPath { path: path.to_owned(), reason: format!("it cannot be written: {}", stderr.trim()) })
    }

    async fn list_files(&self, sandbox_id: &str, path: &str, depth: u32, max_entries: usize) -> Result<Listing, SandboxError> {
        let named = sandbox_dir(path)?;
        let area = self.existing(sandbox_id).await?.join(named.area.dir_name());
        let area = tokio::fs::canonicalize(&area).await.map_err(SandboxError::io("resolving the workspace"))?;
        let shown = path.to_owned();
        let list = move || list_beneath(&area, Path::new(named.area.inside()), &named.relative, depth, max_entries, &shown);
        tokio::task::spawn_blocking(list).await.map_err(|error| SandboxError::io("listing files")(std::io::Error::other(error)))?
    }

    async fn destroy(&self, session_id: &str) -> Result<(), SandboxError> {
        let sandbox_id = Bubblewrap::sandbox_id(session_id);
        let dir = self.dir(&sandbox_id)?;
        let shut = self.gates.close(&sandbox_id).await;
        self.ledger.forget(&sandbox_id);
        let _ = tokio::fs::remove_file(self.tombstone(&sandbox_id)).await;
        let removed = match tokio::fs::metadata(&dir).await {
            Ok(_) => remove_tree(&dir).await,
            Err(_) => Ok(()),
        };
        drop(shut);
        self.gates.forget(&sandbox_id);
        removed
    }

    fn name(&self) -> &'static str {
        "bubblewrap"
    }

    async fn workspace(&self, session_id: &str) -> Result<WorkspaceState, SandboxError> {
        let sandbox_id = Bubblewrap::sandbox_id(session_id);
        if self.existing(&sandbox_id).await.is_ok() {
            // As last measured: a report never waits for a measurement under way.
            let used = self.ledger.last(&sandbox_id).filter(|usage| usage.complete).map(|usage| (usage.bytes, usage.files));
            return Ok(WorkspaceState::Ready { sandbox_id, used, quota_bytes: self.limits.max_workspace_bytes });
        }
        match tokio::fs::metadata(self.tombstone(&sandbox_id)).await {
            Ok(_) => Ok(WorkspaceState::Destroyed),
            Err(_) => Ok(WorkspaceState::Absent),
        }
    }

    async fn reset(&self, session_id: &str) -> Result<(), SandboxError> {
        let sandbox_id = Bubblewrap::sandbox_id(session_id);
        let dir = self.dir(&sandbox_id)?;
        // Its commands are killed and waited for; none starts until the files are gone.
        let _shut = self.gates.close(&sandbox_id).await;
        if tokio::fs::metadata(&dir).await.is_err() {
            return Ok(());
        }
        tokio::fs::write(self.tombstone(&sandbox_id), session_id).await.map_err(SandboxError::io("marking the workspace destroyed"))?;
        self.ledger.forget(&sandbox_id);
        remove_tree(&dir).await
    }

    /// Records the skill in the sandbox's `skills/` (written aside and renamed, so a concurrent
    /// mount or command never reads half a record); every later command binds it read-only at
    /// `/skills/<name>`, and `/workspace/skills` is made a link there when the workspace has no
    /// `skills` of its own.
    async fn mount_skill(&self, sandbox_id: &str, name: &str, dir: &Path) -> Result<(), SandboxError> {
        let sandbox = self.existing(sandbox_id).await?;
        if !is_skill_name(name) {
            return Err(SandboxError::InvalidRequest(format!(
                "{:?} is not a skill name: 1 to 64 letters, digits, '.', '_' and '-', not '.' or '..'",
                name.chars().take(80).collect::<String>()
            )));
        }
        let invalid = |reason: String| SandboxError::InvalidPath { path: dir.display().to_string(), reason };
        let real = tokio::fs::canonicalize(dir).await.map_err(|error| invalid(format!("the skill directory cannot be opened: {error}")))?;
        let meta = tokio::fs::metadata(&real).await.map_err(|error| invalid(format!("the skill directory cannot be read: {error}")))?;
        if !meta.is_dir() {
            return Err(invalid("it is not a directory".to_owned()));
        }
        if self.setpriv.is_some() {
            use std::os::unix::fs::PermissionsExt;
            if let Some((blocking, mode)) = untraversable(&real)? {
                return Err(invalid(format!(
                    "sandboxes run as users of their own, who cannot enter {} (mode {mode:o}); keep skills under a \
                     directory others may traverse",
                    blocking.display()
                )));
            }
            if meta.permissions().mode() & 0o005 != 0o005 {
                return Err(invalid(format!(
                    "sandboxes run as users of their own, who cannot read it (mode {:o})",
                    meta.permissions().mode() & 0o777
                )));
            }
        }
        let record = sandbox.join(SKILLS_RECORD);
        match tokio::fs::create_dir(&record).await {
            Ok(()) => set_mode(&record, 0o700).await?,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(SandboxError::io(format!("creating {}", record.display()))(error)),
        }
        // `+` is in no skill name: a record being written is never taken for a skill.
        let started = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let aside = record.join(format!("+{name}+{}+{started}", std::process::id()));
        tokio::fs::write(&aside, real.as_os_str().as_bytes()).await.map_err(SandboxError::io("recording the skill"))?;
        if let Err(error) = tokio::fs::rename(&aside, record.join(name)).await {
            let _ = tokio::fs::remove_file(&aside).await;
            return Err(SandboxError::io("recording the skill")(error));
        }
        self.link_skills(sandbox_id, &sandbox.join(Area::Workspace.dir_name()).join(SKILLS_LINK)).await
    }
}

impl Bubblewrap {
    /// Refuses writing a file of `bytes` that would take the sandbox past its disk quota (by
    /// its last measurement, or one made now when there is none).
    async fn check_room(&self, sandbox_id: &str, dir: &Path, path: &str, bytes: u64) -> Result<(), SandboxError> {
        let usage = match self.ledger.settled(sandbox_id).await {
            Some(usage) => usage,
            None => match self.ledger.measure(sandbox_id, dir, false).await {
                Ok(Some(usage)) => usage,
                _ => return Ok(()),
            },
        };
        let file = Usage { bytes, files: 1, complete: true };
        match self.ledger.over(sandbox_id, &usage, &file) {
            None => Ok(()),
            Some(over) => Err(SandboxError::QuotaExceeded { path: path.chars().take(200).collect(), bytes, over }),
        }
    }

    /// Makes `/workspace/skills` a symbolic link to where the skills are mounted, unless the
    /// workspace has something of that name (a command removed the link, or made its own).
    async fn link_skills(&self, sandbox_id: &str, link: &Path) -> Result<(), SandboxError> {
        if tokio::fs::symlink_metadata(link).await.is_ok() {
            return Ok(());
        }
        match tokio::fs::symlink(SKILLS_MOUNT_DIR, link).await {
            Ok(()) => {}
            // A command made one in between: the workspace is the sandbox's.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
            Err(error) => return Err(SandboxError::io("linking /workspace/skills")(error)),
        }
        if let Some((_, uid)) = self.run_as(sandbox_id) {
            std::os::unix::fs::lchown(link, Some(uid), Some(uid)).map_err(SandboxError::io("giving /workspace/skills to the sandbox's user"))?;
        }
        Ok(())
    }
}

impl Bubblewrap {
    /// A network namespace for one command of `sandbox_id`, or why there can be none here.
    async fn network(&self, sandbox_id: &str) -> Result<Network, SandboxError> {
        let tools = crate::network::tools()
            .map_err(|reason| SandboxError::Unavailable(format!("commands cannot be given a network here: {reason}")))?;
        crate::network::write_resolv_conf(&self.root.join(RESOLV_CONF_FILE)).await?;
        Network::start(tools, self.run_as(sandbox_id)).await
    }
}

/// Measures, one after another, the sandboxes under `root` the ledger does not know yet (made
/// before this process started, or by another replica), counting each toward the owner its
/// directory records.
async fn learn_sandboxes(root: &Path, ledger: &Arc<Ledger>) -> Result<(), SandboxError> {
    let mut entries = tokio::fs::read_dir(root).await.map_err(SandboxError::io("listing the sandbox root"))?;
    while let Some(entry) = entries.next_entry().await.map_err(SandboxError::io("listing the sandbox root"))? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_sandbox_id(&name) || ledger.knows(&name) {
            continue;
        }
        let dir = entry.path();
        let Some(owner) = SandboxOwner::recorded(&dir).await else { continue };
        if tokio::fs::metadata(dir.join(Area::Tmp.dir_name())).await.is_err() {
            continue;
        }
        ledger.own(&name, &owner);
        // A failed walk leaves the sandbox unmeasured: its next command measures it.
        let _ = ledger.measure(&name, &dir, false).await;
    }
    Ok(())
}

/// The skills recorded for a sandbox: each name and its directory on the host, by name.
async fn mounted_skills(sandbox: &Path) -> Vec<(String, PathBuf)> {
    let mut skills = BTreeMap::new();
    let Ok(mut entries) = tokio::fs::read_dir(sandbox.join(SKILLS_RECORD)).await else { return Vec::new() };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let Some(name) = entry.file_name().to_str().filter(|name| is_skill_name(name)).map(str::to_owned) else { continue };
        match tokio::fs::read(entry.path()).await {
            Ok(bytes) if bytes.starts_with(b"/") => {
                skills.insert(name, PathBuf::from(OsString::from_vec(bytes)));
            }
            _ => tracing::warn!(skill = %name, "unreadable skill record; the skill is not mounted"),
        }
    }
    skills.into_iter().collect()
}

/// What to run in a sandbox.
struct Run<'a> {
    cwd: &'a Path,
    env: &'a BTreeMap<String, String>,
    command: &'a str,
    /// The command's network namespace, when it may use the network.
    network: Option<&'a Network>,
    /// The skills to mount: each name and its directory on the host.
    skills: &'a [(String, PathBuf)],
    /// Whether the sandbox is over its disk quota (the command cannot write to files).
    over_quota: bool,
}

/// How a command's run ended.
enum Ended {
    Exited(std::io::Result<std::process::ExitStatus>),
    TimedOut,
    /// The watchdog found the sandbox grown past its quota, or its owner's, as measured.
    OverQuota(OverQuota),
    /// The workspace is being destroyed.
    Destroyed,
}

/// Refuses malformed commands and environments.
fn check_command(request: &ExecRequest) -> Result<(), SandboxError> {
    let invalid = |message: String| Err(SandboxError::InvalidRequest(message));
    if request.command.trim().is_empty() {
        return invalid("the command is empty".to_owned());
    }
    if request.command.len() > MAX_COMMAND_BYTES {
        return invalid(format!("the command is longer than {MAX_COMMAND_BYTES} bytes"));
    }
    if request.command.contains('\0') {
        return invalid("the command holds a NUL byte".to_owned());
    }
    if request.cwd.as_ref().is_some_and(|cwd| cwd.contains('\0') || cwd.len() > 4096) {
        return invalid("the working directory holds a NUL byte or is too long".to_owned());
    }
    if request.env.len() > MAX_ENV_VARS {
        return invalid(format!("more than {MAX_ENV_VARS} environment variables"));
    }
    for (name, value) in &request.env {
        let mut chars = name.chars();
        let well_formed = chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !well_formed || name.len() > 256 {
            return invalid(format!("{:?} is not a valid environment variable name", name.chars().take(64).collect::<String>()));
        }
        if value.contains('\0') || value.len() > MAX_ENV_VALUE_BYTES {
            return invalid(format!("the value of {name} holds a NUL byte or is over {MAX_ENV_VALUE_BYTES} bytes"));
        }
    }
    Ok(())
}

/// As root, sandboxes run as users of their own, who must be able to enter every directory
/// above their workspace, and above each skill mounted into them: the first directory above
/// `path` that others cannot enter, and its mode, if there is one.
fn untraversable(path: &Path) -> Result<Option<(PathBuf, u32)>, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    for dir in path.ancestors().skip(1) {
        let mode = std::fs::metadata(dir).map_err(SandboxError::io(format!("reading {}", dir.display())))?.permissions().mode();
        if mode & 0o001 == 0 {
            return Ok(Some((dir.to_path_buf(), mode & 0o777)));
        }
    }
    Ok(None)
}

fn is_sandbox_id(name: &str) -> bool {
    name.len() == 36 && name.starts_with("sbx_") && name[4..].bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// The control groups of commands, as `limits.cgroups` asks and the host allows; what is in
/// force is logged.
fn start_cgroups(limits: &Limits) -> Result<Option<Cgroups>, SandboxError> {
    if limits.cgroups == CgroupPolicy::Off {
        tracing::warn!("sandbox commands run without control groups (turned off): memory is bounded per process only");
        return Ok(None);
    }
    let wanted = CgroupLimits {
        memory_bytes: limits.max_command_memory_bytes,
        pids: limits.max_processes,
        cpu_millis: limits.max_command_cpu_millis,
    };
    match Cgroups::detect(wanted) {
        Ok(cgroups) => {
            tracing::info!(cgroups = %cgroups.describe(), "sandbox commands run in control groups of their own");
            Ok(Some(cgroups))
        }
        Err(reason) if limits.cgroups == CgroupPolicy::Required => {
            Err(SandboxError::Unavailable(format!("sandbox commands must run in control groups of their own, and cannot: {reason}")))
        }
        Err(reason) => {
            tracing::warn!(
                %reason,
                "sandbox commands run without control groups: memory is bounded per process (RLIMIT_AS), processes per user \
                 (RLIMIT_NPROC), CPU time by the timeout alone"
            );
            Ok(None)
        }
    }
}


async fn set_mode(path: &Path, mode: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(SandboxError::io(format!("setting the mode of {}", path.display())))
}

/// Writes the compiled seccomp filter of `arch` under the root, readable by every sandbox's user
/// (the shell starting `bwrap` opens it as that user), and answers its path. Written to a file of
/// this process's own and renamed into place: replicas sharing the root may start at once, and
/// a command starting meanwhile reads a whole filter.
async fn write_filter(root: &Path, arch: &seccomp::Arch) -> Result<PathBuf, SandboxError> {
    let path = root.join(format!(".seccomp-{}.bpf", arch.name));
    let started = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let temporary = root.join(format!(".seccomp-{}.bpf.{}-{started}.tmp", arch.name, std::process::id()));
    let written = async {
        tokio::fs::write(&temporary, seccomp::compiled(arch)).await.map_err(SandboxError::io("writing the seccomp filter"))?;
        set_mode(&temporary, 0o644).await?;
        tokio::fs::rename(&temporary, &path).await.map_err(SandboxError::io("writing the seccomp filter"))
    };
    if let Err(error) = written.await {
        let _ = tokio::fs::remove_file(&temporary).await;
        return Err(error);
    }
    Ok(path)
}

/// Marks a sandbox as used now.
async fn touch(path: &Path) -> Result<(), SandboxError> {
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    tokio::fs::write(path, now.to_string()).await.map_err(SandboxError::io("marking the sandbox used"))
}

/// Removes a sandbox's directory, also when a command left directories without permissions.
async fn remove_tree(dir: &Path) -> Result<(), SandboxError> {
    if tokio::fs::remove_dir_all(dir).await.is_ok() {
        return Ok(());
    }
    let dir_owned = dir.to_path_buf();
    tokio::task::spawn_blocking(move || open_up(&dir_owned)).await.ok();
    tokio::fs::remove_dir_all(dir).await.map_err(SandboxError::io(format!("removing {}", dir.display())))
}

/// Gives the owner full access to every directory under `dir` (symbolic links not followed).
fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            open_up(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_ids_are_stable_and_well_formed() {
        let id = Bubblewrap::sandbox_id("ses_123");
        assert_eq!(id, Bubblewrap::sandbox_id("ses_123"));
        assert_ne!(id, Bubblewrap::sandbox_id("ses_124"));
        assert!(is_sandbox_id(&id), "{id}");
        assert!(!is_sandbox_id("sbx_../../etc") && !is_sandbox_id("ses_123"));
    }

    #[test]
    fn malformed_commands_are_refused() {
        let request = |command: &str, env: &[(&str, &str)]| ExecRequest {
            command: command.to_owned(),
            env: env.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect(),
            ..ExecRequest::default()
        };
        assert!(check_command(&request("ls", &[("LC_ALL", "C")])).is_ok());
        for bad in [request("  ", &[]), request("a\0b", &[]), request("ls", &[("1X", "")]), request("ls", &[("A-B", "")])] {
            assert!(matches!(check_command(&bad), Err(SandboxError::InvalidRequest(_))), "{bad:?}");
        }
    }
}
