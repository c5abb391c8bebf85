//! Network sandboxes: a command allowed the network runs in a network namespace of its own,
//! joined to the internet by `slirp4netns` (user-mode networking: the sandbox's packets become
//! ordinary sockets of an unprivileged process on the host), and routed nowhere but the public
//! internet.
//!
//! Per command, [`Network::start`] starts a holder (`unshare --user --net`, as the sandbox's
//! user when the harness runs as root), which owns the namespace and keeps the capabilities of
//! its user namespace; `slirp4netns --disable-host-loopback --disable-dns` attaches a `tap0` to
//! it; the holder then sets, before any of the command's code runs: a `prohibit` route for every
//! range of [`teamster_egress::FORBIDDEN_RANGES`] (loopback, private, shared, link-local with the
//! cloud metadata address, multicast, reserved, and the IPv6 equivalents, IPv4-mapped among
//! them) and for each of the host's own IPv4 addresses (a public one would lead slirp4netns to
//! the host's services from the host itself), a `prohibit` default for IPv6 (slirp4netns carries IPv4 only), its address
//! ([`GUEST_ADDRESS`], a `/32`: no neighbour is on a link), and a default route through
//! slirp4netns's gateway ([`GATEWAY`], `onlink`, itself inside a forbidden range). `bwrap` is
//! then started inside that namespace by `nsenter` (no `--unshare-net`); the command lives in a
//! user namespace nested in the holder's, so it has no capability over the namespace's routes.
//!
//! What the command may reach: connecting to a forbidden address fails at once (`EACCES`) in
//! the namespace; its own `127.0.0.1` is its own loopback, shared with no one (a name that
//! resolves to 127.0.0.1 leads there too); slirp4netns refuses the gateway (no host loopback)
//! and forwards no DNS (its forwarder would reach the host's resolver on any port, and that
//! resolver is usually a loopback or private address): `/etc/resolv.conf` in a network sandbox
//! names public resolvers ([`RESOLV_CONF`]). Nothing is forwarded into the namespace, so a port
//! the command listens on is reachable from no host process.
//!
//! The holder and slirp4netns end with the command: both are killed when the [`Network`] is
//! dropped (the command ended, timed out, or its call was cancelled), and both exit by
//! themselves when the harness dies (the holder reads its standard input to its end, and
//! slirp4netns's exit descriptor is its standard input). Each command has its own namespace:
//! nothing is shared between commands, or between sandboxes.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::SandboxError;
use crate::programs::{SYSTEM_PATH, find_program};

/// The sandbox's address: a host of slirp4netns's virtual network 10.0.2.0/24, alone on its link.
const GUEST_ADDRESS: &str = "10.0.2.100/32";
/// slirp4netns's gateway, through which the public internet is routed.
const GATEWAY: &str = "10.0.2.2";
/// The namespace's interface to slirp4netns.
const DEVICE: &str = "tap0";
/// The interface's MTU (slirp4netns's largest but one, its recommended value).
const MTU: &str = "65520";
/// How long setting up a network namespace may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a failed helper's error output kept for the error message.
const MAX_HELPER_ERROR_BYTES: u64 = 2048;

/// `/etc/resolv.conf` of a network sandbox: public resolvers, reached through slirp4netns like
/// any public address.
pub(crate) const RESOLV_CONF: &str =
    "nameserver 1.1.1.1\nnameserver 9.9.9.9\nnameserver 8.8.8.8\noptions timeout:2 attempts:2\n";

/// The shell that starts the helpers' programs.
const SHELL: &str = "/bin/sh";

/// Runs `$0` with its arguments, its standard output moved to descriptor 3 and its messages to
/// its error output.
const READY_ON_3: &str = r#"exec "$0" "$@" 3>&1 1>&2"#;

/// The holder's shell line: says it started (its namespaces exist), waits for `go` (slirp4netns
/// attached), configures the namespace with `ip` (`$0`) from the lines given as arguments,
/// says it is ready, then waits for its standard input to end.
const HOLDER_SCRIPT: &str = r#"echo started && IFS= read -r go && [ "$go" = go ] && printf '%s\n' "$@" | "$0" -batch - && echo ready && exec cat >/dev/null"#;

/// The host programs a network sandbox needs.
#[derive(Debug)]
pub(crate) struct NetworkTools {
    unshare: PathBuf,
    slirp4netns: PathBuf,
    nsenter: PathBuf,
    ip: PathBuf,
}

impl NetworkTools {
    /// The programs, or why network sandboxes are unavailable here.
    pub(crate) fn find() -> Result<NetworkTools, String> {
        let find = |name: &str, package: &str| {
            find_program(name)
                .ok_or_else(|| format!("`{name}` is not installed (apt-get install {package})"))
        };
        Ok(NetworkTools {
            unshare: find("unshare", "util-linux")?,
            slirp4netns: find("slirp4netns", "slirp4netns")?,
            nsenter: find("nsenter", "util-linux")?,
            ip: find("ip", "iproute2")?,
        })
        .and_then(|tools| tun_access(Path::new(TUN)).map(|()| tools))
    }
}

/// The device slirp4netns opens (inside the namespace, as the sandbox's user) for its `tap0`.
const TUN: &str = "/dev/net/tun";

/// Whether the sandboxes' users may open the TUN device at `path`. Each sandbox has a user of
/// its own when the harness runs as root, so the device must be open to all (mode 0666, the
/// usual one); otherwise the harness's own user must be able to open it.
fn tun_access(path: &Path) -> Result<(), String> {
    let metadata = std::fs::metadata(path)
        .map_err(|error| format!("{} is missing ({error}; modprobe tun)", path.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    let as_root = crate::programs::running_as_root();
    if as_root && mode & 0o006 != 0o006 {
        return Err(format!(
            "{} is not open to the sandboxes' users (mode {mode:04o}; its usual mode is 0666: chmod 0666 {})",
            path.display(),
            path.display()
        ));
    }
    if !as_root {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|error| format!("{} cannot be opened ({error})", path.display()))?;
    }
    Ok(())
}

/// The programs network sandboxes need, found once, or why they are unavailable here.
pub(crate) fn tools() -> Result<&'static NetworkTools, &'static str> {
    static TOOLS: OnceLock<Result<NetworkTools, String>> = OnceLock::new();
    TOOLS
        .get_or_init(NetworkTools::find)
        .as_ref()
        .map_err(String::as_str)
}

/// Writes [`RESOLV_CONF`] at `path` when it is not there (aside, then renamed: a command
/// starting meanwhile, or a replica sharing the root, reads a whole file), readable by every
/// sandbox's user.
pub(crate) async fn write_resolv_conf(path: &Path) -> Result<(), SandboxError> {
    if tokio::fs::read(path)
        .await
        .is_ok_and(|contents| contents == RESOLV_CONF.as_bytes())
    {
        return Ok(());
    }
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let aside = path.with_extension(format!("{}-{started}.tmp", std::process::id()));
    let written = async {
        tokio::fs::write(&aside, RESOLV_CONF).await?;
        tokio::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o644)).await?;
        tokio::fs::rename(&aside, path).await
    };
    if let Err(error) = written.await {
        let _ = tokio::fs::remove_file(&aside).await;
        return Err(SandboxError::io(
            "writing the network sandboxes' resolv.conf",
        )(error));
    }
    Ok(())
}

impl crate::Bubblewrap {
    /// Whether commands may be given a network here (`slirp4netns`, `ip`, `nsenter` and
    /// `unshare` are installed), or why not.
    pub fn network_support() -> Result<(), String> {
        tools().map(drop).map_err(str::to_owned)
    }
}

/// The `ip -batch` lines that configure a network sandbox's namespace: every forbidden range
/// refused first, and each of the host's own addresses (`host`: one that is public would lead
/// slirp4netns to the host's own services, from the host itself, past any firewall), then the
/// interface brought up with its one route out.
pub(crate) fn setup_lines(host: &[Ipv4Addr]) -> Vec<String> {
    let mut lines = vec!["link set lo up".to_owned()];
    lines.extend(
        host.iter()
            .map(|address| format!("route replace prohibit {address}/32")),
    );
    // `replace`: the kernel's own route for ::1 (in the main table) becomes a prohibit route;
    // ::1 stays the namespace's own loopback through the local table, looked up first.
    lines.extend(
        teamster_egress::FORBIDDEN_RANGES
            .iter()
            .map(|range| format!("route replace prohibit {}", range.network)),
    );
    lines.push("route replace prohibit ::/0".to_owned());
    lines.push(format!("addr add {GUEST_ADDRESS} dev {DEVICE}"));
    lines.push(format!("link set {DEVICE} up"));
    lines.push(format!(
        "route add default via {GATEWAY} dev {DEVICE} onlink"
    ));
    lines
}

/// A command's network namespace, alive while this value is: its holder and slirp4netns are
/// killed when it is dropped.
#[derive(Debug)]
pub(crate) struct Network {
    /// The `nsenter` line that starts a program in the namespace.
    enter: Vec<OsString>,
    _holder: Child,
    _holder_stdin: ChildStdin,
    _slirp: Child,
    _slirp_stdin: ChildStdin,
}

impl Network {
    /// Makes a network namespace for one command, as the sandbox's user (`run_as`, when the
    /// harness runs as root). Fails with [`SandboxError::Unavailable`] when it cannot.
    pub(crate) async fn start(
        tools: &NetworkTools,
        run_as: Option<(&Path, u32)>,
    ) -> Result<Network, SandboxError> {
        match tokio::time::timeout(SETUP_TIMEOUT, Box::pin(Network::setup(tools, run_as))).await {
            Ok(result) => result,
            Err(_) => Err(unavailable(format!(
                "setting up its network took longer than {} s",
                SETUP_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The program and arguments that start what follows them inside the namespace, when run
    /// as the sandbox's user.
    pub(crate) fn enter(&self) -> &[OsString] {
        &self.enter
    }

    async fn setup(
        tools: &NetworkTools,
        run_as: Option<(&Path, u32)>,
    ) -> Result<Network, SandboxError> {
        let mut holder = as_user(run_as, &tools.unshare)
            .args([
                "--user",
                "--net",
                "--map-current-user",
                "--keep-caps",
                "--",
                SHELL,
                "-c",
                HOLDER_SCRIPT,
            ])
            .arg(&tools.ip)
            .args(setup_lines(&host_addresses(&tools.ip).await?))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(SandboxError::io("starting the network namespace's holder"))?;
        let mut holder_stdin = holder.stdin.take().expect("stdin is piped");
        let mut holder_out = BufReader::new(holder.stdout.take().expect("stdout is piped"));
        if !said(&mut holder_out, "started").await {
            return Err(unavailable(format!(
                "its network namespace could not be made: {}",
                helper_error(&mut holder).await
            )));
        }
        let pid = holder
            .id()
            .ok_or_else(|| unavailable("the network namespace's holder ended".to_owned()))?;

        // slirp4netns says it is ready on descriptor 3, the pipe a shell moved its standard
        // output to (it writes its messages there); its exit descriptor is its standard input.
        let mut slirp = as_user(run_as, Path::new(SHELL))
            .args(["-c", READY_ON_3])
            .arg(&tools.slirp4netns)
            .args([
                "--ready-fd=3",
                "--exit-fd=0",
                "--disable-host-loopback",
                "--disable-dns",
                "--enable-seccomp",
            ])
            .arg(format!("--mtu={MTU}"))
            .arg(pid.to_string())
            .arg(DEVICE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Never read: a pipe nobody drains would stop it once full.
            .stderr(Stdio::null())
            .spawn()
            .map_err(SandboxError::io("starting slirp4netns"))?;
        let slirp_stdin = slirp.stdin.take().expect("stdin is piped");
        if !ready(slirp.stdout.take().expect("stdout is piped")).await {
            let _ = slirp.start_kill();
            let status = slirp
                .wait()
                .await
                .map(|status| status.to_string())
                .unwrap_or_default();
            return Err(unavailable(format!(
                "slirp4netns could not attach to its namespace ({status})"
            )));
        }

        let go = holder_stdin
            .write_all(b"go\n")
            .await
            .and(holder_stdin.flush().await);
        if go.is_err() || !said(&mut holder_out, "ready").await {
            return Err(unavailable(format!(
                "its network could not be configured: {}",
                helper_error(&mut holder).await
            )));
        }
        // Run as the sandbox's user (after `setpriv`, when the harness runs as root): the owner
        // of the holder's user namespace may enter it, and keeps no capability past `exec`.
        let mut enter = vec![tools.nsenter.as_os_str().to_owned()];
        enter.extend(
            [
                "--target",
                &pid.to_string(),
                "--user",
                "--net",
                "--preserve-credentials",
                "--",
            ]
            .into_iter()
            .map(OsString::from),
        );
        Ok(Network {
            enter,
            _holder: holder,
            _holder_stdin: holder_stdin,
            _slirp: slirp,
            _slirp_stdin: slirp_stdin,
        })
    }
}

/// The host's IPv4 addresses, read now (they may change while the server runs).
async fn host_addresses(ip: &Path) -> Result<Vec<Ipv4Addr>, SandboxError> {
    let output = Command::new(ip)
        .args(["-o", "-4", "addr", "show"])
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(SandboxError::io("listing the host's addresses"))?;
    if !output.status.success() {
        return Err(unavailable(
            "the host's addresses could not be listed (`ip -o -4 addr show` failed)".to_owned(),
        ));
    }
    Ok(parse_addresses(&String::from_utf8_lossy(&output.stdout)))
}

/// The addresses in `ip -o -4 addr show`'s output (`2: eth0    inet 192.0.2.2/24 brd ...`).
fn parse_addresses(listing: &str) -> Vec<Ipv4Addr> {
    let mut addresses: Vec<Ipv4Addr> = listing
        .lines()
        .filter_map(|line| {
            let mut words = line
                .split_whitespace()
                .skip_while(|word| *word != "inet")
                .skip(1);
            words.next()?.split('/').next()?.parse().ok()
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

fn unavailable(reason: String) -> SandboxError {
    SandboxError::Unavailable(format!("a network sandbox cannot be made: {reason}"))
}

/// `setpriv`'s arguments that make the sandbox's user run what follows.
fn setpriv_args(uid: u32) -> Vec<String> {
    let id = uid.to_string();
    [
        "--reuid",
        &id,
        "--regid",
        &id,
        "--clear-groups",
        "--inh-caps=-all",
        "--",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// `program` run as the sandbox's user, with nothing of the harness's environment, killed when
/// dropped.
fn as_user(run_as: Option<(&Path, u32)>, program: &Path) -> Command {
    let mut command = match run_as {
        Some((setpriv, uid)) => {
            let mut command = Command::new(setpriv);
            command.args(setpriv_args(uid)).arg(program);
            command
        }
        None => Command::new(program),
    };
    command
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .current_dir("/")
        .kill_on_drop(true);
    command
}

/// Whether the holder's next line is `word`.
async fn said(out: &mut BufReader<ChildStdout>, word: &str) -> bool {
    let mut line = String::new();
    let mut limited = (&mut *out).take(256);
    limited.read_line(&mut line).await.is_ok() && line.trim_end() == word
}

/// Whether slirp4netns said it is ready (it writes `1` to its ready descriptor).
async fn ready(mut out: ChildStdout) -> bool {
    let mut byte = [0_u8; 1];
    matches!(out.read(&mut byte).await, Ok(1) if byte[0] == b'1')
}

/// What a failed helper wrote to its error output (killed first, so the read ends).
async fn helper_error(child: &mut Child) -> String {
    let _ = child.start_kill();
    let mut text = String::new();
    if let Some(stderr) = child.stderr.take() {
        let _ = stderr
            .take(MAX_HELPER_ERROR_BYTES)
            .read_to_string(&mut text)
            .await;
    }
    let text = text.trim();
    if text.is_empty() {
        "it ended without saying why".to_owned()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tun_device_the_sandboxes_users_cannot_open_is_named_with_its_fix() {
        let dir = std::env::temp_dir().join(format!("teamster-tun-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let device = dir.join("tun");
        std::fs::write(&device, b"").unwrap();
        let missing = tun_access(&dir.join("absent")).unwrap_err();
        assert!(missing.contains("modprobe tun"), "{missing}");

        std::fs::set_permissions(&device, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(tun_access(&device), Ok(()));
        std::fs::set_permissions(&device, std::fs::Permissions::from_mode(0o000)).unwrap();
        let shut = tun_access(&device).unwrap_err();
        if crate::programs::running_as_root() {
            // Root could open it, but the sandboxes' own users could not.
            assert!(shut.contains("mode 0000") && shut.contains("chmod 0666"), "{shut}");
        } else {
            assert!(shut.contains("cannot be opened"), "{shut}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_hosts_own_addresses_are_refused_too() {
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n\
                       4: eth0    inet 203.0.113.7/24 brd 203.0.113.255 scope global eth0\\       valid_lft forever\n\
                       5: eth1    inet 81.2.69.142/32 scope global eth1\\       valid_lft forever\n";
        let host = parse_addresses(listing);
        assert_eq!(
            host,
            [
                "81.2.69.142".parse::<Ipv4Addr>().unwrap(),
                "127.0.0.1".parse().unwrap(),
                "203.0.113.7".parse().unwrap()
            ]
        );
        let lines = setup_lines(&host);
        let up = lines
            .iter()
            .position(|line| line == "link set tap0 up")
            .unwrap();
        // A public address of the host is refused like a private one, before the interface is up.
        assert!(
            lines[..up]
                .iter()
                .any(|line| line == "route replace prohibit 81.2.69.142/32"),
            "{lines:?}"
        );
    }

    #[test]
    fn every_forbidden_range_is_refused_before_the_interface_comes_up() {
        let lines = setup_lines(&[]);
        let up = lines
            .iter()
            .position(|line| line == "link set tap0 up")
            .unwrap();
        for range in teamster_egress::FORBIDDEN_RANGES {
            let refused = lines
                .iter()
                .position(|line| *line == format!("route replace prohibit {}", range.network));
            assert!(
                refused.is_some_and(|at| at < up),
                "{} is not refused first: {lines:?}",
                range.network
            );
        }
        for wanted in [
            "route replace prohibit 127.0.0.0/8",
            "route replace prohibit 169.254.0.0/16",
            "route replace prohibit ::/0",
        ] {
            assert!(
                lines.iter().take(up).any(|line| line == wanted),
                "{wanted}: {lines:?}"
            );
        }
        assert_eq!(
            lines.last().unwrap(),
            "route add default via 10.0.2.2 dev tap0 onlink"
        );
        // The gateway and the address are themselves in a forbidden range: neither can be a destination.
        assert!(teamster_egress::forbidden(GATEWAY.parse().unwrap()).is_some());
    }
}
