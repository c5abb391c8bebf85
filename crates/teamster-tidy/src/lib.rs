//! The architecture's invariants, checked: each crate's floor (which crates and libraries it
//! may depend on) and rules on its sources (what only one layer may know).
//!
//! [`check`] reads every `crates/*/Cargo.toml` and every `crates/*/src/**/*.rs` of a tree and
//! returns what breaks a rule; `tests/tidy.rs` runs it on this repository, and on small trees
//! with one deliberate mistake each, so a rule that can no longer fail is noticed. The rules
//! are the "Invariant" lines of ARCHITECTURE.md. Source rules read text, not syntax: a file's
//! `#[cfg(test)]` module (by convention its end) is not checked, and doc comments are skipped.
//! Within each crate, modules may not depend on each other in a cycle (see `modules`), a type's
//! inherent impls live in the file that defines it (see `impls`), and a crate with rooms keeps
//! each room's knowledge in that room (`ROOM_RULES`). Every crate has its section in
//! ARCHITECTURE.md's code map, and the map's diagram draws each crate's floor as `LAYERS` has
//! it (see `diagram`).

mod diagram;
mod impls;
mod modules;

use std::fmt;
use std::path::{Path, PathBuf};

/// Each crate and the workspace crates it may depend on (its floor). A crate missing here is
/// a violation itself: a new crate states its place in the architecture.
pub const LAYERS: &[(&str, &[&str])] = &[
    ("teamster-protocol", &[]),
    ("teamster-llm", &["teamster-protocol"]),
    ("teamster-tools", &["teamster-protocol"]),
    ("teamster-store", &["teamster-protocol"]),
    ("teamster-egress", &[]),
    ("teamster-mcp", &["teamster-protocol", "teamster-tools", "teamster-egress"]),
    ("teamster-sandbox", &["teamster-protocol", "teamster-tools", "teamster-egress"]),
    ("teamster-skills", &["teamster-sandbox", "teamster-egress"]),
    ("teamster-workspace", &["teamster-protocol", "teamster-tools", "teamster-sandbox"]),
    ("teamster-store-sql", &["teamster-store"]),
    ("teamster-store-sqlite", &["teamster-protocol", "teamster-store", "teamster-store-sql"]),
    ("teamster-store-postgres", &["teamster-protocol", "teamster-store", "teamster-store-sql"]),
    ("teamster-stores", &["teamster-store", "teamster-store-sqlite", "teamster-store-postgres"]),
    ("teamster-engine", &["teamster-protocol", "teamster-llm", "teamster-tools"]),
    ("teamster-control", &["teamster-protocol", "teamster-tools"]),
    ("teamster-live", &["teamster-protocol"]),
    ("teamster-identity", &["teamster-protocol", "teamster-store", "teamster-mcp"]),
    ("teamster-telemetry", &["teamster-protocol", "teamster-llm", "teamster-store"]),
    ("teamster-runtime", &["teamster-protocol", "teamster-store", "teamster-engine", "teamster-telemetry"]),
    ("teamster-sealed", &["teamster-protocol", "teamster-store", "teamster-mcp"]),
    ("teamster-limits", &["teamster-protocol", "teamster-store", "teamster-engine"]),
    (
        "teamster-mcp-host",
        &[
            "teamster-protocol",
            "teamster-store",
            "teamster-tools",
            "teamster-mcp",
            "teamster-engine",
            "teamster-egress",
            "teamster-identity",
            "teamster-sealed",
        ],
    ),
    (
        "teamster-service",
        &[
            "teamster-protocol",
            "teamster-llm",
            "teamster-tools",
            "teamster-store",
            "teamster-engine",
            "teamster-mcp",
            "teamster-sandbox",
            "teamster-control",
            "teamster-egress",
            "teamster-identity",
            "teamster-telemetry",
            "teamster-runtime",
            "teamster-sealed",
            "teamster-mcp-host",
            "teamster-limits",
            "teamster-skills",
            "teamster-live",
            "teamster-workspace",
        ],
    ),
    (
        "teamster-channels",
        &["teamster-protocol", "teamster-store", "teamster-control", "teamster-live", "teamster-workspace", "teamster-service"],
    ),
    ("teamster-server", &["teamster-protocol", "teamster-service", "teamster-live", "teamster-channels"]),
    (
        "teamster-cli",
        &[
            "teamster-protocol",
            "teamster-llm",
            "teamster-sandbox",
            "teamster-store",
            "teamster-stores",
            "teamster-service",
            "teamster-server",
            "teamster-egress",
        ],
    ),
    (
        "teamster",
        &[
            "teamster-protocol",
            "teamster-llm",
            "teamster-tools",
            "teamster-engine",
            "teamster-mcp",
            "teamster-sandbox",
            "teamster-stores",
            "teamster-service",
            "teamster-control",
            "teamster-live",
            "teamster-channels",
        ],
    ),
    ("teamster-fake-model", &[]),
    ("teamster-tidy", &[]),
];

/// Libraries only some crates may use, and which.
const LIBRARIES: &[(&str, &[&str], &str)] = &[
    ("sqlx", &["teamster-store-sql", "teamster-store-sqlite", "teamster-store-postgres"], "only the store backends know SQL"),
    ("rusqlite", &["teamster-store-sqlite"], "only the SQLite backend runs SQLite on the calling thread"),
    ("axum", &["teamster-server", "teamster-fake-model"], "only the server knows HTTP"),
    ("hyper", &["teamster-server"], "only the server knows HTTP"),
    ("hyper-util", &["teamster-server"], "only the server knows HTTP"),
    ("http", &["teamster-server"], "only the server knows HTTP"),
    ("tower", &["teamster-server"], "only the server knows HTTP"),
    ("tower-http", &["teamster-server"], "only the server knows HTTP"),
    ("tokio", &["*", "!teamster-protocol", "!teamster-live"], "the protocol and the live vocabulary have no async runtime"),
    ("reqwest", &["*", "!teamster-protocol", "!teamster-engine", "!teamster-tools", "!teamster-store"], "the engine, tools, store and protocol make no HTTP requests"),
];

/// Text that only some crates' sources may contain, outside doc comments and tests.
const SOURCE_RULES: &[SourceRule] = &[
    SourceRule {
        needles: &["StatusCode", "axum::", "hyper::", "http::"],
        // The model and MCP clients speak HTTP to providers and servers; the server serves it.
        allowed: &["teamster-server", "teamster-llm", "teamster-mcp", "teamster-cli", "teamster-fake-model"],
        why: "only the server knows HTTP (status codes, routers, headers)",
    },
    SourceRule {
        needles: &["\"/api/v1", "\"/v1/agents", "\"/v1/x/agents"],
        allowed: &["teamster-server", "teamster-cli", "teamster-fake-model"],
        why: "route strings belong to the server (and to clients of the API)",
    },
    SourceRule {
        needles: &["\"data: ", "\"\\ndata: ", "\"id: ", "sse::frame"],
        allowed: &["teamster-server", "teamster-protocol", "teamster-cli", "teamster-fake-model", "teamster-llm", "teamster-mcp"],
        why: "SSE framing of our streams belongs to the server and the protocol's `sse` module",
    },
    SourceRule {
        needles: &["std::env", "env::var"],
        allowed: &["teamster-cli", "teamster-llm", "teamster-mcp", "teamster-fake-model", "teamster-tidy"],
        why: "configuration reaches the engine, service, store and server as values, never from the environment",
    },
    SourceRule {
        needles: &["sqlx::"],
        allowed: &["teamster-store-sql", "teamster-store-sqlite", "teamster-store-postgres"],
        why: "only the store backends know SQL",
    },
];

/// Files a source rule does not apply to yet, each with the reason; the list only shrinks.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

/// Module cycles that are one recursive type across two files, not two modules that know each
/// other: each as its crate, its modules, and the reason.
const RECURSIVE_TYPES: &[(&str, &[&str], &str)] = &[(
    "teamster-protocol",
    &["crate::event", "crate::turn"],
    "a turn's state holds the events it waits on, and `turn.created`/`turn.done` hold a turn state",
)];

/// What only some rooms (top-level modules) of a crate may name, outside doc comments and tests:
/// the crate, the text, the rooms allowed it, and why.
const ROOM_RULES: &[(&str, &[&str], &[&str], &str)] = &[
    (
        "teamster",
        &["teamster_service", "teamster_store", "teamster_sandbox", "teamster_live", "teamster_control"],
        &["runtime"],
        "the library's stateless level knows no service, store or sandbox: only `runtime` does",
    ),
    (
        "teamster-llm",
        &["reqwest"],
        &["providers", "registry"],
        "only the providers (and the registry that makes their clients) speak HTTP to a provider",
    ),
];

/// Types whose inherent impls live outside the file that defines them, today: the crate, the
/// type, and the files (under the crate's `src`) that hold such an impl. The list only shrinks:
/// a new stray impl fails, and so does an entry no impl needs any more.
pub const IMPL_EXCEPTIONS: &[ImplException] = &[
    ("teamster-llm", "TokenUsage", &["cost.rs"]),
    ("teamster-sandbox", "Bubblewrap", &["network.rs"]),
    ("teamster-service", "Service", &["clones.rs", "turns.rs"]),
    ("teamster-service", "Events", &["views.rs"]),
    ("teamster-service", "Catalog", &["catalog/agents.rs", "catalog/sessions.rs"]),
    ("teamster-runtime", "TurnRuntime", &["replicas.rs", "subscribe.rs"]),
    ("teamster-service", "TurnSandbox", &["sandboxes/skill_mounts.rs"]),
    ("teamster-mcp-host", "McpHost", &["oauth.rs", "toolbox.rs"]),
];

/// A crate, one of its types, and the files other than the type's own that may hold its
/// inherent impls.
pub type ImplException = (&'static str, &'static str, &'static [&'static str]);

struct SourceRule {
    needles: &'static [&'static str],
    allowed: &'static [&'static str],
    why: &'static str,
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Every violation in the workspace rooted at `root`.
pub fn check(root: &Path) -> std::io::Result<Vec<Violation>> {
    check_with(root, IMPL_EXCEPTIONS)
}

/// Every violation in the workspace rooted at `root`, with `impl_exceptions` as the stray impls
/// allowed (a scratch tree brings its own).
pub fn check_with(root: &Path, impl_exceptions: &[ImplException]) -> std::io::Result<Vec<Violation>> {
    let mut violations = Vec::new();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let code_map = code_map(&map);
    for message in diagram::problems(&code_map, LAYERS) {
        violations.push(Violation { file: PathBuf::from("ARCHITECTURE.md"), line: None, message });
    }
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    for crate_dir in crates {
        let manifest_path = crate_dir.join("Cargo.toml");
        let manifest = std::fs::read_to_string(&manifest_path)?;
        let relative = |path: &Path| path.strip_prefix(root).unwrap_or(path).to_path_buf();
        let Some(name) = package_name(&manifest) else {
            violations.push(Violation { file: relative(&manifest_path), line: None, message: "no package name".into() });
            continue;
        };
        check_manifest(&name, &manifest, &relative(&manifest_path), &mut violations);
        let crate_path = relative(&crate_dir);
        if !code_map.contains(&format!("### `{}`", crate_path.display())) {
            violations.push(Violation {
                file: PathBuf::from("ARCHITECTURE.md"),
                line: None,
                message: format!("crate {name} has no section (### `{}`) in the code map", crate_path.display()),
            });
        }
        let mut sources = Vec::new();
        let src = crate_dir.join("src");
        rust_files(&src, &mut sources)?;
        sources.sort();
        let mut impls = impls::Impls::default();
        for source in &sources {
            let text = std::fs::read_to_string(source)?;
            check_source(&name, &text, &relative(source), &mut violations);
            let in_src = source.strip_prefix(&src).unwrap_or(source);
            check_rooms(&name, in_src, &text, &relative(source), &mut violations);
            impls.read(in_src, &text);
        }
        check_impls(&name, &impls, &relative(&src), impl_exceptions, &mut violations);
        for cycle in modules::cycles(&modules::read_modules(&src, &sources)?) {
            let recursive_type = RECURSIVE_TYPES.iter().any(|(krate, members, _)| {
                *krate == name && members.len() == cycle.len() && cycle.iter().all(|module| members.contains(&module.as_str()))
            });
            if recursive_type {
                continue;
            }
            violations.push(Violation {
                file: relative(&src),
                line: None,
                message: format!("module cycle in {name}: {} -> {}", cycle.join(" -> "), cycle[0]),
            });
        }
    }
    Ok(violations)
}

/// The "Code map" section of ARCHITECTURE.md: from its heading to the next `## ` heading.
fn code_map(architecture: &str) -> String {
    let Some(start) = architecture.find("\n## Code map") else { return String::new() };
    let rest = &architecture[start + 1..];
    let end = rest[1..].find("\n## ").map_or(rest.len(), |at| at + 1);
    rest[..end].to_owned()
}

/// A crate's stray inherent impls against its exceptions, and the exceptions that are stale.
fn check_impls(name: &str, impls: &impls::Impls, src: &Path, exceptions: &[ImplException], violations: &mut Vec<Violation>) {
    let strays = impls.strays();
    let listed = |type_name: &str, file: &Path| {
        exceptions.iter().any(|(krate, listed_type, files)| {
            *krate == name && *listed_type == type_name && files.iter().any(|listed_file| Path::new(listed_file) == file)
        })
    };
    for stray in &strays {
        if !listed(&stray.type_name, &stray.file) {
            violations.push(Violation {
                file: src.join(&stray.file),
                line: Some(stray.line),
                message: format!(
                    "`impl {}` outside {}, the file that defines it: a type's methods live with it",
                    stray.type_name,
                    src.join(&stray.defined_in).display()
                ),
            });
        }
    }
    for (_, type_name, files) in exceptions.iter().filter(|(krate, _, _)| *krate == name) {
        for file in *files {
            if !strays.iter().any(|stray| stray.type_name == *type_name && stray.file == Path::new(file)) {
                violations.push(Violation {
                    file: PathBuf::from("crates/teamster-tidy/src/lib.rs"),
                    line: None,
                    message: format!(
                        "IMPL_EXCEPTIONS lists `impl {type_name}` in {name}'s {file}, which has none any more: remove the entry"
                    ),
                });
            }
        }
    }
}

/// The room rules of a crate on one of its files (`in_src`: its path under `src`).
fn check_rooms(name: &str, in_src: &Path, text: &str, file: &Path, violations: &mut Vec<Violation>) {
    let room = in_src.iter().next().and_then(|first| first.to_str()).map(|first| first.trim_end_matches(".rs"));
    for (krate, needles, rooms, why) in ROOM_RULES {
        if *krate != name || room.is_some_and(|room| rooms.contains(&room)) {
            continue;
        }
        for (index, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            if let Some(needle) = needles.iter().find(|needle| code.contains(*needle)) {
                violations.push(Violation {
                    file: file.to_path_buf(),
                    line: Some(index + 1),
                    message: format!("`{needle}` outside {rooms:?} in {name}: {why}"),
                });
            }
        }
    }
}

fn check_manifest(name: &str, manifest: &str, file: &Path, violations: &mut Vec<Violation>) {
    let Some((_, floor)) = LAYERS.iter().find(|(layer, _)| *layer == name) else {
        violations.push(Violation {
            file: file.to_path_buf(),
            line: None,
            message: format!("crate {name} has no place in the layers: add it to LAYERS and to ARCHITECTURE.md"),
        });
        return;
    };
    for (line, dependency) in dependencies(manifest) {
        let at = Some(line);
        if dependency.starts_with("teamster-") {
            if !floor.contains(&dependency.as_str()) {
                violations.push(Violation {
                    file: file.to_path_buf(),
                    line: at,
                    message: format!("{name} may not depend on {dependency}: its floor is {floor:?}"),
                });
            }
            continue;
        }
        if let Some((_, allowed, why)) = LIBRARIES.iter().find(|(library, _, _)| *library == dependency)
            && !is_allowed(name, allowed)
        {
            violations.push(Violation {
                file: file.to_path_buf(),
                line: at,
                message: format!("{name} may not depend on {dependency}: {why}"),
            });
        }
    }
}

fn is_allowed(name: &str, allowed: &[&str]) -> bool {
    if allowed.contains(&format!("!{name}").as_str()) {
        return false;
    }
    allowed.contains(&"*") || allowed.contains(&name)
}

fn check_source(name: &str, text: &str, file: &Path, violations: &mut Vec<Violation>) {
    if !text.starts_with("//!") {
        violations.push(Violation {
            file: file.to_path_buf(),
            line: Some(1),
            message: "a source file starts with a `//!` paragraph saying what it is for".into(),
        });
    }
    // This crate names what it looks for.
    let exempt = name == "teamster-tidy" || KNOWN_EXCEPTIONS.iter().any(|(path, _)| file == Path::new(path));
    for (index, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        for rule in SOURCE_RULES {
            if rule.allowed.contains(&name) || exempt {
                continue;
            }
            if let Some(needle) = rule.needles.iter().find(|needle| code.contains(*needle)) {
                violations.push(Violation {
                    file: file.to_path_buf(),
                    line: Some(index + 1),
                    message: format!("`{needle}` in {name}: {}", rule.why),
                });
            }
        }
    }
}

/// The package name of a manifest.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name") {
            return Some(value.trim_start().strip_prefix('=')?.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// The names of a manifest's `[dependencies]` (not dev- or build-dependencies), with their
/// line numbers.
fn dependencies(manifest: &str) -> Vec<(usize, String)> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for (index, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]" || line.starts_with("[target.") && line.ends_with(".dependencies]");
            continue;
        }
        if !in_dependencies || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name: String = line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
        if !name.is_empty() {
            found.push((index + 1, name));
        }
    }
    found
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, into)?;
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            into.push(path);
        }
    }
    Ok(())
}
