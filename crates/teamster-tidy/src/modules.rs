//! The module rule: within a crate, modules depend on each other one way. A module's
//! dependencies are the modules its paths name (`crate::a::b`, `super::a`, `self::a`,
//! `use crate::{a, b}`, and a child's bare path such as `child::f()` in its parent), each resolved to the deepest module that exists; a module naming one of its ancestors (a
//! child using its parent's types) is the structure itself, not a dependency. A cycle among
//! the rest means two modules each know the other, and one of them should be split.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path, its segments after `crate`.
type Module = Vec<String>;

/// The module a source file holds, from its path under `src/`.
pub(crate) fn module_of(src: &Path, file: &Path) -> Option<Module> {
    let relative = file.strip_prefix(src).ok()?;
    let mut segments: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let last = segments.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match stem {
        "lib" | "main" if segments.is_empty() => {}
        "mod" => {}
        other => segments.push(other.to_owned()),
    }
    Some(segments)
}

/// The cycles among a crate's modules, each as the module paths around it, given each module
/// and its source text.
pub(crate) fn cycles(sources: &[(Module, String)]) -> Vec<Vec<String>> {
    let modules: BTreeSet<Module> = sources.iter().map(|(module, _)| module.clone()).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in sources {
        let children: Vec<&str> = modules
            .iter()
            .filter(|other| other.len() == module.len() + 1 && other.starts_with(module))
            .filter_map(|child| child.last().map(String::as_str))
            .collect();
        let targets = edges.entry(module.clone()).or_default();
        for path in named_paths(text, &children) {
            let Some(absolute) = resolve(module, &path) else { continue };
            let Some(target) = deepest(&modules, &absolute) else { continue };
            if !module.starts_with(&target) {
                targets.insert(target);
            }
        }
    }
    let mut found = Vec::new();
    let mut reported: BTreeSet<BTreeSet<Module>> = BTreeSet::new();
    for start in edges.keys() {
        if let Some(cycle) = cycle_through(&edges, start) {
            let members: BTreeSet<Module> = cycle.iter().cloned().collect();
            if reported.insert(members) {
                found.push(cycle.iter().map(display).collect());
            }
        }
    }
    found
}

/// The shortest cycle from `start` back to itself, if any (breadth first).
fn cycle_through(edges: &BTreeMap<Module, BTreeSet<Module>>, start: &Module) -> Option<Vec<Module>> {
    let mut previous: BTreeMap<&Module, &Module> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for module in frontier {
            for target in edges.get(module).into_iter().flatten() {
                if target == start {
                    let mut cycle = vec![module.clone()];
                    let mut at = module;
                    while let Some(before) = previous.get(at) {
                        cycle.push((*before).clone());
                        at = before;
                    }
                    // The walk back ends at `start`, which has no predecessor.
                    cycle.reverse();
                    return Some(cycle);
                }
                if target != start && !previous.contains_key(target) {
                    previous.insert(target, module);
                    next.push(target);
                }
            }
        }
        frontier = next;
    }
    None
}

fn display(module: &Module) -> String {
    if module.is_empty() { "crate".to_owned() } else { format!("crate::{}", module.join("::")) }
}

/// The deepest existing module along an absolute path.
fn deepest(modules: &BTreeSet<Module>, path: &[String]) -> Option<Module> {
    (0..=path.len()).rev().map(|length| path[..length].to_vec()).find(|candidate| modules.contains(candidate))
}

/// An absolute path (segments after `crate`) for a path named in `module`.
fn resolve(module: &Module, path: &[String]) -> Option<Module> {
    let mut segments = path.iter();
    let mut base: Module = match segments.next()?.as_str() {
        "crate" => Vec::new(),
        "self" => module.clone(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    let mut rest: Vec<String> = Vec::new();
    for segment in segments {
        if segment == "super" && rest.is_empty() {
            base.pop()?;
        } else {
            rest.push(segment.clone());
        }
    }
    base.extend(rest);
    Some(base)
}

/// The `crate::…`, `super::…` and `self::…` paths in a source's code (not its comments or its
/// `#[cfg(test)]` module), and the bare paths that start with one of the module's `children`
/// (read as `self::child::…`), with each item of a `{…}` group as a path of its own.
fn named_paths(text: &str, children: &[&str]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        for root in ["crate", "super", "self"] {
            for start in path_starts(code, root) {
                paths.extend(expand(&code[start..]));
            }
        }
        for child in children {
            for start in path_starts(code, child) {
                let mut path = expand(&code[start..]);
                for named in &mut path {
                    named.insert(0, "self".to_owned());
                }
                paths.extend(path);
            }
        }
    }
    paths
}

/// Where paths starting with the segment `first` begin in a line of code: `first::` not preceded
/// by part of another name or path.
fn path_starts<'a>(code: &'a str, first: &'a str) -> impl Iterator<Item = usize> + 'a {
    let needle = format!("{first}::");
    let starts: Vec<usize> = code.match_indices(needle.as_str()).map(|(start, _)| start).collect();
    starts.into_iter().filter(move |start| {
        let before = code[..*start].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// The paths a path expression starting at `text` names: `a::b::C` is one, `a::{b, c::D}` two.
fn expand(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        prefix.push(name);
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => return vec![prefix],
        }
        if let Some(group) = rest.strip_prefix('{') {
            let inside = group.split('}').next().unwrap_or_default();
            return inside
                .split(',')
                .map(|item| {
                    let item: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    let mut path = prefix.clone();
                    if !item.is_empty() && item != "self" {
                        path.push(item);
                    }
                    path
                })
                .collect();
        }
    }
    vec![prefix]
}

/// Reads a crate's sources under `src` into modules and texts.
pub(crate) fn read_modules(src: &Path, files: &[PathBuf]) -> std::io::Result<Vec<(Module, String)>> {
    let mut sources = Vec::new();
    for file in files {
        if let Some(module) = module_of(src, file) {
            sources.push((module, std::fs::read_to_string(file)?));
        }
    }
    Ok(sources)
}
