//! `{{variable}}` substitution in instructions and seed messages.

use std::collections::BTreeMap;

/// Replaces each `{{name}}` (spaces inside the braces allowed) with its value. Unknown names
/// are left as written, so a typo shows up in the prompt rather than vanishing.
pub fn render(template: &str, variables: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = after[..end].trim();
                match variables.get(name) {
                    Some(value) => out.push_str(value),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_known_variables_only() {
        let vars = BTreeMap::from([("user".to_owned(), "bob".to_owned())]);
        for (template, expected) in [
            ("Be nice to {{user}}", "Be nice to bob"),
            ("{{ user }} and {{user}}", "bob and bob"),
            ("Hi {{stranger}}", "Hi {{stranger}}"),
            ("open {{ never closed", "open {{ never closed"),
            ("", ""),
        ] {
            assert_eq!(render(template, &vars), expected);
        }
    }
}
