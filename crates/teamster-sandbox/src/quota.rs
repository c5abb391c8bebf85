//! The disk quota of a sandbox: how much its files take (a walk of its workspace and `/tmp` on
//! the host), and the [`Ledger`] remembering each sandbox's last measurement.
//!
//! Nothing here sits on a command's path: a command starts from the remembered usage (over the
//! quota, it cannot write to files), a watchdog measures while it runs (first after
//! [`WATCH_EVERY`], so short commands never pay for it) and kills it when the sandbox grew past
//! the quota, and a measurement starts in the background once it ends; the next command waits
//! for that one only when it is still under way.
//!
//! `fallocate` with `FALLOC_FL_KEEP_SIZE` would allocate blocks that `RLIMIT_FSIZE` does not
//! count: the seccomp filter of every command (`seccomp.rs`) makes `fallocate` fail, and programs
//! fall back to writing.
//!
//! What this does not bound: over the quota, a command can still make empty files and
//! directories until the watchdog's next look; a command renaming directories as a walk passes
//! can hide them from it until the command ends; commands started at once in one sandbox all
//! start from the same measurement (and a running command is killed when the sandbox grows past
//! the quota, also when another command grew it).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{OpenOptions, Permissions, ReadDir};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::owners::{QuotaScope, SandboxOwner};
use crate::workspace::Area;
use crate::{Limits, OverQuota};

/// How often a running command's sandbox is measured.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(250);
/// The longest a command waits for the measurements of the commands before it to land.
const SETTLE_WAIT: Duration = Duration::from_secs(5);
/// The most sandboxes whose usage is remembered; past it, the least lately used is forgotten.
const MAX_REMEMBERED: usize = 65_536;
/// Linux's `O_PATH` (the same value on x86_64, aarch64 and riscv64): a handle naming a
/// directory, which needs no permission on the directory itself.
const O_PATH: i32 = 0o10_000_000;

/// How much a sandbox's files take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Allocated bytes (`st_blocks * 512`) of every entry and of the areas themselves.
    pub(crate) bytes: u64,
    /// Entries of every kind: files, directories, symbolic links and the rest.
    pub(crate) files: u64,
    /// Whether the walk measured everything. A part it could not (a path too long to open, a
    /// directory it cannot enter, more entries than it counts) makes the sandbox over any quota.
    pub(crate) complete: bool,
}

impl Usage {
    /// A sandbox with nothing in it.
    pub(crate) const EMPTY: Usage = Usage { bytes: 0, files: 0, complete: true };
}

/// The bounds of one sandbox's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quota {
    pub(crate) bytes: u64,
    pub(crate) files: u64,
}

impl Quota {
    pub(crate) fn of(limits: &Limits) -> Quota {
        Quota { bytes: limits.max_workspace_bytes, files: limits.max_workspace_files }
    }

    /// Whether `usage`, a total of several sandboxes, is over the quota (a total has no
    /// incomplete walk: each sandbox's own quota catches those).
    fn exceeded_in_total(&self, usage: &Usage) -> bool {
        usage.bytes > self.bytes || usage.files > self.files
    }

    /// Whether `usage` is over the quota.
    pub(crate) fn exceeded_by(&self, usage: &Usage) -> bool {
        !usage.complete || usage.bytes > self.bytes || usage.files > self.files
    }

    /// Whether `now` is over the quota and grew, since `before`, in what is over: a command that
    /// only deletes is never taken for one filling the sandbox.
    pub(crate) fn outgrown(&self, before: &Usage, now: &Usage) -> bool {
        (now.bytes > self.bytes && now.bytes > before.bytes)
            || (now.files > self.files && now.files > before.files)
            || (!now.complete && before.complete)
    }

    /// What a command's result says of `scope`'s usage over the quota.
    pub(crate) fn report(&self, scope: QuotaScope, usage: &Usage, killed: bool) -> OverQuota {
        OverQuota { killed, scope, used_bytes: usage.bytes, used_files: usage.files, max_bytes: self.bytes, max_files: self.files }
    }

    /// The most entries a walk counts before it gives up: a sandbox only holds more by
    /// escaping the quota, and the walk's time stays bounded.
    fn max_entries(&self) -> u64 {
        self.files.saturating_mul(2).saturating_add(10_000)
    }
}

/// Measures the usage of `areas` (directories on the host, as canonical paths; all must exist).
/// Symbolic links are never followed: each directory is entered through a handle checked to
/// be the directory at its path, so one a command swaps in for a directory as the walk passes
/// leads nowhere. With `open_up` (a harness that is not root), a directory its owner cannot
/// read or enter, and that belongs to the owner of the area, is given `u+rwx` to be entered.
pub(crate) fn measure(areas: &[PathBuf], open_up: bool, max_entries: u64) -> std::io::Result<Usage> {
    let mut walk = Walk { usage: Usage::EMPTY, open_up, owner: 0, max_entries, stopped: false, changed: None };
    for area in areas {
        if walk.stopped {
            break;
        }
        walk.owner = std::fs::symlink_metadata(area)?.uid();
        walk.area(area)?;
    }
    Ok(walk.usage)
}

/// The regular files of `area` (a canonical directory on the host) modified after `since`,
/// by path relative to it, at most `max_listed` of them (the first the walk meets),
/// walked as safely as [`measure`] walks; nothing when the area is gone.
pub(crate) fn changed_since(area: &Path, since: SystemTime, open_up: bool, max_entries: u64, max_listed: usize) -> Vec<(PathBuf, u64)> {
    let changed = Changed { since, area: area.to_path_buf(), files: Vec::new(), max_listed };
    let mut walk = Walk { usage: Usage::EMPTY, open_up, owner: 0, max_entries, stopped: false, changed: Some(changed) };
    let Ok(meta) = std::fs::symlink_metadata(area) else { return Vec::new() };
    walk.owner = meta.uid();
    let _ = walk.area(area);
    walk.changed.map(|changed| changed.files).unwrap_or_default()
}

/// What a walk looking for changed files has found.
struct Changed {
    since: SystemTime,
    area: PathBuf,
    files: Vec<(PathBuf, u64)>,
    max_listed: usize,
}

/// A walk in progress.
struct Walk {
    usage: Usage,
    open_up: bool,
    /// The owner of the area being walked: the only user whose directories are opened up.
    owner: u32,
    max_entries: u64,
    /// Whether it counted `max_entries` and stopped.
    stopped: bool,
    /// Set when the walk also lists the files changed since a moment.
    changed: Option<Changed>,
}

/// What came of entering a directory.
enum Entered {
    /// Its entries, and its own metadata.
    Listed(ReadDir, std::fs::Metadata),
    /// It is no longer there (removed, renamed, replaced) and its entry was counted already.
    Vanished,
    /// It is there and cannot be listed.
    Unmeasured,
}

impl Walk {
    fn area(&mut self, area: &Path) -> std::io::Result<()> {
        let mut pending: Vec<(Rc<PathBuf>, OsString)> = Vec::new();
        match self.enter(area) {
            Entered::Listed(entries, meta) => {
                self.usage.bytes = self.usage.bytes.saturating_add(meta.blocks().saturating_mul(512));
                self.list(Rc::new(area.to_path_buf()), entries, &mut pending);
            }
            Entered::Vanished => return Err(std::io::ErrorKind::NotFound.into()),
            Entered::Unmeasured => self.usage.complete = false,
        }
        while let Some((parent, name)) = pending.pop() {
            if self.stopped {
                break;
            }
            let path = parent.join(name);
            match self.enter(&path) {
                Entered::Listed(entries, _) => self.list(Rc::new(path), entries, &mut pending),
                Entered::Vanished => {}
                Entered::Unmeasured => self.usage.complete = false,
            }
        }
        Ok(())
    }

    /// Opens the directory at `path` without following a symbolic link anywhere on the way.
    fn enter(&self, path: &Path) -> Entered {
        let handle = match OpenOptions::new().read(true).custom_flags(O_PATH).open(path) {
            Ok(handle) => handle,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Entered::Vanished,
            Err(_) => return Entered::Unmeasured,
        };
        let held = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
        // A canonical path resolves to itself only: a link anywhere on the way resolves elsewhere.
        match std::fs::read_link(&held) {
            Ok(real) if real == path => {}
            Ok(_) => return Entered::Vanished,
            Err(_) => return Entered::Unmeasured,
        }
        let Ok(meta) = handle.metadata() else { return Entered::Unmeasured };
        if !meta.is_dir() {
            return Entered::Vanished;
        }
        if self.open_up && meta.uid() == self.owner && meta.mode() & 0o500 != 0o500 {
            // Through the handle: the directory checked above, whatever the path names now.
            let _ = std::fs::set_permissions(&held, Permissions::from_mode((meta.mode() & 0o7777) | 0o700));
        }
        match std::fs::read_dir(&held) {
            Ok(entries) => Entered::Listed(entries, meta),
            Err(_) => Entered::Unmeasured,
        }
    }

    /// Counts the entries of a directory, and queues its subdirectories.
    fn list(&mut self, dir: Rc<PathBuf>, entries: ReadDir, pending: &mut Vec<(Rc<PathBuf>, OsString)>) {
        for entry in entries {
            let Ok(entry) = entry else {
                self.usage.complete = false;
                return;
            };
            // `fstatat` in the listed directory, not following a link.
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => {
                    self.usage.complete = false;
                    continue;
                }
            };
            self.usage.bytes = self.usage.bytes.saturating_add(meta.blocks().saturating_mul(512));
            self.usage.files += 1;
            if self.usage.files > self.max_entries {
                self.usage.complete = false;
                self.stopped = true;
                return;
            }
            if meta.is_dir() {
                pending.push((dir.clone(), entry.file_name()));
            } else if let Some(changed) = self.changed.as_mut()
                && meta.is_file()
                && changed.files.len() < changed.max_listed
                && meta.modified().is_ok_and(|modified| modified > changed.since)
                && let Ok(relative) = dir.join(entry.file_name()).strip_prefix(&changed.area).map(Path::to_path_buf)
            {
                changed.files.push((relative, meta.len()));
            }
        }
    }
}

/// The bounds of what one subject's and one tenant's sandboxes hold together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OwnerQuotas {
    pub(crate) subject: Quota,
    pub(crate) tenant: Quota,
}

/// The usage of every known sandbox, summed per subject and per tenant.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    subjects: HashMap<(String, String), Usage>,
    tenants: HashMap<String, Usage>,
}

impl Totals {
    /// Counts a sandbox's usage for its owner.
    pub(crate) fn add(&mut self, owner: &SandboxOwner, usage: &Usage) {
        let subject = self.subjects.entry((owner.tenant.clone(), owner.subject.clone())).or_insert(Usage::EMPTY);
        *subject = plus(subject, usage);
        let tenant = self.tenants.entry(owner.tenant.clone()).or_insert(Usage::EMPTY);
        *tenant = plus(tenant, usage);
    }

    /// Stops counting a sandbox's usage (one [`Totals::add`] earlier) for its owner.
    pub(crate) fn remove(&mut self, owner: &SandboxOwner, usage: &Usage) {
        let key = (owner.tenant.clone(), owner.subject.clone());
        if let Some(subject) = self.subjects.get_mut(&key) {
            *subject = minus(subject, usage);
            if subject.bytes == 0 && subject.files == 0 {
                self.subjects.remove(&key);
            }
        }
        if let Some(tenant) = self.tenants.get_mut(&owner.tenant) {
            *tenant = minus(tenant, usage);
            if tenant.bytes == 0 && tenant.files == 0 {
                self.tenants.remove(&owner.tenant);
            }
        }
    }

    /// What the owner's sandboxes, and its tenant's, hold together.
    pub(crate) fn of(&self, owner: &SandboxOwner) -> (Usage, Usage) {
        let subject = self.subjects.get(&(owner.tenant.clone(), owner.subject.clone())).copied().unwrap_or(Usage::EMPTY);
        let tenant = self.tenants.get(&owner.tenant).copied().unwrap_or(Usage::EMPTY);
        (subject, tenant)
    }
}

fn plus(total: &Usage, usage: &Usage) -> Usage {
    Usage { bytes: total.bytes.saturating_add(usage.bytes), files: total.files.saturating_add(usage.files), complete: true }
}

fn minus(total: &Usage, usage: &Usage) -> Usage {
    Usage { bytes: total.bytes.saturating_sub(usage.bytes), files: total.files.saturating_sub(usage.files), complete: true }
}

/// The usage the provider remembers of its sandboxes: the last measurement of each to land,
/// and their totals per owner (`owners.rs`).
#[derive(Debug)]
pub(crate) struct Ledger {
    quota: Quota,
    owners: OwnerQuotas,
    /// Whether walks may open up directories a command shut (the harness is not root).
    open_up: bool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: HashMap<String, Remembered>,
    /// The number of the next measurement, and of the next record.
    next: u64,
    /// The last usage of every remembered sandbox with a known owner, summed per owner.
    // Invariant: holds exactly the `usage` of each remembered sandbox that has an `owner`.
    totals: Totals,
}

#[derive(Debug)]
struct Remembered {
    /// Which record of the sandbox this is: a measurement started before the sandbox was
    /// forgotten does not land in a later record.
    record: u64,
    /// The last measurement to land, with its number: an earlier one landing later is ignored.
    usage: Option<(u64, Usage)>,
    /// How many measurements of finished commands and writes are under way; the next command
    /// waits for them.
    settling: watch::Sender<usize>,
    /// When it was last measured, for forgetting the least lately used.
    used: Instant,
    /// Whose it is, once known.
    owner: Option<SandboxOwner>,
}

impl Remembered {
    fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref().map(|(_, usage)| usage)
    }
}

impl Ledger {
    pub(crate) fn new(limits: &Limits, open_up: bool) -> Ledger {
        let owners = OwnerQuotas {
            subject: Quota { bytes: limits.max_subject_bytes, files: limits.max_subject_files },
            tenant: Quota { bytes: limits.max_tenant_bytes, files: limits.max_tenant_files },
        };
        Ledger { quota: Quota::of(limits), owners, open_up, state: Mutex::default() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a sandbox that was just made for `owner`, and holds nothing.
    pub(crate) fn record_empty(&self, sandbox_id: &str, owner: &SandboxOwner) {
        let mut state = self.state();
        let (record, number) = (state.next, state.next + 1);
        state.next += 2;
        let (settling, _) = watch::channel(0);
        let remembered =
            Remembered { record, usage: Some((number, Usage::EMPTY)), settling, used: Instant::now(), owner: Some(owner.clone()) };
        state.insert(sandbox_id, remembered);
    }

    /// Records whose a sandbox is (remembering it, unmeasured, if it was not): its usage counts
    /// toward the owner's from now on.
    pub(crate) fn own(&self, sandbox_id: &str, owner: &SandboxOwner) {
        let mut state = self.state();
        if !state.sandboxes.contains_key(sandbox_id) {
            let record = state.next;
            state.next += 1;
            let (settling, _) = watch::channel(0);
            state.insert(sandbox_id, Remembered { record, usage: None, settling, used: Instant::now(), owner: None });
        }
        let State { sandboxes, totals, .. } = &mut *state;
        let Some(remembered) = sandboxes.get_mut(sandbox_id) else { return };
        if remembered.owner.as_ref() == Some(owner) {
            return;
        }
        if let (Some(previous), Some(usage)) = (&remembered.owner, remembered.usage.as_ref().map(|(_, usage)| usage)) {
            totals.remove(previous, usage);
        }
        if let Some(usage) = remembered.usage() {
            totals.add(owner, usage);
        }
        remembered.owner = Some(owner.clone());
    }

    /// Whether anything is remembered of a sandbox, or being measured.
    pub(crate) fn knows(&self, sandbox_id: &str) -> bool {
        self.state().sandboxes.contains_key(sandbox_id)
    }

    /// Forgets a sandbox (removed); measurements under way land nowhere.
    pub(crate) fn forget(&self, sandbox_id: &str) {
        self.state().remove(sandbox_id);
    }

    /// Whether a sandbox whose own usage is `usage` (with `extra` about to be written) is over a
    /// quota: its own first, then its owner's and its tenant's, by the totals of the sandboxes
    /// this ledger knows (in which `usage` already counts).
    pub(crate) fn over(&self, sandbox_id: &str, usage: &Usage, extra: &Usage) -> Option<OverQuota> {
        let with_extra = |usage: &Usage| Usage {
            bytes: usage.bytes.saturating_add(extra.bytes),
            files: usage.files.saturating_add(extra.files),
            complete: usage.complete,
        };
        let own = with_extra(usage);
        if self.quota.exceeded_by(&own) {
            return Some(self.quota.report(QuotaScope::Sandbox, &own, false));
        }
        let state = self.state();
        let owner = state.sandboxes.get(sandbox_id)?.owner.as_ref()?;
        let (subject, tenant) = state.totals.of(owner);
        [(QuotaScope::Subject, self.owners.subject, subject), (QuotaScope::Tenant, self.owners.tenant, tenant)]
            .into_iter()
            .map(|(scope, quota, total)| (scope, quota, with_extra(&total)))
            .find(|(_, quota, total)| quota.exceeded_in_total(total))
            .map(|(scope, quota, total)| quota.report(scope, &total, false))
    }

    /// Whether the owner of a sandbox that grew from `before` to `now` is over its subject's or
    /// tenant's quota (`now` has landed in the totals): the growth of this sandbox is what takes
    /// them past it, since a sandbox that only shrank is never blamed.
    fn owner_outgrown(&self, sandbox_id: &str, before: &Usage, now: &Usage) -> Option<OverQuota> {
        let state = self.state();
        let owner = state.sandboxes.get(sandbox_id)?.owner.as_ref()?;
        let (subject, tenant) = state.totals.of(owner);
        [(QuotaScope::Subject, self.owners.subject, subject), (QuotaScope::Tenant, self.owners.tenant, tenant)]
            .into_iter()
            .find(|(_, quota, total)| {
                (total.bytes > quota.bytes && now.bytes > before.bytes) || (total.files > quota.files && now.files > before.files)
            })
            .map(|(scope, quota, total)| quota.report(scope, &total, true))
    }

    /// The last measured usage of a sandbox as it stands, without waiting for one under way;
    /// `None` when the sandbox was never measured.
    pub(crate) fn last(&self, sandbox_id: &str) -> Option<Usage> {
        self.state().sandboxes.get(sandbox_id).and_then(|remembered| remembered.usage).map(|(_, usage)| usage)
    }

    /// The last measured usage of a sandbox, once the measurements of the commands and writes
    /// that ended before this call landed (waiting at most [`SETTLE_WAIT`]); `None` when the
    /// sandbox was never measured.
    pub(crate) async fn settled(&self, sandbox_id: &str) -> Option<Usage> {
        let mut settling = self.state().sandboxes.get(sandbox_id)?.settling.subscribe();
        // An error is a forgotten sandbox: nothing to wait for.
        let _ = tokio::time::timeout(SETTLE_WAIT, settling.wait_for(|under_way| *under_way == 0)).await;
        self.state().sandboxes.get(sandbox_id).and_then(|remembered| remembered.usage).map(|(_, usage)| usage)
    }

    /// Measures the sandbox whose directory is `dir` on the blocking pool, and remembers the
    /// result unless a measurement started later landed first or the sandbox was forgotten
    /// meanwhile. A `settling` measurement (after a command or a write) is waited for by
    /// [`Ledger::settled`]. The measurement runs to its end even when the handle is dropped.
    pub(crate) fn measure(self: &Arc<Self>, sandbox_id: &str, dir: &Path, settling: bool) -> JoinHandle<Option<Usage>> {
        let (record, number) = {
            let mut state = self.state();
            let number = state.next;
            state.next += 1;
            let record = match state.sandboxes.get_mut(sandbox_id) {
                Some(remembered) => remembered.record,
                None => {
                    let record = state.next;
                    state.next += 1;
                    let (settling, _) = watch::channel(0);
                    state.insert(sandbox_id, Remembered { record, usage: None, settling, used: Instant::now(), owner: None });
                    record
                }
            };
            if settling && let Some(remembered) = state.sandboxes.get(sandbox_id) {
                remembered.settling.send_modify(|under_way| *under_way += 1);
            }
            (record, number)
        };
        // Counts the measurement as landed however the task ends, panicking or dropped unrun.
        let landing = Landing { ledger: self.clone(), sandbox_id: sandbox_id.to_owned(), record, settling };
        let areas = [Area::Workspace, Area::Tmp].map(|area| dir.join(area.dir_name()));
        let (open_up, max_entries) = (self.open_up, self.quota.max_entries());
        tokio::task::spawn_blocking(move || {
            let usage = measure(&areas, open_up, max_entries).ok();
            landing.land(number, usage);
            usage
        })
    }

    /// Starts a settling measurement of the sandbox when dropped: however a command ends (also
    /// when its future is dropped), its sandbox is measured afterwards.
    pub(crate) fn measure_after(self: &Arc<Self>, sandbox_id: &str, dir: &Path) -> MeasureAfter {
        MeasureAfter { ledger: self.clone(), sandbox_id: sandbox_id.to_owned(), dir: dir.to_path_buf() }
    }

    /// The files of the workspace of the sandbox whose directory is `dir` that changed after
    /// `since` (see [`changed_since`]), walked on the blocking pool.
    pub(crate) async fn changed_files(&self, dir: &Path, since: SystemTime, max_listed: usize) -> Vec<(PathBuf, u64)> {
        let area = dir.join(Area::Workspace.dir_name());
        let (open_up, max_entries) = (self.open_up, self.quota.max_entries());
        tokio::task::spawn_blocking(move || changed_since(&area, since, open_up, max_entries, max_listed)).await.unwrap_or_default()
    }

    /// Measures the sandbox every [`WATCH_EVERY`] while a command runs, and returns what it is
    /// over once it grew since the measurement before (`before` first, the usage the command
    /// started from; an unknown one counts as empty) and is over its quota, or its owner's.
    pub(crate) async fn watch(self: &Arc<Self>, sandbox_id: &str, dir: &Path, before: Option<Usage>) -> OverQuota {
        let mut previous = before.unwrap_or(Usage::EMPTY);
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let Ok(Some(now)) = self.measure(sandbox_id, dir, false).await else { continue };
            if self.quota.outgrown(&previous, &now) {
                return self.quota.report(QuotaScope::Sandbox, &now, true);
            }
            if let Some(over) = self.owner_outgrown(sandbox_id, &previous, &now) {
                return over;
            }
            previous = now;
        }
    }
}

impl State {
    /// Remembers a sandbox, forgetting the least lately used one when full.
    fn insert(&mut self, sandbox_id: &str, remembered: Remembered) {
        if self.sandboxes.len() >= MAX_REMEMBERED && !self.sandboxes.contains_key(sandbox_id) {
            let oldest = self.sandboxes.iter().min_by_key(|(_, remembered)| remembered.used).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                self.remove(&oldest);
            }
        }
        self.remove(sandbox_id);
        if let (Some(owner), Some(usage)) = (&remembered.owner, remembered.usage()) {
            self.totals.add(owner, usage);
        }
        self.sandboxes.insert(sandbox_id.to_owned(), remembered);
    }

    /// Forgets a sandbox, and its usage in its owner's totals.
    fn remove(&mut self, sandbox_id: &str) {
        if let Some(remembered) = self.sandboxes.remove(sandbox_id)
            && let (Some(owner), Some(usage)) = (&remembered.owner, remembered.usage())
        {
            self.totals.remove(owner, usage);
        }
    }
}

/// A measurement under way, landing in the ledger when done (or dropped).
struct Landing {
    ledger: Arc<Ledger>,
    sandbox_id: String,
    record: u64,
    settling: bool,
}

impl Landing {
    /// Remembers `usage`, the measurement numbered `number`; then (on drop) counts it landed.
    fn land(self, number: u64, usage: Option<Usage>) {
        let Some(usage) = usage else { return };
        let mut state = self.ledger.state();
        let State { sandboxes, totals, .. } = &mut *state;
        if let Some(remembered) = sandboxes.get_mut(&self.sandbox_id)
            && remembered.record == self.record
            && remembered.usage.is_none_or(|(landed, _)| landed < number)
        {
            if let Some(owner) = &remembered.owner {
                if let Some(previous) = remembered.usage() {
                    totals.remove(owner, previous);
                }
                totals.add(owner, &usage);
            }
            remembered.usage = Some((number, usage));
            remembered.used = Instant::now();
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if !self.settling {
            return;
        }
        let state = self.ledger.state();
        if let Some(remembered) = state.sandboxes.get(&self.sandbox_id).filter(|remembered| remembered.record == self.record) {
            remembered.settling.send_modify(|under_way| *under_way = under_way.saturating_sub(1));
        }
    }
}

/// Starts a settling measurement of a sandbox when dropped (see [`Ledger::measure_after`]).
pub(crate) struct MeasureAfter {
    ledger: Arc<Ledger>,
    sandbox_id: String,
    dir: PathBuf,
}

impl Drop for MeasureAfter {
    fn drop(&mut self) {
        // Outside a runtime (a provider dropped at exit) there is nothing to measure for.
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(self.ledger.measure(&self.sandbox_id, &self.dir, true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::running_as_root;

    /// A scratch directory, removed on drop (after giving every directory back its permissions).
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path = std::env::temp_dir().join(format!("teamster-quota-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Scratch(std::fs::canonicalize(&path).unwrap())
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chmod").arg("-R").arg("u+rwx").arg(&self.0).status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const DATA_BYTES: u64 = 100 * 1024;
    const INNER_BYTES: u64 = 10 * 1024;
    const OUTSIDE_BYTES: u64 = 1024 * 1024;

    /// Builds a sandbox directory under `base`: a workspace with a file, a sparse file, a link
    /// to a directory outside holding a megabyte, and a shut directory with a file inside it;
    /// a `/tmp` with one file. Returns the areas.
    fn build(base: &Path) -> [PathBuf; 2] {
        let [workspace, tmp] = [base.join("workspace"), base.join("tmp")];
        let outside = base.join("outside");
        for dir in [&workspace, &tmp, &outside, &workspace.join("a"), &workspace.join("locked/inner")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let bytes = |len: u64| (0..len).map(|index| (index % 251) as u8 + 1).collect::<Vec<u8>>();
        std::fs::write(outside.join("big"), bytes(OUTSIDE_BYTES)).unwrap();
        std::fs::write(workspace.join("a/data"), bytes(DATA_BYTES)).unwrap();
        std::fs::File::create(workspace.join("a/sparse")).unwrap().set_len(1 << 30).unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("link")).unwrap();
        std::fs::write(workspace.join("locked/inner/file"), bytes(INNER_BYTES)).unwrap();
        std::fs::set_permissions(workspace.join("locked"), Permissions::from_mode(0o000)).unwrap();
        std::fs::write(tmp.join("t"), b"x").unwrap();
        [workspace, tmp]
    }

    /// Checks the walk of what [`build`] made.
    fn check(areas: &[PathBuf], open_up: bool) {
        let usage = measure(areas, open_up, 1000).unwrap();
        // a, a/data, a/sparse, link, locked, locked/inner, locked/inner/file; t.
        assert_eq!((usage.files, usage.complete), (8, true), "{usage:?}");
        let least = DATA_BYTES + INNER_BYTES + 1;
        // Directories take a few blocks each; the sparse gigabyte and the linked megabyte none.
        assert!(usage.bytes >= least && usage.bytes < least + 256 * 1024, "{usage:?}");
        // Past the most entries it counts, a walk stops and says it is incomplete.
        let stopped = measure(areas, open_up, 5).unwrap();
        assert!(!stopped.complete && stopped.files <= 6, "{stopped:?}");
        assert!(Quota { bytes: u64::MAX, files: u64::MAX }.exceeded_by(&stopped));
    }

    #[test]
    fn the_walk_counts_allocated_bytes_and_entries_without_following_links() {
        let scratch = Scratch::new("walk");
        let areas = build(&scratch.0);
        check(&areas, !running_as_root());
        // A directory reached through a link (one a command swapped in as the walk passed) is
        // not entered.
        let walk = Walk { usage: Usage::EMPTY, open_up: false, owner: 0, max_entries: 1000, stopped: false, changed: None };
        assert!(matches!(walk.enter(&areas[0].join("link")), Entered::Vanished));
        assert!(matches!(walk.enter(&areas[0].join("link/..").join("workspace")), Entered::Vanished));
        assert!(matches!(walk.enter(&areas[0].join("a")), Entered::Listed(..)));
        // A missing area is no measurement (a sandbox being removed).
        assert!(measure(&[scratch.0.join("gone")], false, 1000).is_err());
    }

    /// The test above, as a user other than root: the walk opens up the shut directory. Run by
    /// [`a_shut_directory_is_opened_up_when_the_harness_is_not_root`] as `nobody`.
    #[test]
    #[ignore = "run as another user by a_shut_directory_is_opened_up_when_the_harness_is_not_root"]
    fn walk_as_another_user() {
        let Some(base) = std::env::var_os("TEAMSTER_QUOTA_WALK_DIR") else { return };
        assert!(!running_as_root());
        let areas = build(Path::new(&base));
        let before = std::fs::symlink_metadata(areas[0].join("locked")).unwrap().mode() & 0o777;
        assert_eq!(before, 0, "the directory starts shut");
        // Unopened, the shut directory is a part the walk cannot measure.
        assert!(!measure(&areas, false, 1000).unwrap().complete);
        check(&areas, true);
    }

    #[test]
    fn a_shut_directory_is_opened_up_when_the_harness_is_not_root() {
        let scratch = Scratch::new("walk-user");
        if !running_as_root() {
            // Already another user: the ignored test's body runs here.
            let areas = build(&scratch.0);
            assert!(!measure(&areas, false, 1000).unwrap().complete);
            check(&areas, true);
            return;
        }
        let nobody = 65_534;
        std::os::unix::fs::chown(&scratch.0, Some(nobody), Some(nobody)).unwrap();
        let test = std::env::current_exe().unwrap();
        let ran = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&test)
            .args(["--exact", "quota::tests::walk_as_another_user", "--ignored", "--nocapture"])
            .env("TEAMSTER_QUOTA_WALK_DIR", &scratch.0)
            .output()
            .unwrap();
        let output = String::from_utf8_lossy(&ran.stdout);
        assert!(ran.status.success(), "{output}\n{}", String::from_utf8_lossy(&ran.stderr));
        assert!(output.contains("1 passed"), "the test did not run: {output}");
    }

    #[test]
    fn only_growth_past_the_quota_counts() {
        let quota = Quota { bytes: 100, files: 10 };
        let usage = |bytes, files| Usage { bytes, files, complete: true };
        assert!(!quota.exceeded_by(&usage(100, 10)) && quota.exceeded_by(&usage(101, 1)) && quota.exceeded_by(&usage(1, 11)));
        let cases = [
            (usage(50, 5), usage(150, 5), true),
            (usage(150, 5), usage(160, 5), true),
            (usage(150, 5), usage(140, 5), false),
            (usage(150, 5), usage(140, 6), false),
            (usage(50, 20), usage(50, 21), true),
            (usage(50, 20), usage(60, 19), false),
            (usage(50, 5), Usage { complete: false, ..usage(50, 5) }, true),
            (Usage { complete: false, ..usage(50, 5) }, Usage { complete: false, ..usage(50, 5) }, false),
        ];
        for (before, now, outgrown) in cases {
            assert_eq!(quota.outgrown(&before, &now), outgrown, "{before:?} -> {now:?}");
        }
    }

    #[tokio::test]
    async fn the_latest_measurement_is_remembered_until_forgotten() {
        let scratch = Scratch::new("ledger");
        let areas = build(&scratch.0);
        let limits = Limits { max_workspace_bytes: 1024 * 1024, max_workspace_files: 100, ..Limits::default() };
        let ledger = Arc::new(Ledger::new(&limits, !running_as_root()));
        assert_eq!(ledger.settled("sbx_a").await, None);
        ledger.record_empty("sbx_a", &SandboxOwner::new("acme", "user:alice"));
        assert_eq!(ledger.settled("sbx_a").await, Some(Usage::EMPTY));
        drop(ledger.measure_after("sbx_a", &scratch.0));
        let settled = ledger.settled("sbx_a").await.unwrap();
        assert_eq!(settled.files, 8, "the measurement after a command is waited for: {settled:?}");
        std::fs::write(areas[1].join("more"), b"y").unwrap();
        assert_eq!(ledger.measure("sbx_a", &scratch.0, false).await.unwrap().map(|usage| usage.files), Some(9));
        assert_eq!(ledger.settled("sbx_a").await.map(|usage| usage.files), Some(9));
        ledger.forget("sbx_a");
        assert!(!ledger.knows("sbx_a"));
        assert_eq!(ledger.settled("sbx_a").await, None);
    }

    #[tokio::test]
    async fn an_owner_is_over_its_quota_by_all_its_sandboxes_together() {
        let scratch = Scratch::new("owners");
        build(&scratch.0);
        let measured = measure(&[scratch.0.join("workspace"), scratch.0.join("tmp")], !running_as_root(), 1000).unwrap();
        // Room for one measured sandbox per owner, not two; the tenant holds three.
        let limits = Limits {
            max_subject_bytes: measured.bytes * 3 / 2,
            max_tenant_bytes: measured.bytes * 5 / 2,
            ..Limits::default()
        };
        let ledger = Arc::new(Ledger::new(&limits, !running_as_root()));
        let (alice, bob) = (SandboxOwner::new("acme", "user:alice"), SandboxOwner::new("acme", "user:bob"));
        let nothing = Usage::EMPTY;
        for (sandbox, owner) in [("sbx_a1", &alice), ("sbx_a2", &alice), ("sbx_b1", &bob), ("sbx_b2", &bob)] {
            ledger.own(sandbox, owner);
        }
        ledger.measure("sbx_a1", &scratch.0, false).await.unwrap();
        assert_eq!(ledger.over("sbx_a1", &measured, &nothing), None);
        ledger.measure("sbx_a2", &scratch.0, false).await.unwrap();
        let over = ledger.over("sbx_a1", &measured, &nothing).expect("two sandboxes take alice past her quota");
        assert_eq!((over.scope, over.used_bytes, over.killed), (QuotaScope::Subject, measured.bytes * 2, false));
        assert_eq!(ledger.over("sbx_b1", &Usage::EMPTY, &nothing), None, "bob's quota is his own");
        // Bob's first sandbox takes the tenant past its quota, and a write into his empty one is refused for it.
        ledger.measure("sbx_b1", &scratch.0, false).await.unwrap();
        let extra = Usage { bytes: 1, files: 1, complete: true };
        assert_eq!(ledger.over("sbx_b2", &Usage::EMPTY, &extra).map(|over| over.scope), Some(QuotaScope::Tenant));
        // A forgotten (destroyed) sandbox no longer counts.
        ledger.forget("sbx_a2");
        assert_eq!(ledger.over("sbx_a1", &measured, &nothing), None);
        assert_eq!(ledger.over("sbx_b2", &Usage::EMPTY, &extra), None);
        // Growth that takes an owner past its quota is what a running command is killed for, not shrinking.
        let grown = ledger.owner_outgrown("sbx_a1", &Usage::EMPTY, &measured);
        assert_eq!(grown, None, "one sandbox fits");
        ledger.own("sbx_a2", &alice);
        ledger.measure("sbx_a2", &scratch.0, false).await.unwrap();
        let grown = ledger.owner_outgrown("sbx_a2", &Usage::EMPTY, &measured).expect("the second sandbox's growth");
        assert!(grown.killed && grown.scope == QuotaScope::Subject, "{grown:?}");
        assert_eq!(ledger.owner_outgrown("sbx_a2", &Usage { bytes: measured.bytes + 1, ..measured }, &measured), None);
    }

    #[test]
    fn totals_follow_each_owner_and_tenant() {
        let usage = |bytes, files| Usage { bytes, files, complete: true };
        let (alice, bob, carol) =
            (SandboxOwner::new("acme", "user:alice"), SandboxOwner::new("acme", "user:bob"), SandboxOwner::new("globex", "user:alice"));
        let mut totals = Totals::default();
        totals.add(&alice, &usage(100, 2));
        totals.add(&alice, &usage(50, 1));
        totals.add(&bob, &usage(10, 1));
        totals.add(&carol, &usage(7, 1));
        assert_eq!(totals.of(&alice), (usage(150, 3), usage(160, 4)));
        assert_eq!(totals.of(&bob), (usage(10, 1), usage(160, 4)));
        // The same subject id in another tenant is another owner.
        assert_eq!(totals.of(&carol), (usage(7, 1), usage(7, 1)));
        totals.remove(&alice, &usage(100, 2));
        assert_eq!(totals.of(&alice), (usage(50, 1), usage(60, 2)));
        totals.remove(&alice, &usage(50, 1));
        totals.remove(&bob, &usage(10, 1));
        assert_eq!(totals.of(&alice), (Usage::EMPTY, Usage::EMPTY));
        assert!(totals.subjects.len() == 1 && totals.tenants.len() == 1, "emptied owners are dropped: {totals:?}");
    }
}
