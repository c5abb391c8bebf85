//! Permissions: every tool has a category, and a session's policy and grants decide, by tool
//! name first and then by category, whether a call runs at once, waits for the user's approval
//! or is refused. What neither names keeps the gate the agent's spec gave the tool
//! (`require_approval_for_tools`, and the defaults for write and destructive MCP tools).

use std::collections::BTreeMap;

use teamster_protocol::control::{Grant, Permission, SessionControl, ToolCategory};
use teamster_protocol::{AgentSpec, ToolInfo};
use teamster_tools::Tool;

/// The built-in tools that only read (the task list's reader among them).
const READING_TOOLS: [&str; 8] = ["read_tool_result", "search_tools", "load_tools", "task_check", "read_file", "list_files", "glob", "grep"];
/// The harness's tools that change the workspace's files (`teamster-workspace`'s).
const EDITING_TOOLS: [&str; 2] = ["write_file", "edit_file"];

/// The category the spec gives the tool (`config.tool_categories`), else what the harness
/// knows: MCP tools that declare they only read are `read` and the others `mcp`; the sandbox's
/// `exec` is `execute`; the built-in readers are `read`; the rest is `other`.
pub fn category(spec: &AgentSpec, tool: &Tool) -> ToolCategory {
    category_of(spec, &tool.name, &tool.info, tool.annotations.read_only)
}

/// The category of a tool known by its name, where it comes from and whether it declares it
/// only reads (see [`category`]).
pub fn category_of(spec: &AgentSpec, name: &str, info: &ToolInfo, read_only: bool) -> ToolCategory {
    if let Some(category) = spec.config.as_ref().and_then(|config| config.tool_categories.as_ref()).and_then(|named| named.get(name)) {
        return *category;
    }
    match info {
        ToolInfo::Mcp { .. } if read_only => ToolCategory::Read,
        ToolInfo::Mcp { .. } => ToolCategory::Mcp,
        ToolInfo::System { name } if name == "exec" => ToolCategory::Execute,
        ToolInfo::System { name } if READING_TOOLS.contains(&name.as_str()) => ToolCategory::Read,
        ToolInfo::System { name } if EDITING_TOOLS.contains(&name.as_str()) => ToolCategory::Edit,
        ToolInfo::System { .. } => ToolCategory::Other,
    }
}

/// What the session's policy and grants say of a tool of `category`; `None` when they say
/// nothing (the spec's gate stands). A grant allows; a policy entry for the tool's name comes
/// before one for its category.
pub fn permission(control: &SessionControl, name: &str, category: ToolCategory) -> Option<Permission> {
    decision(control, name, category).map(|(permission, _)| permission)
}

/// Which of the session's rules decides a tool's permission ([`decision`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    /// An "always allow" grant of the tool or of its category.
    Grant,
    /// The policy's entry for the tool's name.
    ToolPolicy,
    /// The policy's entry for the tool's category.
    CategoryPolicy,
}

/// What the session's policy and grants say of a tool of `category`, and which rule said it
/// (see [`permission`]).
pub fn decision(control: &SessionControl, name: &str, category: ToolCategory) -> Option<(Permission, DecidedBy)> {
    if control.grants.iter().any(|grant| grant.tool.as_deref() == Some(name) || grant.category == Some(category)) {
        return Some((Permission::Allow, DecidedBy::Grant));
    }
    if let Some(permission) = control.permissions.tools.get(name) {
        return Some((*permission, DecidedBy::ToolPolicy));
    }
    control.permissions.categories.get(&category).map(|permission| (*permission, DecidedBy::CategoryPolicy))
}

/// The grant an "always allow" of a call of `tool` adds, unless one already covers it.
pub fn grant_for(grants: &[Grant], tool: &str, category: Option<ToolCategory>, id: String, at: String) -> Option<Grant> {
    let covered = grants.iter().any(|grant| match category {
        Some(category) => grant.category == Some(category),
        None => grant.tool.as_deref() == Some(tool),
    });
    (!covered).then(|| Grant {
        id,
        tool: category.is_none().then(|| tool.to_owned()),
        category,
        created_at: at,
    })
}

/// Checks a policy's tool names (at most `max` entries, each name 1-128 bytes).
pub fn check_policy(tools: &BTreeMap<String, Permission>, max: usize) -> Result<(), String> {
    if tools.len() > max {
        return Err(format!("a policy names at most {max} tools"));
    }
    match tools.keys().find(|name| name.is_empty() || name.len() > 128) {
        Some(name) => Err(format!("{:?} is not a tool name", name.chars().take(64).collect::<String>())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use teamster_protocol::control::PermissionPolicy;
    use teamster_tools::{ToolAnnotations, ToolGate};

    use super::*;

    fn tool(name: &str, info: ToolInfo, read_only: bool) -> Tool {
        Tool {
            name: name.to_owned(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            info,
            annotations: ToolAnnotations { read_only, ..ToolAnnotations::default() },
            gate: ToolGate::None,
        }
    }

    fn mcp(name: &str, read_only: bool) -> Tool {
        tool(name, ToolInfo::Mcp { server_id: "s".into(), server_name: "s".into(), name: name.into() }, read_only)
    }

    #[test]
    fn categories_come_from_annotations_built_in_knowledge_and_the_spec() {
        let spec: AgentSpec = serde_json::from_value(serde_json::json!({
            "model": {"name": "a/b"}, "config": {"tool_categories": {"deploy": "execute"}}
        }))
        .expect("spec");
        let system = |name: &str| tool(name, ToolInfo::System { name: name.into() }, false);
        assert_eq!(category(&spec, &mcp("search", true)), ToolCategory::Read);
        assert_eq!(category(&spec, &mcp("write_note", false)), ToolCategory::Mcp);
        assert_eq!(category(&spec, &mcp("deploy", false)), ToolCategory::Execute);
        assert_eq!(category(&spec, &system("exec")), ToolCategory::Execute);
        assert_eq!(category(&spec, &system("task_check")), ToolCategory::Read);
        assert_eq!(category(&spec, &system("task_write")), ToolCategory::Other);
    }

    #[test]
    fn grants_allow_then_tool_names_then_categories_decide() {
        let mut control = SessionControl {
            permissions: PermissionPolicy {
                categories: [(ToolCategory::Mcp, Permission::Ask), (ToolCategory::Execute, Permission::Deny)].into(),
                tools: [("echo".to_owned(), Permission::Allow)].into(),
            },
            ..SessionControl::default()
        };
        assert_eq!(permission(&control, "echo", ToolCategory::Mcp), Some(Permission::Allow));
        assert_eq!(permission(&control, "write_note", ToolCategory::Mcp), Some(Permission::Ask));
        assert_eq!(permission(&control, "exec", ToolCategory::Execute), Some(Permission::Deny));
        assert_eq!(permission(&control, "search", ToolCategory::Read), None);

        let grant = grant_for(&control.grants, "write_note", None, "g1".into(), "t".into()).expect("a new grant");
        control.grants.push(grant);
        assert_eq!(grant_for(&control.grants, "write_note", None, "g2".into(), "t".into()), None, "already granted");
        assert_eq!(permission(&control, "write_note", ToolCategory::Mcp), Some(Permission::Allow));
        assert_eq!(permission(&control, "other_mcp", ToolCategory::Mcp), Some(Permission::Ask));
        let by_category = grant_for(&control.grants, "exec", Some(ToolCategory::Execute), "g3".into(), "t".into());
        control.grants.extend(by_category);
        assert_eq!(permission(&control, "exec", ToolCategory::Execute), Some(Permission::Allow));
    }
}
