//! What the file tools show of a file: text only, in lines, each cut to a bound.

/// The longest line a tool shows whole; longer ones are cut and marked.
pub(crate) const MAX_LINE_CHARS: usize = 2000;

/// The file's text, or why it is not shown as text (a NUL byte or bytes that are not UTF-8).
pub(crate) fn as_text(bytes: &[u8]) -> Result<&str, &'static str> {
    if bytes.iter().take(8192).any(|byte| *byte == 0) {
        return Err("it holds NUL bytes");
    }
    std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8 text")
}

/// `line` cut to [`MAX_LINE_CHARS`] characters, marked when cut.
pub(crate) fn cut_line(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((end, _)) => format!("{}… [line cut at {MAX_LINE_CHARS} characters]", &line[..end]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_files_are_told_apart_and_long_lines_cut() {
        assert_eq!(as_text(b"hello\n"), Ok("hello\n"));
        assert!(as_text(b"\x7fELF\0\0").is_err());
        assert!(as_text(&[0xff, 0xfe, 0x41]).is_err());
        let long = "x".repeat(MAX_LINE_CHARS + 5);
        assert!(cut_line(&long).ends_with("[line cut at 2000 characters]"));
        assert_eq!(cut_line("short"), "short");
    }
}
