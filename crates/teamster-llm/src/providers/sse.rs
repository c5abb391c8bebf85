//! An incremental Server-Sent Events decoder shared by the streaming provider adapters.
//!
//! Network chunks may split a line anywhere, even inside a multi-byte UTF-8 character, so the
//! decoder buffers raw bytes, cuts them at line feeds and decodes whole lines only. It follows the
//! SSE framing rules that providers use: `data:` lines accumulate (joined by `\n`) until a blank
//! line dispatches the event, lines starting with `:` are comments, and other fields (`event:`,
//! `id:`, `retry:`) are ignored because no provider we speak needs them. Lines may end with `\n`
//! or `\r\n`; a lone `\r` as a line end is not supported (no provider sends it).

use crate::Error;

/// Turns a byte stream into the `data` payloads of its events.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes received but not yet cut into lines: at most one partial line after each `feed`.
    pending: Vec<u8>,
    /// The `data` of the event being assembled, each line followed by `\n`.
    data: String,
}

impl SseDecoder {
    /// Feeds one network chunk and appends the payload of every event it completes to `out`.
    pub(crate) fn feed(&mut self, chunk: &[u8], out: &mut Vec<String>) -> Result<(), Error> {
        // Only the new bytes can hold a line feed: the buffered ones were searched already.
        let mut search_from = self.pending.len();
        self.pending.extend_from_slice(chunk);
        let mut line_start = 0;
        while let Some(offset) = self.pending[search_from..].iter().position(|&b| b == b'\n') {
            let line_end = search_from + offset;
            let line = strip_cr(&self.pending[line_start..line_end]);
            let line = std::str::from_utf8(line)
                .map_err(|e| Error::Decode(format!("the event stream is not valid UTF-8: {e}")))?;
            Self::take_line(&mut self.data, line, out);
            line_start = line_end + 1;
            search_from = line_start;
        }
        self.pending.drain(..line_start);
        Ok(())
    }

    /// Ends the stream: a last line without a line feed counts, and an event without its blank
    /// line is still dispatched.
    pub(crate) fn finish(&mut self, out: &mut Vec<String>) -> Result<(), Error> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            let line = std::str::from_utf8(strip_cr(&rest))
                .map_err(|e| Error::Decode(format!("the event stream is not valid UTF-8: {e}")))?;
            Self::take_line(&mut self.data, line, out);
        }
        Self::take_line(&mut self.data, "", out);
        Ok(())
    }

    fn take_line(data: &mut String, line: &str, out: &mut Vec<String>) {
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                out.push(std::mem::take(data));
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            data.push_str(value);
            data.push('\n');
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], piece: usize) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            decoder.feed(chunk, &mut out).unwrap();
        }
        decoder.finish(&mut out).unwrap();
        out
    }

    #[test]
    fn events_survive_any_chunking() {
        let input = "data: {\"a\":\"é😀\"}\r\n\r\n: keep-alive\n\nevent: x\nid: 3\ndata: one\ndata:two\n\ndata: [DONE]"
            .as_bytes();
        for piece in 1..input.len() {
            assert_eq!(decode_in_pieces(input, piece), ["{\"a\":\"é😀\"}", "one\ntwo", "[DONE]"], "piece size {piece}");
        }
    }

    #[test]
    fn invalid_utf8_in_a_whole_line_is_a_decode_error() {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        assert!(matches!(decoder.feed(b"data: \xff\n", &mut out), Err(Error::Decode(_))));
    }
}
