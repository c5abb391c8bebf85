//! Server-sent events as the client commands read them: a byte stream split into its events,
//! whatever the network's chunks (`teamster run` and `teamster chat`).

/// One event of a server-sent event stream: its `id`, and its `data:` lines joined by newlines
/// (a long event comes as several, split between JSON tokens).
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<String>,
    pub data: String,
}

/// Splits a server-sent event stream into its events.
#[derive(Debug, Default)]
pub struct SseFrames {
    buffer: Vec<u8>,
}

impl SseFrames {
    /// Takes more bytes; returns every event they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Frame> {
        self.buffer.extend_from_slice(bytes);
        let mut found = Vec::new();
        while let Some((end, separator)) = frame_end(&self.buffer) {
            let frame: Vec<u8> = self.buffer.drain(..end + separator).collect();
            let text = String::from_utf8_lossy(&frame[..end]);
            let field = |name: &'static str| {
                text.lines().filter_map(move |line| line.strip_prefix(name)).map(|value| value.strip_prefix(' ').unwrap_or(value))
            };
            let data: Vec<&str> = field("data:").collect();
            if !data.is_empty() {
                found.push(Frame { id: field("id:").next_back().map(str::to_owned), data: data.join("\n") });
            }
        }
        found
    }
}

/// Where the first event of `buffer` ends, and how long its blank-line separator is.
fn frame_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|pair| pair == b"\n\n").map(|at| (at, 2));
    let crlf = buffer.windows(4).position(|quad| quad == b"\r\n\r\n").map(|at| (at, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_at_blank_lines_whatever_the_chunks() {
        let stream = b"id: 1\ndata: {\"a\":\ndata: 1}\n\n: heartbeat\n\nid: 2\r\ndata: {}\r\n\r\ndata:x\n\n";
        for chunk_size in [1, 3, 7, stream.len()] {
            let mut frames = SseFrames::default();
            let mut found = Vec::new();
            for chunk in stream.chunks(chunk_size) {
                found.extend(frames.push(chunk));
            }
            let frame = |id: Option<&str>, data: &str| Frame { id: id.map(str::to_owned), data: data.to_owned() };
            assert_eq!(found, vec![frame(Some("1"), "{\"a\":\n1}"), frame(Some("2"), "{}"), frame(None, "x")], "chunks of {chunk_size}");
        }
    }
}
