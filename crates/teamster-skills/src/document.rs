//! `SKILL.md`: front matter between two `---` lines (`name`, `description`; other keys
//! ignored), then markdown. The front matter is read by a small parser of the YAML it uses:
//! `key: value` lines whose values are plain, single- or double-quoted (over one or more
//! lines), or folded (`>`) or literal (`|`) blocks of indented lines. Also the host-side read of
//! the file, bounded and without following a symbolic link.

use std::io::Read;
use std::path::Path;

use super::{MAX_SKILL_MD_BYTES, SkillError};

/// What a `SKILL.md` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillDocument {
    /// The `name` of the front matter, if it has one.
    pub name: Option<String>,
    /// The `description`: what the skill is for and when to use it (trimmed, never empty).
    pub description: String,
    /// The markdown after the front matter (blank lines around it trimmed).
    pub body: String,
}

/// Parses a `SKILL.md`. Fails, saying what is wrong and on which line, when the front matter is
/// missing, not closed, not `key: value` lines, or has no `description`.
pub fn parse_skill_md(text: &str) -> Result<SkillDocument, SkillError> {
    let malformed = |reason: String| Err(SkillError::Malformed(reason));
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line)).collect();
    if lines.first().map(|line| line.trim_end()) != Some("---") {
        return malformed(
            "it must begin with a `---` line, then the front matter (`name:` and `description:` lines), then another `---` line"
                .to_owned(),
        );
    }
    let Some(end) = lines.iter().skip(1).position(|line| line.trim_end() == "---").map(|index| index + 1) else {
        return malformed("the front matter opened by `---` on line 1 is never closed by another `---` line".to_owned());
    };
    let (name, description) = front_matter(&lines[1..end])?;
    let Some(description) = description else {
        return malformed("the front matter has no `description:` (what the skill is for and when to use it)".to_owned());
    };
    if description.is_empty() {
        return malformed("the front matter's `description` is empty".to_owned());
    }
    let body = lines[end + 1..].join("\n");
    Ok(SkillDocument {
        name: name.filter(|name| !name.is_empty()),
        description,
        body: body.trim_start_matches(['\n', '\r']).trim_end().to_owned(),
    })
}

/// Reads and parses `dir/SKILL.md`: a regular file (not a symbolic link) of at most
/// [`MAX_SKILL_MD_BYTES`].
pub(crate) fn read_skill_md(dir: &Path) -> Result<SkillDocument, SkillError> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join("SKILL.md");
    let too_large = || SkillError::TooLarge { what: "SKILL.md".to_owned(), limit: format!("{} KiB", MAX_SKILL_MD_BYTES / 1024) };
    let listed = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(SkillError::Malformed("the skill's directory has no SKILL.md".to_owned()));
        }
        Err(error) => return Err(SkillError::io("reading SKILL.md")(error)),
    };
    if !listed.file_type().is_file() {
        return Err(SkillError::Malformed("SKILL.md is not a regular file (a symbolic link or a directory)".to_owned()));
    }
    if listed.len() > MAX_SKILL_MD_BYTES {
        return Err(too_large());
    }
    let file = std::fs::File::open(&path).map_err(SkillError::io("opening SKILL.md"))?;
    let opened = file.metadata().map_err(SkillError::io("reading SKILL.md"))?;
    if (opened.dev(), opened.ino()) != (listed.dev(), listed.ino()) {
        return Err(SkillError::Malformed("SKILL.md changed while it was read".to_owned()));
    }
    let mut bytes = Vec::with_capacity(listed.len() as usize);
    file.take(MAX_SKILL_MD_BYTES + 1).read_to_end(&mut bytes).map_err(SkillError::io("reading SKILL.md"))?;
    if bytes.len() as u64 > MAX_SKILL_MD_BYTES {
        return Err(too_large());
    }
    let text = String::from_utf8(bytes).map_err(|_| SkillError::Malformed("SKILL.md is not UTF-8 text".to_owned()))?;
    parse_skill_md(&text)
}

/// The `name` and `description` of the front matter's lines (the first is line 2 of the file).
fn front_matter(lines: &[&str]) -> Result<(Option<String>, Option<String>), SkillError> {
    let mut name = None;
    let mut description = None;
    let mut index = 0;
    while index < lines.len() {
        let number = index + 2;
        let line = lines[index];
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            index += 1;
            continue;
        }
        if is_indented(line) {
            return Err(malformed_at(number, "is indented but follows no `key:` line"));
        }
        let Some((key, value)) = split_key(line) else {
            return Err(malformed_at(number, "is not a `key: value` line"));
        };
        // The lines after a key that are blank or indented are its value's, whatever it is.
        let mut next = index + 1;
        while next < lines.len() && (lines[next].trim().is_empty() || is_indented(lines[next])) {
            next += 1;
        }
        let continuation = &lines[index + 1..next];
        let slot = match key {
            "name" => Some(&mut name),
            "description" => Some(&mut description),
            _ => None,
        };
        if let Some(slot) = slot {
            if slot.is_some() {
                return Err(malformed_at(number, &format!("repeats `{key}`")));
            }
            let text = scalar(value, continuation, number).map_err(|reason| malformed_at(number, &format!("(`{key}`) {reason}")))?;
            *slot = Some(text.trim().to_owned());
        }
        index = next;
    }
    Ok((name, description))
}

fn malformed_at(number: usize, problem: &str) -> SkillError {
    SkillError::Malformed(format!("line {number} of the front matter {problem}"))
}

fn is_indented(line: &str) -> bool {
    line.starts_with([' ', '\t'])
}

/// A `key: value` line's key and the rest (the value's first line, untrimmed).
fn split_key(line: &str) -> Option<(&str, &str)> {
    let mut search = 0;
    while let Some(found) = line[search..].find(':') {
        let colon = search + found;
        let after = &line[colon + 1..];
        if after.is_empty() || after.starts_with([' ', '\t']) {
            let key = line[..colon].trim();
            let key = key.strip_prefix('"').and_then(|key| key.strip_suffix('"')).unwrap_or(key);
            let key = key.strip_prefix('\'').and_then(|key| key.strip_suffix('\'')).unwrap_or(key);
            return (!key.is_empty() && !key.starts_with(['-', '[', '{'])).then_some((key, after));
        }
        search = colon + 1;
    }
    None
}

/// A scalar value from its first line's text and the (blank or indented) lines after it.
fn scalar(first: &str, more: &[&str], number: usize) -> Result<String, String> {
    let first = first.trim();
    match first.chars().next() {
        Some('|' | '>') => block(first, more),
        Some('"') => quoted(&fold(first, more), '"'),
        Some('\'') => quoted(&fold(first, more), '\''),
        Some('[' | '{') => Err("must be text, not a list or a map".to_owned()),
        _ => {
            let first = strip_comment(first);
            let more: Vec<&str> = more.iter().map(|line| strip_comment(line.trim())).filter(|line| !line.starts_with('#')).collect();
            let nested = more.iter().find(|line| !line.is_empty()).is_some_and(|line| line.starts_with("- ") || split_key(line).is_some());
            if first.is_empty() && nested {
                return Err(format!("must be text, not a list or a map (line {})", number + 1));
            }
            Ok(fold(first, &more))
        }
    }
}

/// A plain scalar's text without a trailing ` # comment`.
fn strip_comment(text: &str) -> &str {
    if text.starts_with('#') {
        return "";
    }
    let cut = text.char_indices().find(|&(at, c)| c == '#' && text[..at].ends_with([' ', '\t'])).map(|(at, _)| at);
    cut.map_or(text, |at| &text[..at]).trim_end()
}

/// Lines folded as YAML folds a flow scalar: each line trimmed, a line break a space, and each
/// blank line a newline.
fn fold(first: &str, more: &[&str]) -> String {
    let mut out = first.trim().to_owned();
    let mut blank = 0;
    for line in more {
        let line = line.trim();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if blank > 0 {
            out.push_str(&"\n".repeat(blank));
        } else if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line);
        blank = 0;
    }
    out
}

/// A quoted scalar (its text starting at the opening quote, over lines already folded).
fn quoted(text: &str, quote: char) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text[1..].chars();
    loop {
        let Some(c) = chars.next() else {
            return Err(format!("has a {quote}…{quote} value that is never closed"));
        };
        match c {
            '\'' if quote == '\'' => {
                if chars.clone().next() == Some('\'') {
                    chars.next();
                    out.push('\'');
                } else {
                    break;
                }
            }
            '"' if quote == '"' => break,
            '\\' if quote == '"' => out.push(escape(&mut chars)?),
            c => out.push(c),
        }
    }
    let after = chars.as_str().trim();
    if !after.is_empty() && !after.starts_with('#') {
        return Err(format!("has text after the closing {quote}: {:?}", after.chars().take(40).collect::<String>()));
    }
    Ok(out)
}

/// The character a double-quoted scalar's escape (after the `\`) stands for.
fn escape(chars: &mut std::str::Chars<'_>) -> Result<char, String> {
    let hex = |chars: &mut std::str::Chars<'_>, digits: usize| {
        let code: String = chars.take(digits).collect();
        u32::from_str_radix(&code, 16)
            .ok()
            .filter(|_| code.len() == digits)
            .and_then(char::from_u32)
            .ok_or_else(|| format!("has a bad escape \\…{code}"))
    };
    Ok(match chars.next() {
        Some('0') => '\0',
        Some('a') => '\u{7}',
        Some('b') => '\u{8}',
        Some('t' | '\t') => '\t',
        Some('n') => '\n',
        Some('v') => '\u{b}',
        Some('f') => '\u{c}',
        Some('r') => '\r',
        Some('e') => '\u{1b}',
        Some(' ') => ' ',
        Some('"') => '"',
        Some('/') => '/',
        Some('\\') => '\\',
        Some('N') => '\u{85}',
        Some('_') => '\u{a0}',
        Some('x') => hex(chars, 2)?,
        Some('u') => hex(chars, 4)?,
        Some('U') => hex(chars, 8)?,
        other => return Err(format!("has an unknown escape \\{}", other.map(String::from).unwrap_or_default())),
    })
}

/// A block scalar: its header (`|` or `>`, then an optional chomping indicator and indentation)
/// and its lines. Trailing newlines do not matter (values are trimmed), so chomping is read and
/// ignored.
fn block(header: &str, lines: &[&str]) -> Result<String, String> {
    let literal = header.starts_with('|');
    let rest = strip_comment(&header[1..]);
    let mut explicit_indent = None;
    for c in rest.chars() {
        match c {
            '+' | '-' => {}
            '1'..='9' if explicit_indent.is_none() => explicit_indent = c.to_digit(10).map(|digit| digit as usize),
            _ => return Err(format!("has a block header {header:?} that is not `|` or `>` with `-`, `+` or a digit")),
        }
    }
    let indentation = |line: &str| line.len() - line.trim_start_matches(' ').len();
    let indent = explicit_indent
        .or_else(|| lines.iter().find(|line| !line.trim().is_empty()).map(|line| indentation(line)))
        .unwrap_or(0);
    let mut kept = Vec::with_capacity(lines.len());
    for line in lines {
        if line.trim().is_empty() {
            kept.push("");
        } else if indentation(line) < indent {
            return Err("has a block whose lines are indented less than its first".to_owned());
        } else {
            kept.push(&line[indent..]);
        }
    }
    if literal {
        return Ok(kept.join("\n"));
    }
    // Folded: lines of text joined by spaces; blank lines, and more-indented lines, kept.
    let mut out = String::new();
    let mut previous_text = false;
    for line in kept {
        if line.is_empty() {
            out.push('\n');
            previous_text = false;
        } else if line.starts_with([' ', '\t']) {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(line);
            out.push('\n');
            previous_text = false;
        } else {
            if previous_text {
                out.push(' ');
            }
            out.push_str(line);
            previous_text = true;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parse should give: the name, description and body, or a part of the error.
    enum Expected {
        Parsed(Option<&'static str>, &'static str, &'static str),
        Fails(&'static str),
    }
    use Expected::{Fails, Parsed};

    #[test]
    fn skill_md_files_parse_or_say_what_is_wrong() {
        let cases: &[(&str, Expected)] = &[
            ("---\nname: pdf\ndescription: Reads PDFs.\n---\n# PDF\n\nUse it.\n", Parsed(Some("pdf"), "Reads PDFs.", "# PDF\n\nUse it.")),
            ("---\ndescription: No name.\n---\n", Parsed(None, "No name.", "")),
            ("---\r\nname: crlf\r\ndescription: Windows\r\n---\r\nbody\r\n", Parsed(Some("crlf"), "Windows", "body")),
            ("\u{feff}---\nname: bom\ndescription: d\n---\nb", Parsed(Some("bom"), "d", "b")),
            ("---\nname: 'it''s'\ndescription: \"say \\\"hi\\\"\\tnow \\u00e9\"\n---\n", Parsed(Some("it's"), "say \"hi\"\tnow é", "")),
            ("---\nname: pdf # the name\ndescription: a#b c # comment\n---\n", Parsed(Some("pdf"), "a#b c", "")),
            ("---\nname: x\ndescription: >\n  Folded text\n  over lines.\n\n  New paragraph.\n---\n", Parsed(Some("x"), "Folded text over lines.\nNew paragraph.", "")),
            ("---\nname: x\ndescription: |\n  line one\n    indented\n  line three\n---\n", Parsed(Some("x"), "line one\n  indented\nline three", "")),
            ("---\nname: x\ndescription: >- # folded\n  a\n  b\n---\n", Parsed(Some("x"), "a b", "")),
            ("---\nname: x\ndescription: |2+\n    deep\n---\n", Parsed(Some("x"), "deep", "")),
            ("---\nname: x\ndescription: A plain value\n  that continues.\n---\n", Parsed(Some("x"), "A plain value that continues.", "")),
            ("---\nname: x\ndescription: \"quoted\n  over lines\"\n---\n", Parsed(Some("x"), "quoted over lines", "")),
            (
                "---\n# a comment\nname: x\nlicense: MIT\nmetadata:\n  version: 1\n  tags: [a, b]\nallowed-tools:\n  - exec\n\ndescription: d\n---\n",
                Parsed(Some("x"), "d", ""),
            ),
            ("---\nname: x\ndescription: d\n---\nText\n---\nmore\n", Parsed(Some("x"), "d", "Text\n---\nmore")),
            ("---\nname:\ndescription: d\n---\n", Parsed(None, "d", "")),
            ("---\nurl: http://x\ndescription: time: 10:30\n---\n", Parsed(None, "time: 10:30", "")),
            ("# PDF\n\nNo front matter.\n", Fails("must begin with a `---` line")),
            ("", Fails("must begin with a `---` line")),
            ("---\nname: x\ndescription: d\n", Fails("never closed by another `---` line")),
            ("---\nname: x\n---\nbody", Fails("has no `description:`")),
            ("---\nname: x\ndescription:   \n---\n", Fails("`description` is empty")),
            ("---\ndescription: ''\n---\n", Fails("`description` is empty")),
            ("---\ndescription: a\ndescription: b\n---\n", Fails("line 3 of the front matter repeats `description`")),
            ("---\nname: x\njust some words\ndescription: d\n---\n", Fails("line 3 of the front matter is not a `key: value` line")),
            ("---\n  name: x\ndescription: d\n---\n", Fails("line 2 of the front matter is indented")),
            ("---\ndescription: \"open\n---\n", Fails("never closed")),
            ("---\ndescription: 'a' b\n---\n", Fails("text after the closing '")),
            ("---\ndescription: \"\\q\"\n---\n", Fails("unknown escape \\q")),
            ("---\ndescription:\n  key: value\n---\n", Fails("must be text, not a list or a map")),
            ("---\ndescription: [a, b]\n---\n", Fails("must be text, not a list or a map")),
            ("---\ndescription: |x\n  a\n---\n", Fails("block header")),
            ("---\ndescription: |\n    a\n  b\n---\n", Fails("indented less than its first")),
        ];
        for (text, expected) in cases {
            let parsed = parse_skill_md(text);
            match (parsed, expected) {
                (Ok(document), Parsed(name, description, body)) => {
                    let expected = SkillDocument {
                        name: name.map(str::to_owned),
                        description: (*description).to_owned(),
                        body: (*body).to_owned(),
                    };
                    assert_eq!(document, expected, "{text:?}");
                }
                (Err(error), Fails(part)) => {
                    assert!(matches!(error, SkillError::Malformed(_)), "{text:?}: {error:?}");
                    assert!(error.to_string().contains(part), "{text:?}: {error}");
                }
                (Ok(document), Fails(part)) => panic!("{text:?} parsed as {document:?}, expected an error with {part:?}"),
                (Err(error), Parsed(..)) => panic!("{text:?}: {error}"),
            }
        }
    }
}
