//! Network sandboxes with real bubblewrap and slirp4netns, attacked: a command allowed the
//! network must not reach the host's loopback (the server's own API, an MCP server), another
//! sandbox's loopback, or a host address in a private range, nor receive a connection a host
//! process makes to its loopback; its namespace is set up for the public internet only, and
//! nothing of it outlives the command.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use teamster_sandbox::{Bubblewrap, ExecOutput, ExecRequest, Limits, SandboxProvider};

mod common;

use common::Root;

async fn provider(root: &Root) -> Bubblewrap {
    Bubblewrap::network_support()
        .expect("network sandboxes work here (apt-get install slirp4netns iproute2)");
    common::provider(root, Limits::default()).await
}

/// Connects to each `host:port` argument and says, per line, `CONNECTED` (after sending a
/// request with a credential) or the error's name.
const PROBE: &str = r#"
import errno, socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=3)
        connection.sendall(b"GET / HTTP/1.0\r\nAuthorization: Bearer stolen\r\n\r\n")
        print(target, "CONNECTED", flush=True)
    except OSError as error:
        print(target, errno.errorcode.get(error.errno, str(error)), flush=True)
"#;

/// A network command running [`PROBE`] against `targets`.
fn probe(targets: &[String]) -> ExecRequest {
    ExecRequest {
        command: format!(r#"python3 -c "$TEAMSTER_PROBE" {}"#, targets.join(" ")),
        env: BTreeMap::from([("TEAMSTER_PROBE".to_owned(), PROBE.to_owned())]),
        timeout_seconds: Some(30),
        network: true,
        ..ExecRequest::default()
    }
}

fn network(command: &str) -> ExecRequest {
    ExecRequest {
        command: command.to_owned(),
        timeout_seconds: Some(30),
        network: true,
        ..ExecRequest::default()
    }
}

fn ok(output: &ExecOutput) -> &str {
    assert_eq!(output.exit_code, Some(0), "{output:?}");
    &output.stdout
}

/// The outcome [`PROBE`] printed for `target`.
fn outcome<'a>(output: &'a str, target: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| {
            line.strip_prefix(target)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no outcome for {target} in {output:?}"))
}

/// Whether a connection reached `listener` (one made would already wait in its backlog).
async fn reached(listener: &tokio::net::TcpListener) -> bool {
    tokio::time::timeout(Duration::from_millis(100), listener.accept())
        .await
        .is_ok()
}

#[tokio::test]
async fn a_network_sandbox_cannot_reach_the_hosts_loopback() {
    let root = Root::new("loopback");
    let sandboxes = provider(&root).await;
    let id = sandboxes
        .provision("ses_loopback", &common::owner())
        .await
        .unwrap()
        .sandbox_id;
    // Where the server's own API and a local MCP server listen.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let v6 = tokio::net::TcpListener::bind("[::1]:0").await.ok();
    let mut targets = vec![
        format!("127.0.0.1:{port}"),
        // A name resolving to 127.0.0.1 leads to the sandbox's own loopback, never the host's.
        format!("localhost:{port}"),
        format!("127.0.0.2:{port}"),
        // slirp4netns's gateway and DNS forwarder, which can lead to the host's loopback.
        format!("10.0.2.2:{port}"),
        format!("10.0.2.3:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
    ];
    if let Some(v6) = &v6 {
        targets.push(format!("[::1]:{}", v6.local_addr().unwrap().port()));
    }
    let output = sandboxes.exec(&id, probe(&targets)).await.unwrap();
    let said = ok(&output);
    for target in &targets {
        assert_ne!(
            outcome(said, target),
            "CONNECTED",
            "{target} was reached: {said}"
        );
    }
    assert!(
        !reached(&listener).await,
        "the host's loopback was reached: {said}"
    );
    if let Some(v6) = &v6 {
        assert!(!reached(v6).await, "the host's ::1 was reached: {said}");
    }
    // The forwarders leading out of the namespace are refused by its routes.
    assert_eq!(
        outcome(said, &format!("10.0.2.2:{port}")),
        "EACCES",
        "{said}"
    );
    assert_eq!(
        outcome(said, &format!("10.0.2.3:{port}")),
        "EACCES",
        "{said}"
    );
}

/// Listens on the sandbox's 127.0.0.1, writes the port to /workspace/port, and counts the
/// connections it accepts until /workspace/done appears.
const LISTEN: &str = r#"
import os, socket, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(8)
server.setblocking(False)
with open("/workspace/port.tmp", "w") as out:
    out.write(str(server.getsockname()[1]))
os.rename("/workspace/port.tmp", "/workspace/port")
accepted = 0
deadline = time.monotonic() + 20
while not os.path.exists("/workspace/done") and time.monotonic() < deadline:
    try:
        connection, _ = server.accept()
        accepted += 1
        print("received", connection.recv(200), flush=True)
    except BlockingIOError:
        time.sleep(0.01)
print("accepted", accepted, flush=True)
"#;

#[tokio::test]
async fn a_sandboxs_loopback_listener_is_reached_by_no_other_sandbox_and_no_host_process() {
    let root = Root::new("neighbours");
    let sandboxes = std::sync::Arc::new(provider(&root).await);
    let listening = sandboxes
        .provision("ses_tenant_c", &common::owner())
        .await
        .unwrap()
        .sandbox_id;
    let other = sandboxes
        .provision("ses_tenant_d", &common::owner())
        .await
        .unwrap()
        .sandbox_id;
    let workspace = root.0.join(&listening).join("workspace");

    let server = {
        let sandboxes = sandboxes.clone();
        let listening = listening.clone();
        let request = ExecRequest {
            env: BTreeMap::from([("TEAMSTER_LISTEN".to_owned(), LISTEN.to_owned())]),
            ..network(r#"python3 -c "$TEAMSTER_LISTEN""#)
        };
        tokio::spawn(async move { sandboxes.exec(&listening, request).await })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(workspace.join("port")) {
            break port.trim().parse::<u16>().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the listening sandbox never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // Another tenant's network sandbox tries the port on its loopback...
    let target = format!("127.0.0.1:{port}");
    let from_other = sandboxes
        .exec(&other, probe(std::slice::from_ref(&target)))
        .await
        .unwrap();
    assert_ne!(
        outcome(ok(&from_other), &target),
        "CONNECTED",
        "{from_other:?}"
    );
    // ...and a host process (an admin's MCP client whose server is down) sends its credential
    // to the host's 127.0.0.1 at that port.
    if let Ok(mut connection) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        use tokio::io::AsyncWriteExt;
        let _ = connection
            .write_all(b"POST /mcp HTTP/1.1\r\nAuthorization: Bearer admin-secret\r\n\r\n")
            .await;
    }

    std::fs::write(workspace.join("done"), "").unwrap();
    let served = server.await.unwrap().unwrap();
    let said = ok(&served);
    assert!(
        said.contains("accepted 0"),
        "the sandbox's listener was reached: {said}"
    );
    assert!(
        !said.contains("admin-secret"),
        "a host process's credential reached the sandbox: {said}"
    );
}

/// The host's address on its outbound interface (no packet is sent).
fn host_address() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket
        .connect("192.0.2.1:9")
        .or_else(|_| socket.connect("8.8.8.8:53"))
        .ok()?;
    socket
        .local_addr()
        .ok()
        .map(|address| address.ip())
        .filter(|ip| !ip.is_unspecified())
}

#[tokio::test]
async fn private_and_metadata_addresses_are_refused_and_only_the_public_internet_is_routed() {
    let root = Root::new("private");
    let sandboxes = provider(&root).await;
    let id = sandboxes.provision("ses_private", &common::owner()).await.unwrap().sandbox_id;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut targets = vec![
        "169.254.169.254:80".to_owned(),
        "10.1.2.3:80".to_owned(),
        "192.168.1.1:80".to_owned(),
        "172.16.0.1:80".to_owned(),
        "100.64.0.1:80".to_owned(),
    ];
    let host = host_address().filter(|ip| teamster_egress::forbidden(*ip).is_some());
    match host {
        Some(ip) => targets.push(SocketAddr::new(ip, port).to_string()),
        None => eprintln!(
            "the host has no address in a forbidden range on its outbound interface; that part is skipped"
        ),
    }
    let output = sandboxes.exec(&id, probe(&targets)).await.unwrap();
    let said = ok(&output);
    for target in &targets {
        // Refused by the namespace's prohibit routes, at once.
        assert_eq!(outcome(said, target), "EACCES", "{target}: {said}");
    }
    assert!(
        !reached(&listener).await,
        "the host's private address was reached: {said}"
    );

    // What the namespace has: its interface with a default route through slirp4netns, public
    // resolvers, and a public address routed out (not refused; with no internet here it fails
    // some other way).
    let public = "1.1.1.1:53".to_owned();
    let setup = ok(&sandboxes
        .exec(&id, network("cat /proc/net/route /etc/resolv.conf"))
        .await
        .unwrap())
    .to_owned();
    assert!(
        setup
            .lines()
            .any(|line| line.starts_with("tap0\t00000000\t0202000A")),
        "no default route via 10.0.2.2: {setup}"
    );
    assert!(setup.contains("nameserver 1.1.1.1"), "{setup}");
    let out = sandboxes
        .exec(&id, probe(std::slice::from_ref(&public)))
        .await
        .unwrap();
    assert_ne!(outcome(ok(&out), &public), "EACCES", "{out:?}");
    assert_ne!(outcome(ok(&out), &public), "ENETUNREACH", "{out:?}");
}

/// The live processes this test process started (zombies aside): the sandbox's helpers, if
/// any outlived their command.
fn live_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter_map(|stat| {
            let (head, tail) = stat.rsplit_once(") ")?;
            let mut fields = tail.split_whitespace();
            let state = fields.next()?;
            let parent = fields.next()?;
            (parent == me && state != "Z").then(|| head.to_owned())
        })
        .collect()
}

async fn assert_no_children_left() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = live_children();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_network_helpers_end_with_the_command_timed_out_or_cancelled() {
    let root = Root::new("helpers");
    let sandboxes = std::sync::Arc::new(provider(&root).await);
    let id = sandboxes.provision("ses_helpers", &common::owner()).await.unwrap().sandbox_id;

    let ran = sandboxes.exec(&id, network("echo hi")).await.unwrap();
    assert_eq!(ok(&ran), "hi\n");
    assert_no_children_left().await;

    let timed = sandboxes
        .exec(
            &id,
            ExecRequest {
                timeout_seconds: Some(1),
                ..network("sleep 600")
            },
        )
        .await
        .unwrap();
    assert!(timed.timed_out, "{timed:?}");
    assert_no_children_left().await;

    let started = root.0.join(&id).join("workspace").join("started");
    let call = {
        let (sandboxes, id) = (sandboxes.clone(), id.clone());
        tokio::spawn(async move {
            sandboxes
                .exec(&id, network("touch started && sleep 600"))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    call.abort();
    let _ = call.await;
    assert_no_children_left().await;
}
