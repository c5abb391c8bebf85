//! Runs the architecture checks on this repository, and shows on small trees that each kind of
//! rule still catches a deliberate mistake.

use std::path::{Path, PathBuf};

use teamster_tidy::{ImplException, check, check_with};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_workspace_keeps_its_architecture() {
    let violations = check(&repository()).expect("the repository is readable");
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert!(listed.is_empty(), "architecture violations:\n{}", listed.join("\n"));
}

/// The allow-list may only shrink, and no type may spread over more than three files: its own
/// and at most two others.
#[test]
fn no_type_is_allowed_impls_in_more_than_two_other_files() {
    let spread: Vec<String> = teamster_tidy::IMPL_EXCEPTIONS
        .iter()
        .filter(|(_, _, files)| files.len() > 2)
        .map(|(krate, type_name, files)| format!("{krate}'s {type_name} in {}", files.join(", ")))
        .collect();
    assert!(spread.is_empty(), "types with impls in more than three files:\n{}", spread.join("\n"));
}

/// One crate of a scratch tree: its name, its `[dependencies]` lines, a source file's name and
/// text.
type Crate<'a> = (&'a str, &'a str, &'a str, &'a str);

/// A scratch tree with one crate per [`Crate`], each with its section in the tree's
/// ARCHITECTURE.md, checked with its own impl exceptions (none unless told).
struct Tree(PathBuf, &'static [ImplException]);

impl Tree {
    fn new(label: &str, crates: &[Crate<'_>]) -> Tree {
        let root = std::env::temp_dir().join(format!("teamster-tidy-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let sections: String = crates.iter().map(|(name, ..)| format!("### `crates/{name}`\n\nA crate.\n\n")).collect();
        std::fs::write(root.join("ARCHITECTURE.md"), format!("# Architecture\n\n## Code map\n\n{sections}## Cross-cutting concerns\n")).unwrap();
        for (name, dependencies, file, source) in crates {
            let dir = root.join("crates").join(name);
            let path = dir.join("src").join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(dir.join("Cargo.toml"), format!("[package]\nname = \"{name}\"\n\n[dependencies]\n{dependencies}\n\n[dev-dependencies]\naxum = \"1\"\n")).unwrap();
            std::fs::write(path, source).unwrap();
        }
        Tree(root, &[])
    }

    /// Writes a file under a crate's directory.
    fn write(&self, krate: &str, file: &str, text: &str) {
        let path = self.0.join("crates").join(krate).join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn messages(&self) -> Vec<String> {
        check_with(&self.0, self.1).unwrap().iter().map(ToString::to_string).collect()
    }

    /// Asserts that the tree has exactly one violation, and that it contains `expected`.
    fn assert_one(&self, expected: &str) {
        let messages = self.messages();
        assert!(
            messages.len() == 1 && messages[0].contains(expected),
            "expected one violation containing {expected:?}, got {messages:#?}"
        );
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const CLEAN_ENGINE: &str = "//! The loop.\nuse teamster_llm::ModelClient;\n";

#[test]
fn a_clean_tree_passes_and_each_rule_catches_its_mistake() {
    let clean = Tree::new("clean", &[("teamster-engine", "teamster-llm.workspace = true\ntokio = \"1\"", "lib.rs", CLEAN_ENGINE)]);
    assert_eq!(clean.messages(), Vec::<String>::new());

    let cases: &[(&str, Crate<'_>, &str)] = &[
        (
            "http-import",
            ("teamster-engine", "", "lib.rs", "//! The loop.\nuse axum::http::StatusCode;\n"),
            "lib.rs:2: `StatusCode` in teamster-engine: only the server knows HTTP",
        ),
        (
            "driver-dependency",
            ("teamster-service", "sqlx = { workspace = true }", "lib.rs", "//! The service.\n"),
            "Cargo.toml:5: teamster-service may not depend on sqlx: only the store backends know SQL",
        ),
        (
            "layer-reversed",
            ("teamster-engine", "teamster-store.workspace = true", "lib.rs", "//! The loop.\n"),
            "Cargo.toml:5: teamster-engine may not depend on teamster-store",
        ),
        (
            "environment",
            ("teamster-engine", "", "run.rs", "//! Runs.\nfn limit() { let _ = std::env::var(\"LIMIT\"); }\n"),
            "run.rs:2: `std::env` in teamster-engine",
        ),
        (
            "route-string",
            ("teamster-service", "", "links.rs", "//! Links.\nconst AUTHORIZE: &str = \"/api/v1/mcp-servers\";\n"),
            "links.rs:2: `\"/api/v1` in teamster-service: route strings belong to the server",
        ),
        (
            "sse-framing",
            ("teamster-service", "", "live.rs", "//! Frames.\nfn frame(json: &str) -> String { format!(\"id: 1\\ndata: {json}\\n\\n\") }\n"),
            "live.rs:2: `\"id: ` in teamster-service: SSE framing",
        ),
        ("no-purpose", ("teamster-engine", "", "step.rs", "use std::fmt;\n"), "step.rs:1: a source file starts with a `//!` paragraph"),
        ("unknown-crate", ("teamster-gadget", "", "lib.rs", "//! A gadget.\n"), "crate teamster-gadget has no place in the layers"),
    ];
    for (label, krate, expected) in cases {
        let tree = Tree::new(label, &[*krate]);
        let messages = tree.messages();
        assert!(
            messages.len() == 1 && messages[0].contains(expected),
            "{label}: expected one violation containing {expected:?}, got {messages:#?}"
        );
    }
}

#[test]
fn tests_and_doc_comments_are_not_held_to_the_source_rules() {
    let source = "//! Uses `StatusCode` in prose.\n/// Calls \"/api/v1/agents\".\nfn f() {}\n\n#[cfg(test)]\nmod tests {\n    fn g() { let _ = std::env::var(\"X\"); }\n}\n";
    let tree = Tree::new("exempt", &[("teamster-engine", "", "lib.rs", source)]);
    assert_eq!(tree.messages(), Vec::<String>::new());
}

#[test]
fn modules_that_know_each_other_are_a_cycle_but_a_child_using_its_parent_is_not() {
    let lib = "//! The service.\nmod runner;\nmod recovery;\npub struct Service;\n";
    let runner = "//! Runs.\nuse crate::{Service, recovery::resume};\n";
    let tree = Tree::new("cycle", &[("teamster-service", "", "lib.rs", lib)]);
    let src = tree.0.join("crates/teamster-service/src");
    std::fs::write(src.join("runner.rs"), runner).unwrap();
    std::fs::write(src.join("recovery.rs"), "//! Takes over.\nfn resume() {}\n").unwrap();
    assert_eq!(tree.messages(), Vec::<String>::new(), "one-way, and naming the crate root is naming a parent");

    std::fs::write(src.join("recovery.rs"), "//! Takes over.\nfn resume() { super::runner::spawn(); }\n").unwrap();
    let messages = tree.messages();
    assert!(
        messages.len() == 1 && messages[0].contains("module cycle in teamster-service: crate::recovery -> crate::runner -> crate::recovery"),
        "{messages:#?}"
    );
}

#[test]
fn a_parents_bare_path_to_its_child_is_an_edge() {
    let lib = "//! The server.\nmod openapi;\nmod routes;\n";
    let tree = Tree::new("bare-path", &[("teamster-server", "", "lib.rs", lib)]);
    let krate = "teamster-server";
    tree.write(krate, "src/openapi.rs", "//! The document.\nuse crate::routes::native;\npub struct JsonObject;\n");
    tree.write(krate, "src/routes/mod.rs", "//! Routes.\npub mod native;\n");
    tree.write(krate, "src/routes/native/mod.rs", "//! Native routes.\nmod sessions;\npub fn router() { sessions::router(); }\n");
    tree.write(krate, "src/routes/native/sessions.rs", "//! Sessions.\npub fn router() {}\n");
    assert_eq!(tree.messages(), Vec::<String>::new(), "one way");

    tree.write(krate, "src/routes/native/sessions.rs", "//! Sessions.\nuse crate::openapi::JsonObject;\npub fn router() {}\n");
    tree.assert_one("module cycle in teamster-server: crate::openapi -> crate::routes::native -> crate::routes::native::sessions -> crate::openapi");

    // `self::child` is the same edge.
    tree.write(krate, "src/routes/native/mod.rs", "//! Native routes.\nmod sessions;\npub fn router() { self::sessions::router(); }\n");
    tree.assert_one("module cycle in teamster-server");
}

#[test]
fn a_types_inherent_impls_live_in_its_file_unless_listed_and_a_stale_entry_fails() {
    let lib = "//! The service.\nmod turns;\npub struct Service;\nimpl Service {\n    pub fn new() -> Service { Service }\n}\n";
    let turns = "//! Turns.\nuse crate::Service;\nimpl std::fmt::Debug for Service {\n    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { Ok(()) }\n}\n";
    let mut tree = Tree::new("impls", &[("teamster-service", "", "lib.rs", lib)]);
    tree.write("teamster-service", "src/turns.rs", turns);
    assert_eq!(tree.messages(), Vec::<String>::new(), "a trait impl may live elsewhere");

    let stray = format!("{turns}impl Service {{\n    pub fn create_turn(&self) {{}}\n}}\n");
    tree.write("teamster-service", "src/turns.rs", &stray);
    tree.assert_one("src/turns.rs:6: `impl Service` outside crates/teamster-service/src/lib.rs");

    tree.1 = &[("teamster-service", "Service", &["turns.rs"])];
    assert_eq!(tree.messages(), Vec::<String>::new(), "a listed exception passes");

    tree.write("teamster-service", "src/turns.rs", turns);
    tree.assert_one("IMPL_EXCEPTIONS lists `impl Service` in teamster-service's turns.rs, which has none any more");
}

#[test]
fn a_room_rule_holds_a_crates_other_rooms() {
    let lib = "//! The library.\nmod agent;\nmod runtime;\n";
    let tree = Tree::new("rooms", &[("teamster", "", "lib.rs", lib)]);
    tree.write("teamster", "src/runtime/mod.rs", "//! The runtime.\nuse teamster_service::Service;\n");
    tree.write("teamster", "src/agent.rs", "//! An agent.\npub struct Agent;\n");
    assert_eq!(tree.messages(), Vec::<String>::new(), "the runtime room may know the service");

    tree.write("teamster", "src/agent.rs", "//! An agent.\nuse teamster_store::Store;\npub struct Agent;\n");
    tree.assert_one("src/agent.rs:2: `teamster_store` outside [\"runtime\"] in teamster");
}

#[test]
fn a_crate_missing_from_the_map_fails() {
    let tree = Tree::new("map", &[("teamster-engine", "", "lib.rs", CLEAN_ENGINE)]);
    assert_eq!(tree.messages(), Vec::<String>::new());
    std::fs::write(tree.0.join("ARCHITECTURE.md"), "# Architecture\n\n## Code map\n\n## Elsewhere\n\n### `crates/teamster-engine`\n").unwrap();
    tree.assert_one("crate teamster-engine has no section (### `crates/teamster-engine`) in the code map");
}

#[test]
fn a_diagram_that_drifts_from_the_layers_fails() {
    let tree = Tree::new("diagram", &[("teamster-engine", "", "lib.rs", CLEAN_ENGINE)]);
    let map = |diagram: &str| format!("# Architecture\n\n## Code map\n\n```\n{diagram}\n```\n\n### `crates/teamster-engine`\n\nA crate.\n");
    let layers: Vec<String> = teamster_tidy::LAYERS
        .iter()
        .map(|(name, floor)| {
            let short = |name: &str| name.strip_prefix("teamster-").unwrap_or(name).to_owned();
            let floor: Vec<String> = floor.iter().map(|name| short(name)).collect();
            match floor.is_empty() {
                true => format!("{}: nothing of the workspace", short(name)),
                false => format!("{} ► {}", short(name), floor.join(", ")),
            }
        })
        .collect();
    std::fs::write(tree.0.join("ARCHITECTURE.md"), map(&layers.join("\n"))).unwrap();
    assert_eq!(tree.messages(), Vec::<String>::new(), "a diagram drawn from the layers passes");
    let without_engine: Vec<&String> = layers.iter().filter(|line| !line.starts_with("engine ►")).collect();
    let without_engine: Vec<&str> = without_engine.iter().map(|line| line.as_str()).collect();
    std::fs::write(tree.0.join("ARCHITECTURE.md"), map(&without_engine.join("\n"))).unwrap();
    tree.assert_one("diagram does not draw teamster-engine");
}
