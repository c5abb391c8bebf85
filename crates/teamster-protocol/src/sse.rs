//! The Server-Sent Events framing of an event: `id: N`, its JSON on `data:` lines, a blank line.
//!
//! Clients cap the length of one SSE line (the gateway client fails on any line over
//! [`MAX_LINE_CHARS`] characters) but join a frame's `data:` lines with `\n`, which JSON allows
//! between tokens. So a long event is split over several `data:` lines at token boundaries and
//! decodes to the same JSON. The split is a pure function of the JSON text, so a replay of the
//! stored JSON frames an event exactly as the live stream did.
//!
//! A split can only fall between tokens: one string token must fit on a line by itself. The
//! producers of events keep every string under [`MAX_STRING_CHARS`] (deltas are chunked, user
//! text, files and tool results are bounded), which leaves room for the rest of its line.

/// The longest line (in characters, without its line break) the gateway client accepts.
pub const MAX_LINE_CHARS: usize = 1_048_576;
/// The most characters one JSON string of an event may take once serialised, quotes and
/// escapes included, so that it fits on a line with the tokens around it.
pub const MAX_STRING_CHARS: usize = 512 * 1024;
/// A `data:` line is broken at the first token boundary after this many bytes.
const SPLIT_AFTER_BYTES: usize = 256 * 1024;

/// One SSE frame: `id: <sequence>`, the JSON on one `data:` line or, when it is long, on
/// several split between tokens, and the blank line that dispatches it.
pub fn frame(sequence: u64, json: &str) -> String {
    let mut frame = String::with_capacity(json.len() + 32);
    push_frame(&mut frame, sequence, json);
    frame
}

/// Appends the frame of [`frame`] to `frame`, so that several frames can share one buffer.
pub fn push_frame(frame: &mut String, sequence: u64, json: &str) {
    frame.push_str("id: ");
    frame.push_str(&sequence.to_string());
    frame.push('\n');
    if json.len() <= SPLIT_AFTER_BYTES {
        frame.push_str("data: ");
        frame.push_str(json);
        frame.push('\n');
    } else {
        for line in split_between_tokens(json, SPLIT_AFTER_BYTES) {
            frame.push_str("data: ");
            frame.push_str(line);
            frame.push('\n');
        }
    }
    frame.push('\n');
}

/// Splits JSON text into pieces that, joined with `\n`, are the same JSON: each piece ends at
/// the first token boundary (after a `,`, `:`, `[` or `{` outside strings) once it is at least
/// `after` bytes long. Text that is not JSON is split likewise, harmlessly, since a piece only
/// ever ends outside what looks like a string.
fn split_between_tokens(json: &str, after: usize) -> Vec<&str> {
    let bytes = json.as_bytes();
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut in_string = false;
    let mut escaped = false;
    for (index, &byte) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            // These bytes are ASCII, so `index + 1` is a character boundary.
            b',' | b':' | b'[' | b'{' if index + 1 - start >= after && index + 1 < bytes.len() => {
                pieces.push(&json[start..=index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    pieces.push(&json[start..]);
    pieces
}

/// How many characters `text` takes as a JSON string, quotes and escapes included (the way
/// `serde_json` writes it: control characters other than the short escapes as `\u00XX`).
pub fn json_string_chars(text: &str) -> usize {
    2 + text
        .chars()
        .map(|character| match character {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
            control if (control as u32) < 0x20 => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// The longest prefix of `text` (ending on a character boundary) whose JSON string takes at
/// most `max_chars` characters, quotes included.
pub fn json_string_prefix(text: &str, max_chars: usize) -> &str {
    let mut used = 2;
    for (index, character) in text.char_indices() {
        used += json_string_chars(character.encode_utf8(&mut [0; 4])) - 2;
        if used > max_chars {
            return &text[..index];
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON a client decodes from a frame: its `data:` lines joined with `\n`.
    fn decoded(frame: &str) -> serde_json::Value {
        let data: Vec<&str> = frame.lines().filter_map(|line| line.strip_prefix("data: ")).collect();
        serde_json::from_str(&data.join("\n")).expect("the joined data lines are JSON")
    }

    #[test]
    fn short_events_are_one_data_line() {
        let json = r#"{"type":"turn.done","id":"evt_1"}"#;
        assert_eq!(frame(7, json), format!("id: 7\ndata: {json}\n\n"));
    }

    #[test]
    fn long_events_are_split_between_tokens_into_lines_clients_accept() {
        let part = "x\"y\\z,:{[".repeat(20_000); // 180,000 characters with JSON syntax inside
        let event = serde_json::json!({
            "type": "turn.created",
            "input": [
                {"type": "user.message", "content": [{"type": "text", "text": part}, {"type": "text", "text": part}]},
                {"type": "user.message", "content": part},
                {"type": "user.message", "content": part},
            ],
            "nested": {"a": [1, 2, {"b": part}]},
        });
        let json = serde_json::to_string(&event).unwrap();
        let framed = frame(3, &json);
        assert!(framed.lines().filter(|line| line.starts_with("data: ")).count() > 1);
        assert!(framed.lines().all(|line| line.chars().count() <= MAX_LINE_CHARS));
        assert_eq!(decoded(&framed), event);
        assert!(framed.starts_with("id: 3\ndata: ") && framed.ends_with("\n\n"));
    }

    #[test]
    fn a_string_at_the_limit_fits_on_a_line_with_its_neighbours() {
        let text = "é".repeat(MAX_STRING_CHARS - 2);
        assert_eq!(json_string_chars(&text), MAX_STRING_CHARS);
        let event = serde_json::json!({"type": "model.message.delta", "id": "m", "content": text, "after": "y".repeat(200_000)});
        let framed = frame(1, &serde_json::to_string(&event).unwrap());
        assert!(framed.lines().all(|line| line.chars().count() <= MAX_LINE_CHARS));
        assert_eq!(decoded(&framed), event);
    }

    #[test]
    fn json_string_lengths_count_escapes() {
        for text in ["", "plain", "quote\" back\\ line\n tab\t", "\u{01}\u{1f}", "ünïcødé ✓"] {
            assert_eq!(json_string_chars(text), serde_json::to_string(text).unwrap().chars().count(), "{text:?}");
        }
    }

    #[test]
    fn prefixes_respect_the_serialised_length() {
        assert_eq!(json_string_prefix("abcdef", 5), "abc");
        assert_eq!(json_string_prefix("a\nbc", 5), "a\n");
        assert_eq!(json_string_prefix("ab", 10), "ab");
        assert_eq!(json_string_prefix("\u{01}a", 7), "");
    }
}
