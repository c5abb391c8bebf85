//! Sending traces over OTLP/HTTP: a turn's spans encoded as an `ExportTraceServiceRequest`
//! (protobuf, written by hand: the few messages it takes) and posted to
//! `<endpoint>/v1/traces` by a background task. A turn never waits for it: when the queue is
//! full or the collector is down, traces are dropped and counted. Turns that end within
//! [`BATCH_LINGER`] of each other go in one request (concatenated requests are one request whose
//! `resource_spans` append), as OpenTelemetry's batch processors do, so a busy server does not
//! post once per turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::traces::{Span, Value};

/// Encoded requests waiting to be sent.
const QUEUE: usize = 256;
/// How long the first trace of a request waits for others to join it.
const BATCH_LINGER: Duration = Duration::from_millis(200);
/// The most bytes one request gathers before it is sent.
const BATCH_BYTES: usize = 1024 * 1024;
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where traces go.
#[derive(Clone)]
pub struct OtlpExporter {
    sender: mpsc::Sender<Vec<u8>>,
    lost: Arc<Lost>,
}

/// Traces that never reached the collector: counted, and said in the log once per hundred, so
/// a collector that is down does not flood it.
struct Lost {
    url: String,
    count: AtomicU64,
}

impl Lost {
    fn note(&self, reason: &str) {
        if self.count.fetch_add(1, Ordering::Relaxed).is_multiple_of(100) {
            tracing::warn!(url = %self.url, reason, "traces could not be exported; dropped");
        }
    }
}

/// Why an exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint is not an `http://` or `https://` base URL.
    #[error("the OTLP endpoint must be an http:// or https:// URL, not {0:?}")]
    NotHttp(String),
    /// The HTTP client could not be built.
    #[error("the OTLP HTTP client could not be built: {0}")]
    Client(#[source] reqwest::Error),
}

impl OtlpExporter {
    /// Starts the task posting to `<endpoint>/v1/traces` (an `http://` or `https://` base URL,
    /// as `OTEL_EXPORTER_OTLP_ENDPOINT` names it).
    pub fn start(endpoint: &str) -> Result<OtlpExporter, Error> {
        let base = endpoint.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::NotHttp(endpoint.to_owned()));
        }
        let url = format!("{base}/v1/traces");
        let client = reqwest::Client::builder().timeout(EXPORT_TIMEOUT).build().map_err(Error::Client)?;
        let (sender, mut receiver) = mpsc::channel::<Vec<u8>>(QUEUE);
        let lost = Arc::new(Lost { url, count: AtomicU64::new(0) });
        let task_lost = lost.clone();
        tokio::spawn(async move {
            while let Some(mut body) = receiver.recv().await {
                let linger = tokio::time::sleep(BATCH_LINGER);
                tokio::pin!(linger);
                while body.len() < BATCH_BYTES {
                    tokio::select! {
                        more = receiver.recv() => match more {
                            Some(more) => body.extend_from_slice(&more),
                            None => break,
                        },
                        () = &mut linger => break,
                    }
                }
                let sent = client.post(&task_lost.url).header("content-type", "application/x-protobuf").body(body).send().await;
                match sent {
                    Ok(response) if response.status().is_success() => {}
                    Ok(response) => task_lost.note(&format!("the collector answered {}", response.status())),
                    Err(error) => task_lost.note(&error.to_string()),
                }
            }
        });
        Ok(OtlpExporter { sender, lost })
    }

    /// Queues a turn's spans; drops them when the queue is full.
    pub fn export(&self, trace_id: [u8; 16], spans: &[Span]) {
        if self.sender.try_send(encode(trace_id, spans)).is_err() {
            self.lost.note("the export queue is full");
        }
    }
}

/// An `ExportTraceServiceRequest` of one resource (`service.name` teamster) and one scope.
pub fn encode(trace_id: [u8; 16], spans: &[Span]) -> Vec<u8> {
    let mut resource = Vec::new();
    key_value(&mut resource, 1, "service.name", &Value::Text("teamster".to_owned()));
    let mut scope = Vec::new();
    string(&mut scope, 1, "teamster");
    string(&mut scope, 2, env!("CARGO_PKG_VERSION"));
    let mut scope_spans = Vec::new();
    message(&mut scope_spans, 1, &scope);
    for span in spans {
        message(&mut scope_spans, 2, &encode_span(trace_id, span));
    }
    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, &resource);
    message(&mut resource_spans, 2, &scope_spans);
    let mut request = Vec::new();
    message(&mut request, 1, &resource_spans);
    request
}

fn encode_span(trace_id: [u8; 16], span: &Span) -> Vec<u8> {
    let mut out = Vec::new();
    bytes(&mut out, 1, &trace_id);
    bytes(&mut out, 2, &span.span_id);
    if let Some(parent) = &span.parent_span_id {
        bytes(&mut out, 4, parent);
    }
    string(&mut out, 5, &span.name);
    tag(&mut out, 6, 0);
    varint(&mut out, span.kind as u64);
    tag(&mut out, 7, 1);
    out.extend_from_slice(&span.start_ns.to_le_bytes());
    tag(&mut out, 8, 1);
    out.extend_from_slice(&span.end_ns.max(span.start_ns).to_le_bytes());
    for (key, value) in &span.attributes {
        key_value(&mut out, 9, key, value);
    }
    let mut status = Vec::new();
    if let Some(error) = &span.error {
        string(&mut status, 2, error);
        tag(&mut status, 3, 0);
        varint(&mut status, 2);
    }
    message(&mut out, 15, &status);
    out
}

fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    let mut any = Vec::new();
    match value {
        Value::Text(text) => string(&mut any, 1, text),
        Value::Int(number) => {
            tag(&mut any, 3, 0);
            varint(&mut any, *number as u64);
        }
        Value::Float(number) => {
            tag(&mut any, 4, 1);
            any.extend_from_slice(&number.to_le_bytes());
        }
    }
    let mut pair = Vec::new();
    string(&mut pair, 1, key);
    message(&mut pair, 2, &any);
    message(out, field, &pair);
}

fn tag(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire_type));
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(out, field, 2);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

fn string(out: &mut Vec<u8>, field: u32, text: &str) {
    bytes(out, field, text.as_bytes());
}

fn message(out: &mut Vec<u8>, field: u32, encoded: &[u8]) {
    bytes(out, field, encoded);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_are_protobufs() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        string(&mut out, 5, "hi");
        assert_eq!(out, [0x2a, 2, b'h', b'i']);
        let mut out = Vec::new();
        key_value(&mut out, 9, "n", &Value::Int(-1));
        // A negative int64 takes ten bytes, as protobuf writes it.
        assert_eq!(out.len(), 2 + 3 + 2 + 11);
    }
}
