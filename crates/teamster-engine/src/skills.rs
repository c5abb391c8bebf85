//! What the model is told about the agent's skills: one section after the instructions, with
//! each skill's name, what it is for and where its `SKILL.md` is, in the order the agent lists
//! them. It depends on the skills alone, so the prompt prefix stays the same from call to call
//! and turn to turn; the model reads a skill's files when it needs them. A preloaded skill's
//! body is in the section too.

/// A skill the agent has, as its context describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillNote {
    /// The name it is known by (and mounted under).
    pub name: String,
    /// What it is for, from its `SKILL.md`.
    pub description: String,
    /// Where the model reads its `SKILL.md` (a path inside the sandbox).
    pub path: String,
    /// The body of its `SKILL.md`, when the agent preloads it.
    pub preloaded: Option<String>,
}

/// The section of the system prompt that lists `skills`; `None` when there are none.
pub(crate) fn skills_section(skills: &[SkillNote]) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut section = String::from(
        "# Skills\n\nThese skills hold instructions and files for particular tasks. When a task matches a \
         skill's description, read its SKILL.md first (with the exec tool, e.g. `cat <path>`) and follow \
         it; its other files are in the same directory.\n",
    );
    for skill in skills {
        section.push_str(&format!("\n- {}: {} (SKILL.md: {})", skill.name, one_line(&skill.description), skill.path));
    }
    section.push('\n');
    for skill in skills {
        if let Some(body) = &skill.preloaded {
            section.push_str(&format!("\n## Skill {} (preloaded SKILL.md)\n\n{}\n", skill.name, body.trim()));
        }
    }
    Some(section)
}

/// A description on one line, so a list item stays one item.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The system prompt: the instructions, then the skills section.
pub(crate) fn system_prompt(instructions: Option<&str>, skills: Option<&str>) -> Option<String> {
    match (instructions, skills) {
        (Some(instructions), Some(skills)) => Some(format!("{instructions}\n\n{skills}")),
        (Some(text), None) | (None, Some(text)) => Some(text.to_owned()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &str, description: &str, preloaded: Option<&str>) -> SkillNote {
        SkillNote {
            name: name.to_owned(),
            description: description.to_owned(),
            path: format!("/workspace/skills/{name}/SKILL.md"),
            preloaded: preloaded.map(str::to_owned),
        }
    }

    #[test]
    fn the_section_lists_names_descriptions_and_paths_and_only_preloaded_bodies() {
        assert_eq!(skills_section(&[]), None);
        let section = skills_section(&[
            note("csv", "Sums\n  columns of CSV files.", None),
            note("pdf", "Reads PDFs.", Some("\nRun extract.py.\n")),
        ])
        .unwrap();
        let cases = [
            ("- csv: Sums columns of CSV files. (SKILL.md: /workspace/skills/csv/SKILL.md)", true),
            ("- pdf: Reads PDFs. (SKILL.md: /workspace/skills/pdf/SKILL.md)", true),
            ("## Skill pdf (preloaded SKILL.md)\n\nRun extract.py.\n", true),
            ("## Skill csv", false),
        ];
        for (text, present) in cases {
            assert_eq!(section.contains(text), present, "{text:?} in {section}");
        }
        assert!(section.find("- csv").unwrap() < section.find("- pdf").unwrap(), "the agent's order is kept");
    }

    #[test]
    fn the_system_prompt_puts_the_skills_after_the_instructions() {
        let cases = [
            (Some("Be brief."), Some("# Skills"), Some("Be brief.\n\n# Skills")),
            (Some("Be brief."), None, Some("Be brief.")),
            (None, Some("# Skills"), Some("# Skills")),
            (None, None, None),
        ];
        for (instructions, skills, expected) in cases {
            assert_eq!(system_prompt(instructions, skills).as_deref(), expected);
        }
    }
}
