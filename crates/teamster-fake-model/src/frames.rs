//! Server-sent event frames written into one buffer, and the response that sends them.
//!
//! Both endpoints render their answer as frames here. Without a delay the whole body goes out in
//! one piece (the fake is the benchmarks' floor); with one, each frame waits its turn.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

/// SSE frames in one buffer.
pub(crate) struct Frames {
    pub(crate) buf: Vec<u8>,
    /// Where each frame ends in `buf`.
    frame_ends: Vec<usize>,
}

impl Frames {
    pub(crate) fn new() -> Self {
        Frames { buf: Vec::with_capacity(4096), frame_ends: Vec::new() }
    }

    /// Ends the frame written into `buf` since the previous one.
    pub(crate) fn end_frame(&mut self) {
        self.frame_ends.push(self.buf.len());
    }

    /// The response: one piece without delay; otherwise each frame after a sleep, except the
    /// last one when `last_without_delay` (the end marker follows the answer at once).
    pub(crate) fn into_response(self, delay: Option<Duration>, last_without_delay: bool) -> Response {
        let headers = [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ];
        let bytes = Bytes::from(self.buf);
        let Some(delay) = delay.filter(|delay| !delay.is_zero()) else {
            return (headers, bytes).into_response();
        };
        let frame_count = self.frame_ends.len();
        let frames = self.frame_ends.into_iter().enumerate().scan(0, move |start, (index, end)| {
            let frame = bytes.slice(*start..end);
            *start = end;
            let sleep_first = !(last_without_delay && index + 1 == frame_count);
            Some((frame, sleep_first))
        });
        let stream = futures_util::stream::unfold(frames, move |mut frames| async move {
            let (frame, sleep_first) = frames.next()?;
            if sleep_first {
                tokio::time::sleep(delay).await;
            }
            Some((Ok::<Bytes, Infallible>(frame), frames))
        });
        (headers, Body::from_stream(stream)).into_response()
    }
}

/// Appends `value` in decimal.
pub(crate) fn push_u64(buf: &mut Vec<u8>, value: u64) {
    let mut digits = [0u8; 20];
    let mut position = digits.len();
    let mut rest = value;
    loop {
        position -= 1;
        digits[position] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[position..]);
}

/// Appends `text` as a JSON string literal.
pub(crate) fn push_json_string(buf: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            buf.extend_from_slice(b"\\u00");
            buf.push(HEX[(byte >> 4) as usize]);
            buf.push(HEX[(byte & 0xf) as usize]);
        } else {
            buf.extend_from_slice(escape);
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_and_numbers_are_written_like_serde_json() {
        for text in ["plain", "quote \" back \\ slash", "line\nfeed\ttab\r", "\u{1}\u{1f}", "é😀"] {
            let mut buf = Vec::new();
            push_json_string(&mut buf, text);
            assert_eq!(String::from_utf8(buf).unwrap(), serde_json::to_string(text).unwrap());
        }
        for value in [0, 7, 10, 1234567890, u64::MAX] {
            let mut buf = Vec::new();
            push_u64(&mut buf, value);
            assert_eq!(String::from_utf8(buf).unwrap(), value.to_string());
        }
    }
}
