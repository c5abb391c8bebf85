//! Keeping secrets out of messages: git's error output, and URLs shown in errors, with every
//! password, token and `user:password@` of a URL replaced by `***`.

/// What replaces a secret.
const MASK: &str = "***";

/// The secrets of one fetch, to be taken out of whatever text is shown.
#[derive(Default)]
pub(crate) struct Redactor {
    /// Longest first, so a secret containing another is masked whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for these secrets (empty ones are ignored).
    pub(crate) fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|secret| !secret.is_empty()).collect();
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with the credentials of any URL in it, and every secret, replaced by `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = without_userinfo(text);
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        text
    }
}

/// `text` with the `user:password@` of every `scheme://` URL in it replaced by `***@`.
pub(crate) fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let authority_end = after
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || "'\"<>`".contains(c))
            .unwrap_or(after.len());
        let authority = &after[..authority_end];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                out.push_str(MASK);
                out.push_str(&authority[userinfo_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[authority_end..];
    }
    out.push_str(rest);
    out
}

/// The end of `text`, at most `max` bytes of it (cut at a line start when one is near), so an
/// error shows git's last words.
pub(crate) fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let kept = &text[start..];
    let kept = match kept.find('\n') {
        Some(newline) if newline < max / 4 => &kept[newline + 1..],
        _ => kept,
    };
    format!("…{kept}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_url_credentials_are_masked() {
        let redactor = Redactor::new(["hunter2".to_owned(), "dXNlcjpodW50ZXIy".to_owned(), String::new()]);
        let cases = [
            ("fatal: unable to access 'https://bob:hunter2@example.com/r.git/': 403", "fatal: unable to access 'https://***@example.com/r.git/': 403"),
            ("unable to look up bob:hunter2@127.0.0.1:1 (port 9418)", "unable to look up bob:***@127.0.0.1:1 (port 9418)"),
            ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Basic ***"),
            ("git://host/repo.git and http://a@b", "git://host/repo.git and http://***@b"),
            ("no secrets here", "no secrets here"),
        ];
        for (text, expected) in cases {
            assert_eq!(redactor.redact(text), expected, "{text}");
        }
    }

    #[test]
    fn long_messages_keep_their_end() {
        let text = format!("{}\nfatal: the real reason", "progress line\n".repeat(1000));
        let kept = tail(&text, 100);
        assert!(kept.len() <= 100 + "…".len() && kept.ends_with("fatal: the real reason"), "{kept}");
        assert_eq!(tail("  short \n", 100), "short");
    }
}
