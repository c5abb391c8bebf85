//! The `bwrap` command line of one sandboxed command.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::Limits;
use crate::skill_mounts::SKILLS_MOUNT_DIR;
use crate::workspace::{TMP_DIR, WORKSPACE_DIR};

/// The top-level directories that merged-`/usr` systems make symbolic links into `/usr`.
const SYSTEM_DIRS: [&str; 6] = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// What of `/etc` programs need (the dynamic linker's cache, users, name resolution, time zone,
/// certificates, interpreters' settings); the rest of `/etc` stays out of sight.
const ETC_ENTRIES: [&str; 19] = [
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/protocols",
    "/etc/services",
];

/// The environment every command starts from.
const BASE_ENV: [(&str, &str); 5] = [
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("HOME", WORKSPACE_DIR),
    ("LANG", "C.UTF-8"),
    ("TMPDIR", "/tmp"),
    ("TERM", "dumb"),
];

/// The shell line that makes and enters the start directory (`$1`), then runs the command
/// (`$2`) with `/bin/sh -c`. The workspace itself (`.`) needs no `mkdir`, a program of its own:
/// most commands start one process fewer.
const ENTER_AND_RUN: &str = r#"{ [ "$1" = . ] || mkdir -p -- "$1"; } && cd -- "$1" && exec /bin/sh -c "$2""#;

/// [`ENTER_AND_RUN`] for a sandbox over its disk quota, run with a file size limit of 0: with
/// `SIGXFSZ` ignored (and so for every program the command starts), writing to a file fails
/// with "File too large" instead of killing the writer.
const ENTER_AND_RUN_OVER_QUOTA: &str = r#"trap '' XFSZ; { [ "$1" = . ] || mkdir -p -- "$1"; } && cd -- "$1" && exec /bin/sh -c "$2""#;

/// The descriptor `bwrap` reads the seccomp filter from. `bwrap` closes it once read: the
/// sandbox never sees it.
const SECCOMP_FD: &str = "9";

/// The shell line starting `bwrap` (`$@`) with the seccomp filter's file (`$0`) open on
/// [`SECCOMP_FD`]: no code of the harness runs between fork and exec (which would need `unsafe`).
const OPEN_FILTER: &str = r#"exec "$@" 9<"$0""#;

/// The shell running [`OPEN_FILTER`].
const SHELL: &str = "/bin/sh";

/// The shell line entering the command's control group: it writes its own pid to each
/// `cgroup.procs` file it is given (up to `--`), then becomes the rest of its arguments, so every
/// process of the command is born in the group. Run first, as the harness's user, who may write
/// there (the sandbox's user may not).
const JOIN_CGROUP: &str = r#"for procs do shift; [ "$procs" = -- ] && break; echo $$ > "$procs" || exit 125; done; exec "$@""#;

/// Where name resolution is configured, among [`ETC_ENTRIES`].
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// How a network sandbox's command enters its network namespace.
pub(crate) struct NetworkEntry<'a> {
    /// The program and arguments (`nsenter ... --`) that run the rest in the namespace.
    pub(crate) enter: &'a [OsString],
    /// The file bound at `/etc/resolv.conf`.
    pub(crate) resolv_conf: &'a Path,
}

/// Everything one sandboxed command line depends on.
pub(crate) struct SandboxCommand<'a> {
    pub(crate) bwrap: &'a Path,
    pub(crate) prlimit: &'a Path,
    /// The compiled seccomp filter (`seccomp.rs`) the command runs under, when there is one.
    pub(crate) seccomp: Option<&'a Path>,
    /// `setpriv` and the user to run as, when the harness runs as root (a user of its own per
    /// sandbox, so the process limit is the sandbox's and the harness's files are out of reach).
    pub(crate) run_as: Option<(&'a Path, u32)>,
    pub(crate) workspace: &'a Path,
    /// The sandbox's own `/tmp`.
    pub(crate) tmp: &'a Path,
    /// The skills mounted into the sandbox: each name and its directory on the host, bound
    /// read-only at `/skills/<name>` (outside the workspace, so no path the sandbox controls
    /// decides where a mount lands; `/workspace/skills` links there).
    pub(crate) skills: &'a [(String, PathBuf)],
    /// The directory to start in, relative to the workspace (`.`: the workspace), created if
    /// missing. It is made and entered inside the sandbox, so a symbolic link in the workspace
    /// cannot lead the harness anywhere.
    pub(crate) cwd: &'a Path,
    pub(crate) env: &'a BTreeMap<String, String>,
    /// How the command enters its network namespace (`network.rs`), when it may use the
    /// network; `None`: bwrap gives it an empty one.
    pub(crate) network: Option<NetworkEntry<'a>>,
    pub(crate) limits: &'a Limits,
    /// The `cgroup.procs` files of the command's control group (`cgroup.rs`), in each hierarchy;
    /// empty when it has none.
    pub(crate) cgroup_procs: &'a [PathBuf],
    /// Whether the sandbox is over its disk quota: the command may read and delete files, not
    /// write to them (`RLIMIT_FSIZE` 0).
    pub(crate) over_quota: bool,
    pub(crate) command: &'a str,
}

impl SandboxCommand<'_> {
    /// The program to start and its arguments.
    pub(crate) fn argv(&self) -> (PathBuf, Vec<OsString>) {
        // sh (entering the control group) → setpriv → sh (opening the filter) → bwrap, each
        // exec'ing the next: the process started
        // becomes bwrap, and killing it ends the sandbox.
        let mut args = Arguments::default();
        if !self.cgroup_procs.is_empty() {
            // First of all, a shell enters the control group.
            args.push(&[SHELL, "-c", JOIN_CGROUP, "sh"]);
            for procs in self.cgroup_procs {
                args.path(procs);
            }
            args.push(&["--"]);
        }
        if let Some((setpriv, uid)) = self.run_as {
            let id = uid.to_string();
            args.path(setpriv);
            args.push(&["--reuid", &id, "--regid", &id, "--clear-groups", "--inh-caps=-all", "--"]);
        }
        if let Some(network) = &self.network {
            // As the sandbox's user, `nsenter` joins the namespace the command's network is set up in.
            args.0.extend(network.enter.iter().cloned());
        }
        if let Some(filter) = self.seccomp {
            args.push(&[SHELL, "-c", OPEN_FILTER]);
            args.path(filter);
        }
        args.path(self.bwrap);
        if self.seccomp.is_some() {
            args.push(&["--seccomp", SECCOMP_FD]);
        }
        args.push(&["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]);
        // No user namespace inside the sandbox's (the seccomp filter refuses them too).
        args.push(&["--disable-userns"]);
        if self.network.is_none() {
            args.push(&["--unshare-net"]);
        }
        args.push(&["--die-with-parent", "--new-session", "--hostname", "sandbox"]);
        args.push(&["--ro-bind", "/usr", "/usr"]);
        for dir in SYSTEM_DIRS {
            match std::fs::read_link(dir) {
                Ok(target) => args.push(&["--symlink", &target.to_string_lossy(), dir]),
                Err(_) if Path::new(dir).is_dir() => args.push(&["--ro-bind", dir, dir]),
                Err(_) => {}
            }
        }
        for entry in ETC_ENTRIES {
            match &self.network {
                // A network sandbox resolves names through public resolvers, not the host's.
                Some(network) if entry == RESOLV_CONF => {
                    args.push(&["--ro-bind"]);
                    args.path(network.resolv_conf);
                    args.push(&[entry]);
                }
                _ => args.push(&["--ro-bind-try", entry, entry]),
            }
        }
        args.push(&["--proc", "/proc", "--dev", "/dev"]);
        // Shared memory: a tmpfs of its own, sized (its pages are host memory, outside the quota).
        args.push(&["--size", &self.limits.max_shm_bytes.to_string(), "--tmpfs", "/dev/shm", "--bind"]);
        args.path(self.workspace);
        args.push(&[WORKSPACE_DIR, "--bind"]);
        args.path(self.tmp);
        args.push(&[TMP_DIR]);
        if !self.skills.is_empty() {
            // A tmpfs made read-only once the skills are bound in it: writing there fails
            // instead of vanishing with the command.
            args.push(&["--tmpfs", SKILLS_MOUNT_DIR]);
            for (name, dir) in self.skills {
                // `-try`: a skill the cache lost is missing from the sandbox, not every command failing.
                args.push(&["--ro-bind-try"]);
                args.path(dir);
                args.push(&[&format!("{SKILLS_MOUNT_DIR}/{name}")]);
            }
            args.push(&["--remount-ro", SKILLS_MOUNT_DIR]);
        }
        // The root and `/dev` are tmpfs mounts too, which commands have no need to write to:
        // read-only once every mount point in them is made.
        args.push(&["--remount-ro", "/dev", "--remount-ro", "/"]);
        args.push(&["--chdir", WORKSPACE_DIR, "--clearenv"]);
        for (name, value) in BASE_ENV {
            if !self.env.contains_key(name) {
                args.push(&["--setenv", name, value]);
            }
        }
        for (name, value) in self.env {
            args.push(&["--setenv", name, value]);
        }
        let limits = self.limits;
        let (max_file_bytes, script) = if self.over_quota { (0, ENTER_AND_RUN_OVER_QUOTA) } else { (limits.max_file_bytes, ENTER_AND_RUN) };
        args.push(&["--"]);
        args.path(self.prlimit);
        args.push(&[
            &format!("--nproc={}", limits.max_processes),
            // No process may map more than the whole command may use: a lone memory bomb gets
            // ENOMEM (a MemoryError it can report) before its control group's OOM kill.
            &format!("--as={}", limits.max_memory_bytes.min(limits.max_command_memory_bytes)),
            &format!("--fsize={max_file_bytes}"),
            &format!("--nofile={}", limits.max_open_files),
            "--core=0",
            "--",
            "/bin/sh",
            "-c",
            script,
            "sh",
        ]);
        args.path(self.cwd);
        args.push(&[self.command]);
        let mut argv = args.0;
        let program = PathBuf::from(argv.remove(0));
        (program, argv)
    }
}

/// A command line being built.
#[derive(Default)]
struct Arguments(Vec<OsString>);

impl Arguments {
    fn push(&mut self, parts: &[&str]) {
        self.0.extend(parts.iter().map(OsString::from));
    }

    fn path(&mut self, path: &Path) {
        self.0.push(path.as_os_str().to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command<'a>(env: &'a BTreeMap<String, String>, limits: &'a Limits, run_as: Option<(&'a Path, u32)>) -> SandboxCommand<'a> {
        SandboxCommand {
            bwrap: Path::new("/usr/bin/bwrap"),
            prlimit: Path::new("/usr/bin/prlimit"),
            seccomp: None,
            run_as,
            workspace: Path::new("/srv/sandboxes/sbx_1/workspace"),
            tmp: Path::new("/srv/sandboxes/sbx_1/tmp"),
            skills: &[],
            cwd: Path::new("src"),
            env,
            network: None,
            limits,
            cgroup_procs: &[],
            over_quota: false,
            command: "echo hi",
        }
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter().map(|arg| arg.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn a_command_line_shuts_everything_but_the_workspace() {
        let env = BTreeMap::from([("HOME".to_owned(), "/workspace/home".to_owned())]);
        let limits = Limits::default();
        let (program, args) = command(&env, &limits, None).argv();
        let args = strings(&args);
        assert_eq!(program, Path::new("/usr/bin/bwrap"));
        let has = |window: &[&str]| args.windows(window.len()).any(|part| part == window);
        assert!(has(&["--unshare-net"]) && has(&["--unshare-pid"]) && has(&["--die-with-parent"]));
        assert!(has(&["--disable-userns"]));
        assert!(has(&["--bind", "/srv/sandboxes/sbx_1/workspace", "/workspace"]));
        assert!(has(&["--chdir", "/workspace"]));
        assert!(has(&["--clearenv"]));
        // A variable the call sets replaces the default.
        assert!(has(&["--setenv", "HOME", "/workspace/home"]) && !has(&["--setenv", "HOME", "/workspace"]));
        assert!(has(&["/bin/sh", "-c", ENTER_AND_RUN, "sh", "src", "echo hi"]));
        assert!(has(&["--nproc=256"]));
        // The smaller of the address space limit and the command's memory.
        assert!(has(&["--as=1073741824"]), "{args:?}");
        assert!(has(&["--bind", "/srv/sandboxes/sbx_1/tmp", "/tmp"]));
        // Only the workspace and the sandbox's /tmp are bound writable.
        assert_eq!(args.iter().filter(|arg| *arg == "--bind").count(), 2);
    }

    #[test]
    fn the_command_enters_its_control_group_first_and_its_tmpfs_mounts_are_bounded() {
        let env = BTreeMap::new();
        let limits = Limits { max_shm_bytes: 1 << 20, ..Limits::default() };
        let procs = [PathBuf::from("/sys/fs/cgroup/memory/teamster-1-0/cgroup.procs"), PathBuf::from("/sys/fs/cgroup/pids/teamster-1-0/cgroup.procs")];
        let run_as = Some((Path::new("/usr/bin/setpriv"), 7));
        let (program, args) = SandboxCommand { cgroup_procs: &procs, ..command(&env, &limits, run_as) }.argv();
        assert_eq!(program, Path::new("/bin/sh"));
        let args = strings(&args);
        assert_eq!(args[..6], ["-c", JOIN_CGROUP, "sh", "/sys/fs/cgroup/memory/teamster-1-0/cgroup.procs", "/sys/fs/cgroup/pids/teamster-1-0/cgroup.procs", "--"]);
        assert_eq!(args[6..8], ["/usr/bin/setpriv", "--reuid"]);
        let has = |window: &[&str]| args.windows(window.len()).any(|part| part == window);
        assert!(has(&["--dev", "/dev", "--size", "1048576", "--tmpfs", "/dev/shm"]), "{args:?}");
        // Read-only after the last mount, before the command.
        let remounted = args.iter().position(|arg| arg == "--remount-ro").unwrap();
        assert!(has(&["--remount-ro", "/dev", "--remount-ro", "/", "--chdir"]), "{args:?}");
        assert!(!args[remounted..].iter().any(|arg| ["--bind", "--ro-bind", "--tmpfs", "--dev", "--proc"].contains(&arg.as_str())));
        // Without a control group nothing comes before setpriv.
        let (program, _) = command(&env, &limits, run_as).argv();
        assert_eq!(program, Path::new("/usr/bin/setpriv"));
    }

    #[test]
    fn the_join_line_enters_every_group_then_runs_the_rest() {
        let dir = std::env::temp_dir().join(format!("teamster-join-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (first, second) = (dir.join("a"), dir.join("b"));
        let output = std::process::Command::new(SHELL)
            .args(["-c", JOIN_CGROUP, "sh"])
            .args([&first, &second])
            .args(["--", "/bin/sh", "-c", "echo ran $$ \"$1\"", "x", "-- y"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        let pid = std::fs::read_to_string(&first).unwrap();
        assert_eq!(std::fs::read_to_string(&second).unwrap(), pid);
        // The same process: the shell became the command.
        assert_eq!(said, format!("ran {} -- y\n", pid.trim()));
        // A group it cannot enter stops the command.
        let output = std::process::Command::new(SHELL)
            .args(["-c", JOIN_CGROUP, "sh"])
            .arg(dir.join("missing/cgroup.procs"))
            .args(["--", "/bin/echo", "ran"])
            .output()
            .unwrap();
        assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(125), &b""[..]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn skills_are_bound_read_only_outside_the_workspace() {
        let env = BTreeMap::new();
        let limits = Limits::default();
        let skills = [("pdf".to_owned(), PathBuf::from("/srv/skills/commits/k-c1")), ("xlsx".to_owned(), PathBuf::from("/srv/skills/x"))];
        let (_, args) = SandboxCommand { skills: &skills, ..command(&env, &limits, None) }.argv();
        let args = strings(&args);
        let has = |window: &[&str]| args.windows(window.len()).any(|part| part == window);
        assert!(has(&["--ro-bind-try", "/srv/skills/commits/k-c1", "/skills/pdf"]), "{args:?}");
        assert!(has(&["--ro-bind-try", "/srv/skills/x", "/skills/xlsx", "--remount-ro", "/skills"]), "{args:?}");
        assert!(has(&["--tmpfs", "/skills", "--ro-bind-try"]), "{args:?}");
        assert_eq!(args.iter().filter(|arg| *arg == "--bind").count(), 2);
        assert!(!args.iter().any(|arg| arg.starts_with("/workspace/")), "{args:?}");
    }

    #[test]
    fn without_skills_nothing_is_mounted_for_them() {
        let env = BTreeMap::new();
        let limits = Limits::default();
        let (_, args) = command(&env, &limits, None).argv();
        assert!(!strings(&args).iter().any(|arg| arg.contains("/skills")));
    }

    #[test]
    fn a_network_command_joins_its_namespace_as_the_sandbox_user_and_resolves_publicly() {
        let env = BTreeMap::new();
        let limits = Limits::default();
        let enter = [OsString::from("/usr/bin/nsenter"), OsString::from("--target"), OsString::from("42"), OsString::from("--")];
        let network = Some(NetworkEntry { enter: &enter, resolv_conf: Path::new("/srv/sandboxes/.resolv.conf") });
        let run_as = Some((Path::new("/usr/bin/setpriv"), 7));
        let (program, args) = SandboxCommand { network, ..command(&env, &limits, run_as) }.argv();
        assert_eq!(program, Path::new("/usr/bin/setpriv"));
        let args = strings(&args);
        assert_eq!(args[6..11], ["--", "/usr/bin/nsenter", "--target", "42", "--"]);
        let has = |window: &[&str]| args.windows(window.len()).any(|part| part == window);
        // The namespace is the one set up for it, not an empty one, and not the host's.
        assert!(!has(&["--unshare-net"]) && has(&["--unshare-user"]), "{args:?}");
        assert!(has(&["--ro-bind", "/srv/sandboxes/.resolv.conf", "/etc/resolv.conf"]), "{args:?}");
        assert!(!has(&["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]), "{args:?}");
        // Without a network, nothing of it.
        let args = strings(&command(&env, &limits, run_as).argv().1);
        assert!(!args.iter().any(|arg| arg.contains("nsenter")) && args.iter().any(|arg| arg == "--unshare-net"));
    }

    #[test]
    fn over_the_quota_a_command_cannot_write_to_files() {
        let env = BTreeMap::new();
        let limits = Limits::default();
        let has = |args: &[String], window: &[&str]| args.windows(window.len()).any(|part| part == window);
        let normal = strings(&command(&env, &limits, None).argv().1);
        assert!(has(&normal, &["--fsize=268435456"]) && has(&normal, &["-c", ENTER_AND_RUN]), "{normal:?}");
        let over = strings(&SandboxCommand { over_quota: true, ..command(&env, &limits, None) }.argv().1);
        assert!(has(&over, &["--fsize=0"]) && has(&over, &["-c", ENTER_AND_RUN_OVER_QUOTA, "sh", "src", "echo hi"]), "{over:?}");
    }

    #[test]
    fn as_root_the_command_runs_as_the_sandbox_user() {
        let env = BTreeMap::new();
        let limits = Limits::default();
        let (program, args) = command(&env, &limits, Some((Path::new("/usr/bin/setpriv"), 123_456))).argv();
        assert_eq!(program, Path::new("/usr/bin/setpriv"));
        let args = strings(&args);
        assert_eq!(args[..8], ["--reuid", "123456", "--regid", "123456", "--clear-groups", "--inh-caps=-all", "--", "/usr/bin/bwrap"]);
    }

    #[test]
    fn bwrap_reads_the_seccomp_filter_from_a_descriptor_a_shell_opened() {
        let env = BTreeMap::new();
        let limits = Limits::default();
        let filter = Path::new("/srv/sandboxes/.seccomp-x86_64.bpf");
        let (program, args) = SandboxCommand { seccomp: Some(filter), ..command(&env, &limits, None) }.argv();
        assert_eq!(program, Path::new("/bin/sh"));
        let args = strings(&args);
        let opened = ["-c", OPEN_FILTER, "/srv/sandboxes/.seccomp-x86_64.bpf", "/usr/bin/bwrap", "--seccomp", "9"];
        assert_eq!(args[..6], opened);
        assert_eq!(OPEN_FILTER, format!(r#"exec "$@" {SECCOMP_FD}<"$0""#));

        // As root: setpriv, then the shell, then bwrap.
        let run_as = Some((Path::new("/usr/bin/setpriv"), 7));
        let (program, args) = SandboxCommand { seccomp: Some(filter), ..command(&env, &limits, run_as) }.argv();
        assert_eq!(program, Path::new("/usr/bin/setpriv"));
        let args = strings(&args);
        assert_eq!(args[6..8], ["--", "/bin/sh"]);
        assert_eq!(args[8..14], opened);
        assert_eq!(args.iter().filter(|arg| *arg == "--seccomp").count(), 1);
    }
}
