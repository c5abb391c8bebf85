//! Glob patterns as the file tools take them: `*` (any run of characters but `/`), `**` (any
//! run of directories), `?` (one character but `/`), `[...]` (a class), `{a,b}` (either).

use regex::Regex;

/// The longest pattern taken.
const MAX_PATTERN: usize = 1024;

/// A glob pattern compiled to a regular expression over workspace-relative paths.
#[derive(Debug)]
pub(crate) struct Glob(Regex);

impl Glob {
    /// Compiles `pattern`; the error says what is wrong with it, for the model.
    pub(crate) fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() || pattern.len() > MAX_PATTERN {
            return Err(format!("a glob pattern has 1 to {MAX_PATTERN} bytes"));
        }
        let mut expression = String::from("^");
        let mut chars = pattern.chars().peekable();
        let mut braces = 0usize;
        while let Some(c) = chars.next() {
            match c {
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    if chars.peek() == Some(&'/') {
                        chars.next();
                        expression.push_str("(?:[^/]*/)*");
                    } else {
                        expression.push_str(".*");
                    }
                }
                '*' => expression.push_str("[^/]*"),
                '?' => expression.push_str("[^/]"),
                '[' => {
                    let mut class = String::from("[");
                    if chars.peek() == Some(&'!') {
                        chars.next();
                        class.push('^');
                    }
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == ']' {
                            closed = true;
                            break;
                        }
                        if c == '\\' || c == '[' {
                            class.push('\\');
                        }
                        class.push(c);
                    }
                    if !closed {
                        return Err("a `[` in the pattern is not closed".to_owned());
                    }
                    class.push(']');
                    expression.push_str(&class);
                }
                '{' => {
                    braces += 1;
                    expression.push_str("(?:");
                }
                ',' if braces > 0 => expression.push('|'),
                '}' if braces > 0 => {
                    braces -= 1;
                    expression.push(')');
                }
                c => expression.push_str(&regex::escape(&c.to_string())),
            }
        }
        if braces > 0 {
            return Err("a `{` in the pattern is not closed".to_owned());
        }
        expression.push('$');
        Regex::new(&expression).map(Glob).map_err(|error| format!("the pattern cannot be used: {error}"))
    }

    /// Whether `path` (relative, `/`-separated) matches.
    pub(crate) fn matches(&self, path: &str) -> bool {
        self.0.is_match(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_shells_and_coding_agents_do() {
        let cases: &[(&str, &str, bool)] = &[
            ("*.rs", "main.rs", true),
            ("*.rs", "src/main.rs", false),
            ("**/*.rs", "main.rs", true),
            ("**/*.rs", "src/deep/main.rs", true),
            ("src/**", "src/a/b.txt", true),
            ("src/*.{rs,toml}", "src/lib.toml", true),
            ("src/*.{rs,toml}", "src/lib.md", false),
            ("file?.txt", "file1.txt", true),
            ("file?.txt", "file10.txt", false),
            ("[ab].txt", "b.txt", true),
            ("[!ab].txt", "b.txt", false),
            ("a+b.txt", "a+b.txt", true),
            ("a+b.txt", "aab.txt", false),
        ];
        for (pattern, path, expected) in cases {
            assert_eq!(Glob::new(pattern).unwrap().matches(path), *expected, "{pattern} against {path}");
        }
        assert!(Glob::new("[abc").is_err());
        assert!(Glob::new("{a,b").is_err());
        assert!(Glob::new("").is_err());
    }
}
