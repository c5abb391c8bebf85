//! Attacks on the sandbox's confinement with real bubblewrap: the kernel interfaces the seccomp
//! filter shuts (nested user namespaces, `io_uring`, the key ring, `bpf`, `perf_event_open`,
//! `userfaultfd`), the memory, tmpfs and process bombs the cgroup and the sized mounts contain,
//! and the download path's refusal of workspace links leading to the host.

use std::collections::BTreeMap;
use std::path::PathBuf;

use teamster_sandbox::{ExecOutput, ExecRequest, Limits, SandboxProvider};

mod common;

use common::{provider, Root};

fn run(command: &str) -> ExecRequest {
    ExecRequest { command: command.to_owned(), timeout_seconds: Some(30), env: BTreeMap::new(), ..ExecRequest::default() }
}

fn ok(output: &ExecOutput) -> &str {
    assert_eq!(output.exit_code, Some(0), "{output:?}");
    &output.stdout
}

/// System call numbers of the calls the attacks make, on this architecture.
fn numbers() -> BTreeMap<&'static str, u32> {
    let table: &[(&str, u32, u32)] = &[
        // name, x86_64, aarch64
        ("unshare", 272, 97),
        ("setns", 308, 268),
        ("clone3", 435, 435),
        ("io_uring_setup", 425, 425),
        ("keyctl", 250, 219),
        ("bpf", 321, 280),
        ("perf_event_open", 298, 241),
        ("userfaultfd", 323, 282),
        ("ptrace", 101, 117),
        ("personality", 135, 92),
    ];
    let aarch64 = cfg!(target_arch = "aarch64");
    table.iter().map(|(name, x86_64, arm)| (*name, if aarch64 { *arm } else { *x86_64 })).collect()
}

/// A Python program making each call through `ctypes` and printing `name errno` (0: it worked).
fn python_calls(calls: &[(&str, &str)]) -> String {
    let numbers = numbers();
    let mut program = String::from(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\nbuf = ctypes.create_string_buffer(256)\n",
    );
    for (name, arguments) in calls {
        let nr = numbers[name];
        program.push_str(&format!(
            "ctypes.set_errno(0)\nr = libc.syscall({nr}, {arguments})\nprint('{name}', ctypes.get_errno() if r == -1 else 0, flush=True)\n"
        ));
    }
    format!("python3 -c \"{}\"", program.replace('"', "\\\""))
}

#[tokio::test]
async fn the_kernels_risky_interfaces_are_shut() {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return;
    }
    let root = Root::new("seccomp");
    let sandboxes = provider(&root, Limits::default()).await;
    let id = sandboxes.provision("ses_seccomp", &common::owner()).await.unwrap().sandbox_id;

    // A nested user namespace (root with CAP_SYS_ADMIN inside it) cannot be made, by the tool
    // or by a program calling unshare or clone itself.
    for attempt in ["unshare -U true", "unshare -r -n true", "unshare --user --map-root-user id"] {
        let refused = sandboxes.exec(&id, run(attempt)).await.unwrap();
        assert_ne!(refused.exit_code, Some(0), "{attempt}: {refused:?}");
    }
    // Each call's arguments are harmless or invalid: without the filter every one answers
    // something other than EPERM (a descriptor, a key ring, EINVAL, EFAULT, EBADF, ESRCH).
    let calls = [
        ("unshare", "0x10000000"),
        ("setns", "-1, 0x10000000"),
        ("io_uring_setup", "1, buf"),
        ("keyctl", "0, -3, 0"),
        ("bpf", "999, None, 0"),
        ("perf_event_open", "None, 0, -1, -1, 0"),
        ("userfaultfd", "1"),
        ("ptrace", "16, 999999, 0, 0"),
        ("personality", "0x0040000"),
        ("clone3", "None, 0"),
    ];
    let answered = sandboxes.exec(&id, run(&python_calls(&calls))).await.unwrap();
    let errnos: BTreeMap<&str, i32> = ok(&answered)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, errno)| (name, errno.parse().unwrap()))
        .collect();
    let expected: BTreeMap<&str, i32> = calls
        .iter()
        .map(|(name, _)| (*name, if *name == "clone3" { libc_enosys() } else { 1 }))
        .collect();
    assert_eq!(errnos, expected, "{answered:?}");
    // clone3 fails with ENOSYS, so the C library starts threads with clone, which is allowed.
    let threads = "python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join()'";
    assert_eq!(ok(&sandboxes.exec(&id, run(threads)).await.unwrap()), "thread\n");
}

/// `ENOSYS`, as Linux numbers it.
fn libc_enosys() -> i32 {
    38
}

#[tokio::test]
async fn ordinary_programs_still_work_under_the_filter() {
    let root = Root::new("ordinary");
    let sandboxes = provider(&root, Limits::default()).await;
    let id = sandboxes.provision("ses_ordinary", &common::owner()).await.unwrap().sandbox_id;
    let script = "set -e; sh -c 'echo shell'; (sleep 0 & wait); \
        python3 -c 'import os, subprocess, sys; print(subprocess.run([\"echo\", \"child\"], capture_output=True, text=True).stdout.strip(), flush=True); pid = os.fork(); pid or os._exit(0); os.waitpid(pid, 0); print(\"forked\")'; \
        git init -q repo && cd repo && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m one && git log --format=%s";
    let output = sandboxes.exec(&id, run(script)).await.unwrap();
    let said: Vec<&str> = ok(&output).lines().filter(|line| !line.is_empty()).collect();
    assert_eq!(said, ["shell", "child", "forked", "one"], "{output:?}");
}

#[tokio::test]
async fn a_download_through_a_link_to_the_host_answers_alike_whether_the_target_exists() {
    use teamster_sandbox::SandboxError;
    let root = Root::new("download");
    let sandboxes = provider(&root, Limits::default()).await;
    let id = sandboxes.provision("ses_download", &common::owner()).await.unwrap().sandbox_id;
    // A host file the sandbox cannot see, and a path beside it that does not exist.
    let secret = root.0.with_extension("secret");
    std::fs::write(&secret, "host secret").unwrap();
    let missing = root.0.with_extension("missing");
    let depth = "../".repeat(root.0.components().count() + 4);
    let links = format!(
        "ln -s {secret} abs-present && ln -s {missing} abs-missing && ln -s {depth}{secret} rel-present && ln -s {depth}{missing} rel-missing \
         && mkdir -p data && echo inside > data/real.txt && ln -s data/real.txt inside && ln -s ../workspace/data/real.txt /tmp/back",
        secret = secret.display(),
        missing = missing.display(),
        depth = depth.trim_end_matches('/'),
    );
    ok(&sandboxes.exec(&id, run(&links)).await.unwrap());

    let mut answers = Vec::new();
    for link in ["abs-present", "abs-missing", "rel-present", "rel-missing"] {
        let error = sandboxes.read_file(&id, link).await.unwrap_err();
        let SandboxError::InvalidPath { path, reason } = &error else { panic!("{link}: {error:?}") };
        assert_eq!(path, link);
        answers.push(reason.clone());
    }
    assert_eq!(answers, vec!["it leads outside the workspace"; 4]);
    std::fs::remove_file(&secret).unwrap();

    // Links that stay inside still work.
    assert_eq!(sandboxes.read_file(&id, "inside").await.unwrap(), b"inside\n");
    assert_eq!(sandboxes.read_file(&id, "data/real.txt").await.unwrap(), b"inside\n");
    // `/tmp/back` climbs out of the sandbox's `/tmp` on the host: refused as well.
    assert!(matches!(sandboxes.read_file(&id, "/tmp/back").await, Err(SandboxError::InvalidPath { .. })));
}

/// Limits small enough that the bombs below go off quickly: commands must get a control group.
fn small(limits: Limits) -> Limits {
    Limits { cgroups: teamster_sandbox::CgroupPolicy::Required, ..limits }
}

/// The directories this process's commands' control groups are made in (its own group in the
/// memory hierarchy, v1 or v2).
fn cgroup_parents() -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut parents = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|name| name == "memory") {
            parents.push(PathBuf::from("/sys/fs/cgroup/memory").join(path));
        } else if controllers.is_empty() {
            let dir = PathBuf::from("/sys/fs/cgroup").join(path);
            parents.push(if dir.ends_with("teamster-harness") { dir.parent().unwrap().to_path_buf() } else { dir });
        }
    }
    parents
}

/// Waits (at most five seconds) until no control group of this process's commands is left.
async fn assert_no_cgroups_left() {
    let prefix = format!("teamster-{}-", std::process::id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left: Vec<PathBuf> = cgroup_parents()
            .iter()
            .filter_map(|parent| std::fs::read_dir(parent).ok())
            .flat_map(|entries| entries.flatten())
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
            .map(|entry| entry.path())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "control groups left behind: {left:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn processes_together_stay_within_the_commands_memory() {
    let root = Root::new("memory");
    let sandboxes = provider(&root, small(Limits { max_command_memory_bytes: 256 << 20, ..Limits::default() })).await;
    let id = sandboxes.provision("ses_memory", &common::owner()).await.unwrap().sandbox_id;
    // Three processes of 160 MiB each, every page written: each is under RLIMIT_AS, and before
    // control groups the three held 480 MiB of the host's memory. Each holds its memory until
    // all three have allocated, or one of them died (a loaded host may run them one after the
    // other, which alone would keep them under the limit); two alive once all three allocated
    // would be over it.
    let bomb = r#"dir=$(mktemp -d); for i in 1 2 3; do DIR="$dir" python3 -c "
import os, time
d = os.environ['DIR']
def marks(kind):
    return [int(n.split('.')[1]) for n in os.listdir(d) if n.startswith(kind)]
def dead(pid):
    try:
        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z'
    except FileNotFoundError:
        return True
open(f'{d}/started.{os.getpid()}', 'w').close()
a = b'x' * (160 << 20)
open(f'{d}/held.{os.getpid()}', 'w').close()
end = time.monotonic() + 10
while len(marks('held')) < 3 and not any(map(dead, marks('started'))) and time.monotonic() < end:
    time.sleep(0.01)
if len(marks('held')) == 3:
    print('held', flush=True)
" & done; wait; rm -r "$dir"; echo waited"#;
    let bombed = sandboxes.exec(&id, run(bomb)).await.unwrap();
    // Two would be over the limit together: the kernel killed inside the group until one fit.
    assert!(bombed.stdout.contains("waited"), "{bombed:?}");
    assert!(bombed.stdout.matches("held").count() <= 1, "{bombed:?}");
    assert!(bombed.stderr.contains("used more than 256 MiB of memory"), "{bombed:?}");
    // Memory files (memfd: shared memory pages of no mount, written, never mapped, so outside
    // RLIMIT_AS; each under the file size limit) are charged the same.
    let memfd = "python3 -c \"import os\nfor _ in range(3):\n    fd = os.memfd_create('m')\n    [os.write(fd, b'x' * (1 << 20)) for _ in range(120)]\nprint('wrote', os.fstat(fd).st_size)\"";
    let wrote = sandboxes.exec(&id, run(memfd)).await.unwrap();
    assert!(!wrote.stdout.contains("wrote"), "{wrote:?}");
    // The harness (this test) is alive, and the sandbox still serves.
    assert_eq!(ok(&sandboxes.exec(&id, run("echo fine")).await.unwrap()), "fine\n");
    assert_no_cgroups_left().await;
}

#[tokio::test]
async fn writing_into_the_sandboxs_tmpfs_mounts_is_contained() {
    let root = Root::new("tmpfs");
    let limits = small(Limits { max_command_memory_bytes: 256 << 20, max_shm_bytes: 1 << 20, ..Limits::default() });
    let sandboxes = provider(&root, limits).await;
    let id = sandboxes.provision("ses_tmpfs", &common::owner()).await.unwrap().sandbox_id;
    // Each writes up to 1 GB into a tmpfs (host memory, outside the disk quota), then says how
    // much landed.
    for target in ["/big", "/dev/big", "/dev/shm/big", "/run/big", "/skills-free/big"] {
        let dir = target.rsplit_once('/').unwrap().0;
        let command = format!("mkdir -p {dir:?} 2>/dev/null; head -c 1000000000 /dev/zero > {target}; echo landed $(stat -c %s {target} 2>/dev/null || echo 0)");
        let output = sandboxes.exec(&id, run(&command)).await.unwrap();
        let landed: u64 = output.stdout.trim().strip_prefix("landed ").and_then(|bytes| bytes.parse().ok()).unwrap_or_else(|| panic!("{target}: {output:?}"));
        assert!(landed <= 1 << 20, "{target}: {landed} bytes landed: {output:?}");
    }
    // Shared memory still works, within its size.
    let shm = "python3 -c \"from multiprocessing import shared_memory as s; m = s.SharedMemory(create=True, size=4096); m.buf[0] = 7; print(m.buf[0]); m.close(); m.unlink()\"";
    assert_eq!(ok(&sandboxes.exec(&id, run(shm)).await.unwrap()), "7\n");
    assert_eq!(ok(&sandboxes.exec(&id, run("echo fine")).await.unwrap()), "fine\n");
    assert_no_cgroups_left().await;
}

#[tokio::test]
async fn a_commands_cpu_time_is_bounded() {
    let root = Root::new("cpu");
    let sandboxes = provider(&root, small(Limits { max_command_cpu_millis: 100, ..Limits::default() })).await;
    let id = sandboxes.provision("ses_cpu", &common::owner()).await.unwrap().sandbox_id;
    // A process spinning until it has used 0.15 CPU seconds past its start-up (which a loaded
    // host makes dearer): a few tenths of a second unbounded (more on a loaded machine), but at
    // a tenth of a CPU no less than 1.4 s, however idle the host.
    let spin = "python3 -c \"import time\ns = time.time()\nc = time.process_time()\nwhile time.process_time() - c < 0.15: pass\nprint(time.time() - s)\"";
    let output = sandboxes.exec(&id, run(spin)).await.unwrap();
    let wall: f64 = ok(&output).trim().parse().unwrap();
    assert!(wall > 1.0, "0.15 CPU seconds took {wall} s: {output:?}");
    assert_no_cgroups_left().await;
}

#[tokio::test]
async fn a_fork_bomb_is_stopped_at_the_commands_process_limit() {
    let root = Root::new("fork");
    let sandboxes = provider(&root, small(Limits { max_processes: 32, ..Limits::default() })).await;
    let id = sandboxes.provision("ses_fork", &common::owner()).await.unwrap().sandbox_id;
    let bomb = "python3 -c \"import os, time\nn = 0\ntry:\n    for i in range(100):\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\nexcept OSError as error:\n    print('refused', error.errno)\nprint(n)\"";
    let started = std::time::Instant::now();
    let output = sandboxes.exec(&id, ExecRequest { timeout_seconds: Some(2), ..run(bomb) }).await.unwrap();
    let said: Vec<&str> = output.stdout.lines().collect();
    let forked: u64 = said.get(1).and_then(|count| count.parse().ok()).unwrap_or_else(|| panic!("{output:?}"));
    // EAGAIN, before the limit: bwrap, its init, the shell and python count too.
    assert!(said[0] == "refused 11" && forked < 32, "{output:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "{output:?}");
    assert_eq!(ok(&sandboxes.exec(&id, run("echo fine")).await.unwrap()), "fine\n");
    assert_no_cgroups_left().await;
}
