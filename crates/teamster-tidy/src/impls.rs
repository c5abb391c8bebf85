//! The room rule for types: a struct's (or enum's) inherent `impl` blocks live in the file that
//! defines it, so a type's behaviour is read in one place and a room that grows methods on
//! another room's type shows up here. Trait impls may live elsewhere (with the trait, or with the
//! code that needs them). Today's exceptions are listed in `lib.rs` (`IMPL_EXCEPTIONS`); the list
//! only shrinks: an entry that no longer matches an impl is a violation too.
//!
//! Like the other rules this reads text, not syntax: a definition is a line starting with
//! `struct`, `enum` or `union` (after any visibility), an inherent impl a line starting with
//! `impl` whose header has no ` for `; code after a file's `#[cfg(test)]` line is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One type's inherent impl outside the file that defines it, by name: the type and the file of
/// the impl (relative to the crate's `src`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StrayImpl {
    pub(crate) type_name: String,
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) defined_in: PathBuf,
}

/// What a crate's sources define and implement, by type name.
#[derive(Default)]
pub(crate) struct Impls {
    definitions: BTreeMap<String, BTreeSet<PathBuf>>,
    /// Each inherent impl's type, file and line.
    impls: Vec<(String, PathBuf, usize)>,
}

impl Impls {
    /// Reads one source file (its path relative to the crate's `src`).
    pub(crate) fn read(&mut self, file: &Path, text: &str) {
        for (index, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            if let Some(name) = defined_type(code) {
                self.definitions.entry(name).or_default().insert(file.to_path_buf());
            } else if let Some(name) = inherent_impl(code) {
                self.impls.push((name, file.to_path_buf(), index + 1));
            }
        }
    }

    /// The inherent impls of types this crate defines, in files that define no type of that name.
    pub(crate) fn strays(&self) -> Vec<StrayImpl> {
        let mut strays = Vec::new();
        for (name, file, line) in &self.impls {
            let Some(files) = self.definitions.get(name) else { continue };
            if files.contains(file) {
                continue;
            }
            let defined_in = files.iter().next().cloned().unwrap_or_default();
            strays.push(StrayImpl { type_name: name.clone(), file: file.clone(), line: *line, defined_in });
        }
        strays.sort();
        strays
    }
}

/// The type a line defines, if it starts a struct, enum or union.
fn defined_type(code: &str) -> Option<String> {
    let rest = strip_visibility(code);
    let rest = ["struct ", "enum ", "union "].iter().find_map(|keyword| rest.strip_prefix(keyword))?;
    let name = identifier(rest.trim_start());
    (!name.is_empty()).then_some(name)
}

/// The type of an inherent `impl` block that a line opens, if it opens one.
fn inherent_impl(code: &str) -> Option<String> {
    let rest = code.strip_prefix("unsafe ").unwrap_or(code);
    let rest = rest.strip_prefix("impl")?;
    if !(rest.starts_with(' ') || rest.starts_with('<')) || rest.contains(" for ") {
        return None;
    }
    let mut rest = rest.trim_start();
    if rest.starts_with('<') {
        let mut depth = 0usize;
        let mut end = rest.len();
        for (at, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = rest[end..].trim_start();
    }
    let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    let name = path.rsplit("::").next().unwrap_or_default().to_owned();
    (!name.is_empty()).then_some(name)
}

fn strip_visibility(code: &str) -> &str {
    let Some(rest) = code.strip_prefix("pub") else { return code };
    if let Some(inside) = rest.strip_prefix('(') {
        return inside.split_once(')').map_or(code, |(_, after)| after.trim_start());
    }
    rest.strip_prefix(' ').map_or(code, str::trim_start)
}

fn identifier(text: &str) -> String {
    text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read() {
        assert_eq!(defined_type("pub(crate) struct Service<T> {").as_deref(), Some("Service"));
        assert_eq!(defined_type("pub enum Kind {").as_deref(), Some("Kind"));
        assert_eq!(defined_type("let struct_ = 1;"), None);
        assert_eq!(inherent_impl("impl<T: Clone> Service<T> {").as_deref(), Some("Service"));
        assert_eq!(inherent_impl("impl crate::Service {").as_deref(), Some("Service"));
        assert_eq!(inherent_impl("impl fmt::Display for Service {"), None);
        assert_eq!(inherent_impl("impls.push(1);"), None);
    }
}
