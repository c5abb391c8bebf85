//! The MCP client against a real server written with the official Python `mcp` package
//! (`tests/mcp_servers/tools_server.py`), over stdio, streamable HTTP and the legacy SSE transport.
//!
//! The interpreter comes from `TEAMSTER_TEST_PYTHON` (scripts/test points it at `.venv`, where
//! `tests/conformance/requirements.txt` installs `mcp`). Without it these tests fail, never pass
//! silently. Each test that does not depend on the transport runs over both, from one table.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use teamster_mcp::{
    BearerTokenProvider, HttpTransport, McpConnection, McpError, McpServerConfig, StdioTransport, Transport,
};
use teamster_protocol::ToolInfo;
use teamster_tools::{CallContext, ProgressSink, ToolAnnotations, ToolOutput, ToolProgress, ToolSource};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Stdio,
    /// Streamable HTTP.
    Http,
    /// The legacy HTTP+SSE transport.
    Sse,
}

const KINDS: [Kind; 3] = [Kind::Stdio, Kind::Http, Kind::Sse];
const HTTP_KINDS: [Kind; 2] = [Kind::Http, Kind::Sse];

fn python() -> String {
    std::env::var("TEAMSTER_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "TEAMSTER_TEST_PYTHON is not set: these tests need a Python with the `mcp` package \
             (scripts/test sets it to .venv/bin/python after installing tests/conformance/requirements.txt)"
        )
    })
}

fn server_script() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_servers/tools_server.py");
    path.to_string_lossy().into_owned()
}

/// A test server: for stdio, only the command the connection will spawn; over HTTP (streamable
/// or SSE), a running server process (killed on drop) and its URL.
struct TestServer {
    kind: Kind,
    transport: Transport,
    _process: Option<Child>,
}

impl TestServer {
    async fn start(kind: Kind, extra_args: &[&str]) -> TestServer {
        let python = python();
        let script = server_script();
        match kind {
            Kind::Stdio => {
                let mut args = vec![script, "--transport".to_owned(), "stdio".to_owned()];
                args.extend(extra_args.iter().map(|arg| arg.to_string()));
                TestServer {
                    kind,
                    transport: Transport::Stdio(StdioTransport::new(python, args)),
                    _process: None,
                }
            }
            Kind::Http | Kind::Sse => {
                let (flag, path) =
                    if kind == Kind::Http { ("streamable-http", "mcp") } else { ("sse", "sse") };
                let mut process = Command::new(python)
                    .args([script.as_str(), "--transport", flag, "--port", "0"])
                    .args(extra_args)
                    .stdout(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .expect("start the HTTP test server");
                let stdout = process.stdout.take().expect("stdout is piped");
                let mut lines = BufReader::new(stdout).lines();
                let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                    .await
                    .expect("the HTTP test server did not start within 30 s")
                    .expect("read the server's stdout")
                    .expect("the HTTP test server exited before listening");
                let port = line
                    .strip_prefix("LISTENING ")
                    .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
                let url = format!("http://127.0.0.1:{port}/{path}");
                let transport = http_transport(kind, HttpTransport::new(url));
                TestServer { kind, transport, _process: Some(process) }
            }
        }
    }

    fn config(&self) -> McpServerConfig {
        McpServerConfig::new("srv-1", "tester", self.transport.clone())
    }

    fn http(&self) -> HttpTransport {
        match &self.transport {
            Transport::StreamableHttp(http) | Transport::Sse(http) => http.clone(),
            Transport::Stdio(_) => panic!("not an HTTP server"),
        }
    }

    /// A configuration of this server's HTTP transport with other credentials.
    fn config_with(&self, http: HttpTransport) -> McpServerConfig {
        McpServerConfig::new("srv-1", "tester", http_transport(self.kind, http))
    }

    async fn connect(&self) -> McpConnection {
        self.connect_with(self.config()).await
    }

    async fn connect_with(&self, config: McpServerConfig) -> McpConnection {
        McpConnection::connect(config)
            .await
            .unwrap_or_else(|error| panic!("{:?}: connect: {error}", self.kind))
    }
}

fn http_transport(kind: Kind, http: HttpTransport) -> Transport {
    match kind {
        Kind::Http => Transport::StreamableHttp(http),
        Kind::Sse => Transport::Sse(http),
        Kind::Stdio => panic!("not an HTTP transport"),
    }
}

#[tokio::test]
async fn initialize_reports_the_server_and_the_event_entry() {
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        let info = connection.server_info();
        assert_eq!(info.name.as_deref(), Some("teamster-test-server"), "{kind:?}");
        assert_eq!(info.version.as_deref(), Some("1.2.3"), "{kind:?}");
        assert_eq!(info.protocol_version, "2025-11-25", "{kind:?}");
        assert!(info.capabilities.get("tools").is_some(), "{kind:?}: {}", info.capabilities);
        assert!(connection.is_alive());

        let entry = connection.init_event_entry();
        assert_eq!((entry.id.as_str(), entry.name.as_str()), ("srv-1", "tester"));
        match kind {
            Kind::Stdio => assert_eq!((entry.transport_type, entry.session_id), (None, None)),
            Kind::Http => {
                assert_eq!(entry.transport_type.as_deref(), Some("streamable-http"));
                assert!(entry.session_id.is_some_and(|id| !id.is_empty()));
            }
            Kind::Sse => assert_eq!((entry.transport_type.as_deref(), entry.session_id), (Some("sse"), None)),
        }
    }
}

#[tokio::test]
async fn listing_follows_cursors_and_maps_annotations() {
    for kind in KINDS {
        let server = TestServer::start(kind, &["--page-size", "3"]).await;
        let connection = server.connect().await;
        let tools = connection.list().await.expect("list");
        let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "echo",
                "add",
                "write_note",
                "delete_everything",
                "fail",
                "slow",
                "cancelled_calls",
                "big",
                "counter",
                "whoami",
                "picture",
                "crash",
                "getenv",
                "phases",
                "lookup",
                "request_meta"
            ],
            "{kind:?}"
        );
        let tool = |name: &str| tools.iter().find(|tool| tool.name == name).expect(name);
        let hints =
            |read_only, destructive, idempotent| ToolAnnotations { read_only, destructive, idempotent };
        assert_eq!(tool("echo").annotations, hints(true, false, true));
        assert_eq!(tool("write_note").annotations, hints(false, false, false));
        assert_eq!(tool("delete_everything").annotations, hints(false, true, false));
        // No hints at all: the MCP defaults, a destructive write.
        assert_eq!(tool("fail").annotations, hints(false, true, false));
        assert_eq!(tool("lookup").annotations, hints(false, true, false));
        assert_eq!(tool("lookup").description, "Looks a word up; listed with a title and no hints at all.");

        // The entries stay as the server gave them, and the tools above are theirs.
        let listed = connection.list_entries().await.expect("list entries");
        assert_eq!(listed.iter().map(|listed| listed.tool.clone()).collect::<Vec<_>>(), tools, "{kind:?}");
        let entry = |name: &str| &listed.iter().find(|listed| listed.tool.name == name).expect(name).entry;
        assert_eq!(entry("echo")["annotations"], serde_json::json!({"readOnlyHint": true, "idempotentHint": true}));
        assert_eq!(entry("lookup")["title"], "Look up a word");
        assert_eq!(entry("lookup").get("annotations"), None, "{kind:?}");
        assert_eq!(entry("fail").get("title"), None);

        let echo = tool("echo");
        assert_eq!(echo.description, "Returns the text it is given.");
        assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
        assert_eq!(echo.input_schema["required"], serde_json::json!(["text"]));
        assert_eq!(
            echo.info,
            ToolInfo::Mcp { server_id: "srv-1".into(), server_name: "tester".into(), name: "echo".into() }
        );

        let mut config = server.config();
        config.limits.max_tools = 4;
        let capped = server.connect_with(config).await.list().await.expect("list");
        assert_eq!(capped.len(), 4, "{kind:?}");
    }
}

#[tokio::test]
async fn calls_answer_the_same_over_every_transport() {
    let picture = "a pixel\n[image: image/png, 92 bytes base64]\n[resource note://1]\nhello";
    let cases: &[(&str, &str, ToolOutput)] = &[
        ("echo", r#"{"text": "hi there"}"#, ToolOutput::ok("hi there")),
        ("add", r#"{"a": 2, "b": 40}"#, ToolOutput::ok(r#"{"sum":42}"#)),
        ("fail", r#"{"message": "boom"}"#, ToolOutput::error("Error executing tool fail: boom")),
        ("picture", "", ToolOutput::ok(picture)),
        ("counter", "{}", ToolOutput::ok("1")),
        ("counter", "{}", ToolOutput::ok("2")),
        ("big", r#"{"n_bytes": 5}"#, ToolOutput::ok("xxxxx")),
        ("echo", "[1]", ToolOutput::error("arguments must be a JSON object")),
        ("write_note", r#"{"text": "a"}"#, ToolOutput::ok("noted (1 notes)")),
        ("delete_everything", "{}", ToolOutput::ok("deleted")),
    ];
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        for (tool, arguments, expected) in cases {
            assert_eq!(&connection.call(tool, arguments).await, expected, "{kind:?}: {tool} {arguments}");
        }
        let missing_argument = connection.call("echo", "{}").await;
        assert!(
            missing_argument.is_error && missing_argument.content.contains("text"),
            "{missing_argument:?}"
        );
        let unknown = connection.call("no_such_tool", "{}").await;
        assert!(unknown.is_error && unknown.content.contains("no_such_tool"), "{unknown:?}");
        assert!(connection.is_alive());
    }
}

#[tokio::test]
async fn large_results_are_cut_with_a_note() {
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let mut config = server.config();
        config.limits.max_result_bytes = 1000;
        let connection = server.connect_with(config).await;
        let output = connection.call("big", r#"{"n_bytes": 5000}"#).await;
        assert!(!output.is_error);
        assert_eq!(
            output.content,
            format!("{}\n[output truncated: 5000 bytes, 1000 shown]", "x".repeat(1000))
        );

        // With the default limits, a 9 MiB answer passes the transport and is cut at 8 MiB.
        let connection = server.connect().await;
        let output = connection.call("big", &format!(r#"{{"n_bytes": {}}}"#, 9 << 20)).await;
        assert!(!output.is_error, "{kind:?}: {}", &output.content[..output.content.len().min(300)]);
        assert!(output.content.starts_with(&"x".repeat(8 << 20)), "{kind:?}");
        assert!(output.content.ends_with("[output truncated: 9437184 bytes, 8388608 shown]"), "{kind:?}");
    }
}

/// Asks the server how many `slow` calls it saw cancelled, waiting for the count to reach
/// `expected` (the cancellation notification travels on its own).
async fn wait_for_cancelled_calls(connection: &McpConnection, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let count = connection.call("cancelled_calls", "{}").await;
        if count.content == expected || Instant::now() > deadline {
            assert_eq!(count, ToolOutput::ok(expected));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_timeout_is_an_error_and_cancels_the_call() {
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let mut config = server.config();
        config.call_timeout = Duration::from_millis(500);
        let connection = server.connect_with(config).await;
        let started = Instant::now();
        let output = connection.call("slow", r#"{"seconds": 30}"#).await;
        assert!(started.elapsed() < Duration::from_secs(10), "{kind:?}: took {:?}", started.elapsed());
        assert_eq!(
            output,
            ToolOutput::error("MCP tool slow on server tester timed out after 0.5 s and was cancelled"),
            "{kind:?}"
        );
        assert_eq!(connection.call("echo", r#"{"text": "still here"}"#).await, ToolOutput::ok("still here"));
        wait_for_cancelled_calls(&connection, "1").await;
    }
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_and_the_connection_stays_usable() {
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        let started = Instant::now();
        let dropped =
            tokio::time::timeout(Duration::from_millis(300), connection.call("slow", r#"{"seconds": 30}"#))
                .await;
        assert!(dropped.is_err(), "{kind:?}: the slow call finished");
        assert!(started.elapsed() < Duration::from_secs(5), "{kind:?}: took {:?}", started.elapsed());
        assert!(connection.is_alive());
        assert_eq!(connection.call("echo", r#"{"text": "next"}"#).await, ToolOutput::ok("next"), "{kind:?}");
        wait_for_cancelled_calls(&connection, "1").await;
    }
}

/// Keeps the progress reports of one call.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<ToolProgress>>);

impl ProgressSink for Reports {
    fn report(&self, progress: ToolProgress) {
        self.0.lock().unwrap().push(progress);
    }
}

#[tokio::test]
async fn each_call_hears_its_own_progress_in_order_before_its_answer() {
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        // Two calls at once on one connection: each hears only its own reports.
        let (three, five) = (Reports::default(), Reports::default());
        let (first, second) = tokio::join!(
            connection.call_in("phases", r#"{"steps": 3}"#, CallContext::reporting(&three)),
            connection.call_in("phases", r#"{"steps": 5}"#, CallContext::reporting(&five)),
        );
        assert_eq!(first, ToolOutput::ok("3 phases done"), "{kind:?}");
        assert_eq!(second, ToolOutput::ok("5 phases done"), "{kind:?}");
        for (reports, steps) in [(three, 3), (five, 5)] {
            let expected: Vec<ToolProgress> = (1..=steps)
                .map(|step| ToolProgress {
                    progress: f64::from(step),
                    total: Some(f64::from(steps)),
                    message: Some(format!("phase {step} of {steps}")),
                })
                .collect();
            assert_eq!(*reports.0.lock().unwrap(), expected, "{kind:?}");
        }
        // A call without a listener still answers.
        assert_eq!(connection.call("phases", r#"{"steps": 2}"#).await, ToolOutput::ok("2 phases done"), "{kind:?}");
    }
}

#[tokio::test]
async fn a_calls_request_context_reaches_the_server_in_meta_beside_its_progress_token() {
    for kind in KINDS {
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        let context = serde_json::json!({"tenant": "acme", "flags": ["beta"]});
        let context = context.as_object().unwrap();
        let reports = Reports::default();
        let with = CallContext { progress: &reports, request_context: Some(context) };
        let expected = serde_json::json!({teamster_mcp::REQUEST_CONTEXT_META: context}).to_string();
        let answered = connection.call_in("request_meta", "{}", with).await;
        let meta: serde_json::Value = serde_json::from_str(&answered.content).unwrap_or_else(|_| panic!("{answered:?}"));
        assert_eq!(meta.to_string(), expected, "{kind:?}");
        // Without one, the request carries no `_meta` of Teamster's.
        assert_eq!(connection.call("request_meta", "{}").await, ToolOutput::ok("{}"), "{kind:?}");
    }
}

#[tokio::test]
async fn a_crashed_stdio_server_is_an_error_and_a_dead_connection() {
    let server = TestServer::start(Kind::Stdio, &[]).await;
    let connection = server.connect().await;
    let output = connection.call("crash", "{}").await;
    assert_eq!(
        output,
        ToolOutput::error(
            "MCP tool crash on server tester failed: MCP server tester exited (exit status: 3)"
        )
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while connection.is_alive() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!connection.is_alive());
    assert_eq!(
        connection.call("echo", r#"{"text": "x"}"#).await,
        ToolOutput::error("MCP server tester exited (exit status: 3)")
    );
    assert!(connection.list().await.is_err());

    // Reconnecting starts a fresh process with fresh state.
    let connection = server.connect().await;
    assert_eq!(connection.call("counter", "{}").await, ToolOutput::ok("1"));
}

#[tokio::test]
async fn a_crashed_http_server_is_an_error_and_a_dead_connection() {
    for kind in HTTP_KINDS {
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        let output = connection.call("crash", "{}").await;
        // The words depend on where the transport noticed; the failure and the dead session do not.
        assert!(output.is_error, "{kind:?}: {output:?}");
        assert!(output.content.starts_with("MCP tool crash on server tester failed: "), "{output:?}");
        assert!(!connection.is_alive(), "{kind:?}");
        let next = connection.call("echo", r#"{"text": "x"}"#).await;
        assert_eq!(next, ToolOutput::error("the connection to MCP server tester is closed"), "{kind:?}");

        // A server that went away between calls.
        let server = TestServer::start(kind, &[]).await;
        let connection = server.connect().await;
        let mut process = server._process.expect("an HTTP server process");
        process.kill().await.expect("kill the server");
        let output = connection.call("echo", r#"{"text": "x"}"#).await;
        assert!(output.is_error, "{kind:?}: {output:?}");
        assert!(!connection.is_alive(), "{kind:?}");
    }
}

struct Token(&'static str);

#[async_trait]
impl BearerTokenProvider for Token {
    async fn bearer_token(&self) -> Option<String> {
        Some(self.0.to_owned())
    }
}

#[tokio::test]
async fn header_auth_reaches_the_server_and_a_401_is_unauthorized() {
    for kind in HTTP_KINDS {
        let server = TestServer::start(kind, &["--require-token", "s3cret"]).await;

        match McpConnection::connect(server.config()).await {
            Err(McpError::Unauthorized { www_authenticate }) => {
                assert_eq!(www_authenticate.as_deref(), Some(r#"Bearer realm="teamster-test""#), "{kind:?}");
            }
            other => panic!("{kind:?}: expected Unauthorized, got {other:?}"),
        }
        let wrong = server.config_with(server.http().header("Authorization", "Bearer wrong"));
        let refused = McpConnection::connect(wrong).await;
        assert!(matches!(refused, Err(McpError::Unauthorized { .. })), "{kind:?}: {refused:?}");

        let headers = server.http().header("Authorization", "Bearer s3cret").header("X-Extra", "1");
        let connection = server.connect_with(server.config_with(headers)).await;
        assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("Bearer s3cret"), "{kind:?}");
        assert_eq!(connection.call("echo", r#"{"text": "again"}"#).await, ToolOutput::ok("again"));

        // A token provider's token replaces a configured Authorization header.
        let mut provided = server.http().header("Authorization", "Bearer stale");
        provided.bearer_token = Some(Arc::new(Token("s3cret")));
        let connection = server.connect_with(server.config_with(provided)).await;
        assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("Bearer s3cret"), "{kind:?}");
    }
}

#[tokio::test]
async fn connecting_to_something_that_is_not_a_server_fails_with_a_reason() {
    let missing = StdioTransport::new("/nonexistent/mcp-server", Vec::<String>::new());
    let error =
        McpConnection::connect(McpServerConfig::new("a", "a", Transport::Stdio(missing))).await.unwrap_err();
    assert!(matches!(error, McpError::Spawn { .. }), "{error:?}");

    let silent = StdioTransport::new(python(), ["-c", "import sys; sys.stdin.read()"]);
    let mut config = McpServerConfig::new("b", "b", Transport::Stdio(silent));
    config.connect_timeout = Duration::from_millis(500);
    let error = McpConnection::connect(config).await.unwrap_err();
    assert!(matches!(error, McpError::Timeout(_)), "{error:?}");

    let exits = StdioTransport::new(python(), ["-c", "print('not json')"]);
    let error =
        McpConnection::connect(McpServerConfig::new("c", "c", Transport::Stdio(exits))).await.unwrap_err();
    assert!(matches!(error, McpError::Handshake(_)), "{error:?}");

    let closed_port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).unwrap();
    let nowhere = HttpTransport::new(format!("http://{closed_port}/mcp"));
    let error = McpConnection::connect(McpServerConfig::new("d", "d", Transport::StreamableHttp(nowhere)))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Handshake(_)), "{error:?}");
}

#[tokio::test]
async fn a_stdio_server_gets_only_the_configured_environment() {
    let server = TestServer::start(Kind::Stdio, &[]).await;
    let Transport::Stdio(mut stdio) = server.transport.clone() else { panic!("a stdio server") };
    stdio.env.insert("MCP_SETTING".to_owned(), "on".to_owned());
    let connection = server.connect_with(McpServerConfig::new("e", "e", Transport::Stdio(stdio))).await;
    let getenv = async |name: &str| connection.call("getenv", &format!(r#"{{"name": "{name}"}}"#)).await;
    assert_eq!(getenv("MCP_SETTING").await, ToolOutput::ok("on"));
    // Set for this test process (scripts/test exports it), but not passed through.
    assert_eq!(getenv("TEAMSTER_TEST_PYTHON").await, ToolOutput::ok("<unset>"));
    assert!(!getenv("PATH").await.content.is_empty());
}
