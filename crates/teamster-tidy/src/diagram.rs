//! The code map's diagram (the first fenced block of ARCHITECTURE.md's "Code map") against
//! [`LAYERS`](crate::LAYERS): each line names crates by their short names (without
//! `teamster-`; the library is `teamster (library)`), then `►` and the floor they share, or
//! `: nothing of the workspace`. Every crate of the layers is on exactly one line, with its
//! floor exactly, so the picture a reader trusts cannot drift from what the check enforces.

use std::collections::{BTreeMap, BTreeSet};

/// What is wrong with the diagram in `code_map`; nothing when the map has no diagram.
pub(crate) fn problems(code_map: &str, layers: &[(&str, &[&str])]) -> Vec<String> {
    let Some(diagram) = fenced_block(code_map) else { return Vec::new() };
    let mut drawn: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for line in diagram.lines().filter(|line| !line.trim().is_empty()) {
        let Some((names, floor)) = split(line) else {
            problems.push(format!("diagram line {line:?} has neither `►` nor `: nothing of the workspace`"));
            continue;
        };
        for name in names {
            if drawn.insert(name.clone(), floor.clone()).is_some() {
                problems.push(format!("diagram draws {name} on more than one line"));
            }
        }
    }
    for (name, floor) in layers {
        let short = short_name(name);
        let wanted: BTreeSet<String> = floor.iter().map(|crate_name| short_name(crate_name)).collect();
        match drawn.remove(&short) {
            None => problems.push(format!("diagram does not draw {name}")),
            Some(shown) if shown != wanted => problems.push(format!(
                "diagram draws {name} on {} but its floor is {}",
                listed(&shown),
                listed(&wanted)
            )),
            Some(_) => {}
        }
    }
    problems.extend(drawn.keys().map(|name| format!("diagram draws {name}, which is not in the layers")));
    problems
}

/// The text of the first fenced block.
fn fenced_block(text: &str) -> Option<&str> {
    let start = text.find("\n```")? + 1;
    let body = start + text[start..].find('\n')? + 1;
    let end = body + text[body..].find("\n```")?;
    Some(&text[body..end])
}

/// A line's crates and the floor it draws for them.
fn split(line: &str) -> Option<(Vec<String>, BTreeSet<String>)> {
    let (names, floor) = match line.split_once('►') {
        Some((names, floor)) => (names.trim_end_matches(['─', ' ']), floor.split(',').map(|name| name.trim().to_owned()).collect()),
        None => (line.strip_suffix(": nothing of the workspace")?, BTreeSet::new()),
    };
    let names = names.split(',').map(|name| name.trim().trim_end_matches(" (library)").to_owned()).collect();
    Some((names, floor))
}

/// A crate's name as the diagram writes it.
fn short_name(name: &str) -> String {
    name.strip_prefix("teamster-").unwrap_or(name).to_owned()
}

fn listed(names: &BTreeSet<String>) -> String {
    match names.is_empty() {
        true => "nothing".to_owned(),
        false => names.iter().cloned().collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYERS: &[(&str, &[&str])] = &[("teamster-protocol", &[]), ("teamster-llm", &["teamster-protocol"]), ("teamster", &["teamster-llm"])];

    fn map(diagram: &str) -> String {
        format!("## Code map\n\nThe crates.\n\n```\n{diagram}\n```\n\n### `crates/teamster`\n")
    }

    #[test]
    fn a_true_diagram_passes() {
        let diagram = "teamster (library) ► llm\nllm ──────► protocol\nprotocol: nothing of the workspace";
        assert_eq!(problems(&map(diagram), LAYERS), Vec::<String>::new());
        assert_eq!(problems("## Code map\n\nNo picture.\n", LAYERS), Vec::<String>::new());
    }

    #[test]
    fn each_drift_is_named() {
        let diagram = "teamster (library) ► llm, protocol\nllm, sealed ► protocol\nllm ► protocol";
        assert_eq!(
            problems(&map(diagram), LAYERS),
            vec![
                "diagram draws llm on more than one line".to_owned(),
                "diagram does not draw teamster-protocol".to_owned(),
                "diagram draws teamster on llm, protocol but its floor is llm".to_owned(),
                "diagram draws sealed, which is not in the layers".to_owned(),
            ]
        );
    }
}
