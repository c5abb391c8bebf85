//! A control group per sandboxed command, bounding what its processes take together: memory
//! (with the tmpfs and shared memory pages they write, which are charged to it), processes and
//! CPU time. `RLIMIT_AS` bounds one process; a command starting three gets three times it, and a
//! tmpfs file belongs to no process at all.
//!
//! [`Cgroups::detect`] finds at start-up where the host lets this process make groups: the cgroup
//! v2 hierarchy when its own group there offers the `memory` and `pids` controllers (a delegated
//! subtree; a group holding this process cannot hand controllers to children, so this process
//! moves into a leaf `teamster-harness` of its own first), or else the v1 hierarchies of
//! `memory`, `pids` and `cpu`. The command's groups are made under this process's own (in each
//! hierarchy), so they stay inside whatever bounds the operator set on it. Where neither works,
//! commands run without (the README says what still bounds them).
//!
//! [`Cgroups::create`] makes a command's group (`teamster-<server pid>-<n>`) with its limits; the
//! first process of the command line, a shell running as the harness's user, writes its own pid
//! into the group's `cgroup.procs` before anything else, so every process of the command is born
//! inside it. Over the memory limit the kernel's OOM killer kills inside the group (v2: the whole
//! group, `memory.oom.group`), never the harness. [`CommandCgroup::kill_all`] kills what is left
//! when the command ends; dropping the group removes it (retrying while killed processes exit).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The period of the CPU bandwidth limit: the quota is a share of it.
const CPU_PERIOD_MICROS: u64 = 100_000;
/// How long removing a command's group waits for its killed processes to leave it.
const REMOVE_PATIENCE: Duration = Duration::from_secs(5);
/// The leaf this process moves into, in a v2 group that must hand controllers to children.
const HARNESS_LEAF: &str = "teamster-harness";
/// The start of every command group's name.
const PREFIX: &str = "teamster-";

/// What a command's group bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CgroupLimits {
    /// `memory.max` (v1: `memory.limit_in_bytes`), swap included where the host accounts it.
    pub(crate) memory_bytes: u64,
    /// `pids.max`: processes and threads at once.
    pub(crate) pids: u64,
    /// CPU time per wall-clock time, in thousandths of a CPU (`cpu.max`, v1 `cpu.cfs_quota_us`).
    pub(crate) cpu_millis: u64,
}

/// The hierarchies this process makes commands' groups in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// One unified hierarchy: this process's group, which hands `memory`, `pids` and (when it
    /// has it) `cpu` to its children.
    V2 { dir: PathBuf, cpu: bool },
    /// One hierarchy per controller: this process's group in each.
    V1 { memory: PathBuf, pids: Option<PathBuf>, cpu: Option<PathBuf> },
}

/// Numbers the groups of this process (one sequence for every provider it starts).
static NEXT_GROUP: AtomicU64 = AtomicU64::new(0);

/// Where and how commands' groups are made.
#[derive(Debug)]
pub(crate) struct Cgroups {
    layout: Layout,
    limits: CgroupLimits,
}

impl Cgroups {
    /// The groups this host lets this process make, checked by making one; or why there are none.
    pub(crate) fn detect(limits: CgroupLimits) -> Result<Cgroups, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|error| format!("reading /proc/self/mountinfo: {error}"))?;
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|error| format!("reading /proc/self/cgroup: {error}"))?;
        // A group this process moved into earlier (another provider it started) is its own leaf.
        let v2 = find_v2(&mountinfo, &own).map(|dir| match dir.parent() {
            Some(parent) if dir.ends_with(HARNESS_LEAF) => parent.to_path_buf(),
            _ => dir,
        });
        let layout = match v2.filter(|dir| offers(dir, "memory") && offers(dir, "pids")) {
            Some(dir) => {
                let cpu = offers(&dir, "cpu");
                delegate(&dir, cpu)?;
                Layout::V2 { dir, cpu }
            }
            None => {
                let memory = find_v1(&mountinfo, &own, "memory").ok_or("neither cgroup v2 with the memory and pids controllers nor a v1 memory hierarchy is mounted")?;
                Layout::V1 { memory, pids: find_v1(&mountinfo, &own, "pids"), cpu: find_v1(&mountinfo, &own, "cpu") }
            }
        };
        let cgroups = Cgroups { layout, limits };
        cgroups.remove_stale();
        // A group made and removed: the host lets this process do it.
        let probe = cgroups.create().map_err(|error| format!("making a cgroup: {error}"))?;
        let _ = probe.remove_now();
        Ok(cgroups)
    }

    /// What is in force, for the log.
    pub(crate) fn describe(&self) -> String {
        let CgroupLimits { memory_bytes, pids, cpu_millis } = self.limits;
        let memory = crate::mib(memory_bytes);
        let cpus = cpu_millis as f64 / 1000.0;
        match &self.layout {
            Layout::V2 { dir, cpu } => {
                let cpu = if *cpu { format!("{cpus} CPU") } else { "no CPU limit (no cpu controller)".to_owned() };
                format!("cgroup v2 under {}: {memory} MiB memory, {pids} processes, {cpu} per command", dir.display())
            }
            Layout::V1 { memory: dir, pids: pid_dir, cpu } => {
                let pids = if pid_dir.is_some() { format!("{pids} processes") } else { "no process limit (no pids hierarchy)".to_owned() };
                let cpu = if cpu.is_some() { format!("{cpus} CPU") } else { "no CPU limit (no cpu hierarchy)".to_owned() };
                format!("cgroup v1 under {}: {memory} MiB memory, {pids}, {cpu} per command", dir.display())
            }
        }
    }

    /// Makes a command's group, with its limits written.
    pub(crate) fn create(&self) -> std::io::Result<CommandCgroup> {
        let name = format!("{PREFIX}{}-{}", std::process::id(), NEXT_GROUP.fetch_add(1, Ordering::Relaxed));
        let CgroupLimits { memory_bytes, pids, cpu_millis } = self.limits;
        let cpu_quota = (cpu_millis.saturating_mul(CPU_PERIOD_MICROS) / 1000).max(1000);
        let mut group = CommandCgroup { dirs: Vec::new(), v2: matches!(self.layout, Layout::V2 { .. }) };
        // Invariant: a directory is pushed once made, so a failure part-way removes what was made.
        let mut make = |parent: &Path| -> std::io::Result<PathBuf> {
            let dir = parent.join(&name);
            std::fs::create_dir(&dir)?;
            group.dirs.push(dir.clone());
            Ok(dir)
        };
        let made = (|| match &self.layout {
            Layout::V2 { dir, cpu } => {
                let dir = make(dir)?;
                write(&dir, "memory.max", memory_bytes)?;
                write_if_present(&dir, "memory.swap.max", 0)?;
                write_if_present(&dir, "memory.oom.group", 1)?;
                write(&dir, "pids.max", pids)?;
                if *cpu {
                    write(&dir, "cpu.max", format!("{cpu_quota} {CPU_PERIOD_MICROS}"))?;
                }
                Ok(())
            }
            Layout::V1 { memory, pids: pid_dir, cpu } => {
                let dir = make(memory)?;
                write(&dir, "memory.limit_in_bytes", memory_bytes)?;
                // Memory and swap together, where the kernel accounts swap: no more than the memory.
                write_if_present(&dir, "memory.memsw.limit_in_bytes", memory_bytes)?;
                if let Some(pid_dir) = pid_dir {
                    write(&make(pid_dir)?, "pids.max", pids)?;
                }
                if let Some(cpu) = cpu {
                    let dir = make(cpu)?;
                    write(&dir, "cpu.cfs_period_us", CPU_PERIOD_MICROS)?;
                    write(&dir, "cpu.cfs_quota_us", cpu_quota)?;
                }
                Ok(())
            }
        })();
        match made {
            Ok(()) => Ok(group),
            Err(error) => {
                let _ = group.remove_now();
                Err(error)
            }
        }
    }

    /// Removes the groups of processes that are gone (a harness killed before removing its own).
    fn remove_stale(&self) {
        let parents: Vec<&PathBuf> = match &self.layout {
            Layout::V2 { dir, .. } => vec![dir],
            Layout::V1 { memory, pids, cpu } => [Some(memory), pids.as_ref(), cpu.as_ref()].into_iter().flatten().collect(),
        };
        for parent in parents {
            let Ok(entries) = std::fs::read_dir(parent) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.split_once('-')).and_then(|(pid, _)| pid.parse::<u32>().ok()) else { continue };
                if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                    let stale = CommandCgroup { dirs: vec![entry.path()], v2: matches!(self.layout, Layout::V2 { .. }) };
                    stale.kill_all();
                    let _ = stale.remove_now();
                }
            }
        }
    }
}

/// One command's group, in each hierarchy. Dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub(crate) struct CommandCgroup {
    /// The group's directory in each hierarchy (one with v2).
    dirs: Vec<PathBuf>,
    v2: bool,
}

impl CommandCgroup {
    /// The files the command's first process writes its pid to, to enter the group.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|dir| dir.join("cgroup.procs")).collect()
    }

    /// Kills every process in the group (v2: `cgroup.kill`; else each, by a pidfd, once it is
    /// known to be in the group, so a pid reused meanwhile is never hit).
    pub(crate) fn kill_all(&self) {
        if self.v2 && self.dirs.iter().all(|dir| std::fs::write(dir.join("cgroup.kill"), "1").is_ok()) {
            return;
        }
        // A few rounds, in case processes fork while being killed (the pids limit bounds how
        // many); dropping the group goes on until it is empty.
        for _ in 0..4 {
            let mut found = false;
            for dir in &self.dirs {
                let Ok(listed) = std::fs::read_to_string(dir.join("cgroup.procs")) else { continue };
                for pid in listed.lines().filter_map(|line| line.trim().parse::<i32>().ok()) {
                    found = true;
                    kill_in(pid, dir);
                }
            }
            if !found {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the kernel killed a process of the group for taking it past its memory limit
    /// (`oom_kill` in v2's `memory.events`, v1's `memory.oom_control`).
    pub(crate) fn ran_out_of_memory(&self) -> bool {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        self.dirs.iter().filter_map(|dir| std::fs::read_to_string(dir.join(file)).ok()).any(|counts| {
            counts.lines().any(|line| line.strip_prefix("oom_kill ").is_some_and(|count| count.trim() != "0"))
        })
    }

    /// Removes the group's directories, once; what is still busy stays. Answers whether all went.
    fn remove_now(&self) -> bool {
        let mut removed = true;
        for dir in self.dirs.iter().rev() {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => removed = false,
            }
        }
        removed
    }
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        if self.dirs.is_empty() {
            return;
        }
        self.kill_all();
        if self.remove_now() {
            return;
        }
        // Killed processes take a moment to leave: removed in the background, or given up.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let mut group = CommandCgroup { dirs: std::mem::take(&mut self.dirs), v2: self.v2 };
        runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + REMOVE_PATIENCE;
            let mut removed = false;
            while !removed && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                group.kill_all();
                removed = group.remove_now();
            }
            if !removed {
                // The next start-up's sweep removes it.
                tracing::warn!(cgroup = %group.dirs[0].display(), "a command's cgroup could not be removed");
            }
            // Invariant: done with; dropping it does nothing more.
            group.dirs.clear();
        });
    }
}

/// Sends `SIGKILL` to `pid` if it is still in the group at `dir`: its pidfd pins the process, and
/// its `/proc` entry, read after, says where it is.
fn kill_in(pid: i32, dir: &Path) {
    use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
    let Some(pid) = Pid::from_raw(pid) else { return };
    let Ok(pidfd) = pidfd_open(pid, PidfdFlags::empty()) else { return };
    let Some(name) = dir.file_name().and_then(|name| name.to_str()) else { return };
    let Ok(groups) = std::fs::read_to_string(format!("/proc/{}/cgroup", pid.as_raw_nonzero())) else { return };
    if groups.lines().any(|line| line.rsplit(':').next().is_some_and(|path| path.ends_with(&format!("/{name}")))) {
        let _ = pidfd_send_signal(&pidfd, Signal::Kill);
    }
}

/// Whether a v2 group's children may have `controller`.
fn offers(dir: &Path, controller: &str) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers")).is_ok_and(|listed| listed.split_whitespace().any(|name| name == controller))
}

/// Hands the controllers of the v2 group `dir` to its children. A group holding processes
/// cannot (the "no internal processes" rule): this process then moves into a leaf of its own
/// first, and if others remain the subtree is not delegated to it.
fn delegate(dir: &Path, cpu: bool) -> Result<(), String> {
    let wanted: &[&str] = if cpu { &["memory", "pids", "cpu"] } else { &["memory", "pids"] };
    let enabled = || std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    if wanted.iter().all(|controller| enabled().split_whitespace().any(|name| name == *controller)) {
        return Ok(());
    }
    let line = wanted.iter().map(|controller| format!("+{controller}")).collect::<Vec<_>>().join(" ");
    let control = dir.join("cgroup.subtree_control");
    if std::fs::write(&control, &line).is_ok() {
        return Ok(());
    }
    let leaf = dir.join(HARNESS_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(format!("making {}: {error}", leaf.display())),
    }
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|error| format!("moving the harness into {}: {error}", leaf.display()))?;
    std::fs::write(&control, &line).map_err(|error| {
        format!("enabling {line} in {} (other processes share the group; delegate one to the harness): {error}", control.display())
    })
}

/// This process's group in the v2 hierarchy, if one is mounted.
fn find_v2(mountinfo: &str, own: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    mountinfo.lines().filter_map(Mount::parse).find(|mount| mount.fstype == "cgroup2").and_then(|mount| mount.dir_of(path))
}

/// This process's group in the v1 hierarchy of `controller`, if one is mounted.
fn find_v1(mountinfo: &str, own: &str, controller: &str) -> Option<PathBuf> {
    let has = |list: &str| list.split(',').any(|name| name == controller);
    let path = own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        has(controllers).then_some(path)
    })?;
    mountinfo.lines().filter_map(Mount::parse).find(|mount| mount.fstype == "cgroup" && has(mount.options)).and_then(|mount| mount.dir_of(path))
}

/// One line of `/proc/self/mountinfo`, as far as it matters here.
struct Mount<'a> {
    /// The directory of the file system mounted (for cgroups: the group shown at the mount point).
    root: &'a str,
    point: &'a str,
    fstype: &'a str,
    /// The file system's own options (for v1 cgroups: its controllers).
    options: &'a str,
}

impl<'a> Mount<'a> {
    fn parse(line: &'a str) -> Option<Mount<'a>> {
        let (mount, filesystem) = line.split_once(" - ")?;
        let mut fields = mount.split(' ');
        let (root, point) = (fields.nth(3)?, fields.next()?);
        let mut fields = filesystem.split(' ');
        let (fstype, options) = (fields.next()?, fields.nth(1)?);
        Some(Mount { root, point, fstype, options })
    }

    /// Where the group at `path` (as `/proc/self/cgroup` names it) is under the mount point.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let relative = if self.root == "/" { path } else { path.strip_prefix(self.root)? };
        Some(Path::new(self.point).join(relative.trim_start_matches('/')))
    }
}

fn write(dir: &Path, file: &str, value: impl ToString) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value.to_string()).map_err(|error| std::io::Error::new(error.kind(), format!("writing {file}: {error}")))
}

/// Writes a file some kernels do not have (swap accounting, group OOM kills).
fn write_if_present(dir: &Path, file: &str, value: impl ToString) -> std::io::Result<()> {
    if dir.join(file).exists() { write(dir, file, value) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const V1_OWN: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/b695\n1:cpu,cpuacct:/svc\n0::/\n";

    #[test]
    fn v1_hierarchies_are_found_per_controller() {
        let find = |controller| find_v1(V1_MOUNTINFO, V1_OWN, controller);
        assert_eq!(find("memory"), Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/b695")));
        assert_eq!(find("pids"), Some(PathBuf::from("/sys/fs/cgroup/pids")));
        assert_eq!(find("cpu"), Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/svc")));
        assert_eq!(find("cpuacct"), Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/svc")));
        assert_eq!(find("freezer"), None);
        // The unified mount of a v1 host is found, and then refused for lacking controllers.
        assert_eq!(find_v2(V1_MOUNTINFO, V1_OWN), Some(PathBuf::from("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn the_v2_group_is_found_under_the_mounts_root() {
        let mountinfo = "30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(find_v2(mountinfo, "0::/system.slice/teamster.service\n"), Some(PathBuf::from("/sys/fs/cgroup/system.slice/teamster.service")));
        // A container seeing its own subtree mounted at its root.
        let mountinfo = "30 24 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(find_v2(mountinfo, "0::/kubepods/pod1/app\n"), Some(PathBuf::from("/sys/fs/cgroup/app")));
        assert_eq!(find_v2(mountinfo, "0::/elsewhere\n"), None);
        assert_eq!(find_v2("", "0::/\n"), None);
        assert_eq!(find_v1(mountinfo, "0::/x\n", "memory"), None);
    }

    #[test]
    fn a_commands_group_gets_its_limits_in_each_hierarchy() {
        let base = std::env::temp_dir().join(format!("teamster-cgroup-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let limits = CgroupLimits { memory_bytes: 64 << 20, pids: 32, cpu_millis: 500 };
        // A real cgroup file system makes a group's files with its directory; here they are
        // written as new files, which is what is checked.
        let layout = Layout::V1 { memory: base.join("memory"), pids: Some(base.join("pids")), cpu: Some(base.join("cpu")) };
        for hierarchy in ["memory", "pids", "cpu"] {
            std::fs::create_dir_all(base.join(hierarchy)).unwrap();
        }
        let cgroups = Cgroups { layout, limits };
        let group = cgroups.create().unwrap();
        let dir = |hierarchy: &str| group.dirs.iter().find(|dir| dir.starts_with(base.join(hierarchy))).unwrap().clone();
        let file = |hierarchy: &str, file: &str| std::fs::read_to_string(dir(hierarchy).join(file)).unwrap();
        assert_eq!(file("memory", "memory.limit_in_bytes"), "67108864");
        assert!(!dir("memory").join("memory.memsw.limit_in_bytes").exists(), "written only where the kernel has it");
        assert_eq!(file("pids", "pids.max"), "32");
        assert_eq!((file("cpu", "cpu.cfs_period_us").as_str(), file("cpu", "cpu.cfs_quota_us").as_str()), ("100000", "50000"));
        assert_eq!(group.procs_files(), ["memory", "pids", "cpu"].map(|hierarchy| dir(hierarchy).join("cgroup.procs")));
        let name = dir("memory").file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!("teamster-{}-", std::process::id())), "{name}");
        assert!(cgroups.describe().contains("64 MiB memory, 32 processes, 0.5 CPU"), "{}", cgroups.describe());
        // Removing fails on this stand-in (its directories hold files), as on a group still
        // holding processes: nothing panics, and the group is given up.
        drop(group);

        // v2: one group, with its limits in one directory.
        let v2 = base.join("unified");
        std::fs::create_dir_all(&v2).unwrap();
        let cgroups = Cgroups { layout: Layout::V2 { dir: v2.clone(), cpu: true }, limits };
        let group = cgroups.create().unwrap();
        let dir = group.dirs[0].clone();
        let file = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
        assert_eq!((file("memory.max").as_str(), file("pids.max").as_str(), file("cpu.max").as_str()), ("67108864", "32", "50000 100000"));
        assert!(!dir.join("memory.swap.max").exists() && dir.starts_with(&v2));
        assert_eq!(group.procs_files(), [dir.join("cgroup.procs")]);
        // A second group is another directory.
        let other = cgroups.create().unwrap();
        assert_ne!(other.dirs, group.dirs);
        drop((group, other));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
