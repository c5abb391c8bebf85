//! Tool selectors of an agent's MCP server: which of its tools the agent gets
//! (`enable_tools` minus `disable_tools`), which are loaded up front (`preload`,
//! `preload_tools`) and which wait for a human's approval (`require_approval_for_tools`).
//!
//! A selector is `@all`, `@read-only` (the tool's `readOnlyHint`), `@write` (not read-only),
//! `@destructive` (`destructiveHint`) or a literal tool name, the server's own. Pure functions
//! over [`Tool`] lists: no I/O.

use teamster_protocol::agent::McpServer;

use crate::{Tool, ToolGate};

/// The most selectors one list may hold.
pub const MAX_SELECTORS: usize = 256;
/// The longest selector, in bytes.
pub const MAX_SELECTOR_BYTES: usize = 128;

/// One selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    /// `@all`: every tool.
    All,
    /// `@read-only`: tools that say they change nothing.
    ReadOnly,
    /// `@write`: tools that are not read-only.
    Write,
    /// `@destructive`: tools that say they may destroy data.
    Destructive,
    /// A tool by the server's own name for it.
    Name(String),
}

/// A selector list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{field}: unknown selector {value:?}; use @all, @read-only, @write, @destructive or a tool name")]
    Unknown { field: &'static str, value: String },
    #[error("{field}: a selector must not be empty")]
    Empty { field: &'static str },
    #[error("{field}: a selector may have at most {MAX_SELECTOR_BYTES} bytes")]
    TooLong { field: &'static str },
    #[error("{field}: at most {MAX_SELECTORS} selectors are allowed")]
    TooMany { field: &'static str },
}

impl Selector {
    /// Reads one selector; `field` names the list in errors.
    pub fn parse(field: &'static str, text: &str) -> Result<Selector, SelectorError> {
        if text.is_empty() {
            return Err(SelectorError::Empty { field });
        }
        if text.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError::TooLong { field });
        }
        Ok(match text {
            "@all" => Selector::All,
            "@read-only" => Selector::ReadOnly,
            "@write" => Selector::Write,
            "@destructive" => Selector::Destructive,
            other if other.starts_with('@') => {
                return Err(SelectorError::Unknown { field, value: other.to_owned() });
            }
            name => Selector::Name(name.to_owned()),
        })
    }

    /// Whether the selector picks the tool; names compare with `tool.name`.
    pub fn matches(&self, tool: &Tool) -> bool {
        match self {
            Selector::All => true,
            Selector::ReadOnly => tool.annotations.read_only,
            Selector::Write => !tool.annotations.read_only,
            Selector::Destructive => tool.annotations.destructive,
            Selector::Name(name) => *name == tool.name,
        }
    }
}

/// Every selector list of one server, with the spec's defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selectors {
    /// `enable_tools`; default `@all`.
    pub enable: Vec<Selector>,
    /// `disable_tools`, subtracted from the enabled set; default none.
    pub disable: Vec<Selector>,
    /// Whether every enabled tool is loaded up front (`preload`, default false; false as soon
    /// as `preload_tools` is non-empty).
    pub preload_all: bool,
    /// `preload_tools`: loaded up front while the rest stay deferred; default none.
    pub preload: Vec<Selector>,
    /// `require_approval_for_tools`; default `@write`, `@destructive`.
    pub require_approval: Vec<Selector>,
}

impl Default for Selectors {
    fn default() -> Selectors {
        Selectors {
            enable: vec![Selector::All],
            disable: Vec::new(),
            preload_all: false,
            preload: Vec::new(),
            require_approval: vec![Selector::Write, Selector::Destructive],
        }
    }
}

/// A tool the agent gets from a server.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectedTool {
    /// The tool, its gate set to [`ToolGate::Approval`] when a human must approve its calls.
    pub tool: Tool,
    /// Whether its definition is sent from the start (otherwise the model loads it).
    pub preload: bool,
}

/// What the selectors pick from a server's tools.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// The enabled tools, in the server's order.
    pub tools: Vec<SelectedTool>,
    /// Literal names in any list that match none of the server's tools (its list may have
    /// changed); they are ignored.
    pub unknown_names: Vec<String>,
}

impl Selectors {
    /// The selectors of an agent's MCP server entry. Absent lists take the spec's defaults.
    pub fn from_server(server: &McpServer) -> Result<Selectors, SelectorError> {
        let defaults = Selectors::default();
        let list = |field, given: &Option<Vec<String>>, default: Vec<Selector>| match given {
            None => Ok(default),
            Some(given) => parse_list(field, given),
        };
        let preload = list("preload_tools", &server.preload_tools, defaults.preload)?;
        Ok(Selectors {
            enable: list("enable_tools", &server.enable_tools, defaults.enable)?,
            disable: list("disable_tools", &server.disable_tools, defaults.disable)?,
            preload_all: server.preload.unwrap_or(false) && preload.is_empty(),
            preload,
            require_approval: list(
                "require_approval_for_tools",
                &server.require_approval_for_tools,
                defaults.require_approval,
            )?,
        })
    }

    /// Picks the enabled tools of a server, marks those loaded up front and gates those that
    /// need approval. A tool whose gate is already set keeps it.
    pub fn apply(&self, tools: Vec<Tool>) -> Selection {
        let mut unknown_names = Vec::new();
        for list in [&self.enable, &self.disable, &self.preload, &self.require_approval] {
            for selector in list {
                if let Selector::Name(name) = selector
                    && !tools.iter().any(|tool| tool.name == *name)
                    && !unknown_names.contains(name)
                {
                    unknown_names.push(name.clone());
                }
            }
        }
        let any = |list: &[Selector], tool: &Tool| list.iter().any(|selector| selector.matches(tool));
        let tools = tools
            .into_iter()
            .filter(|tool| any(&self.enable, tool) && !any(&self.disable, tool))
            .map(|mut tool| {
                if tool.gate == ToolGate::None && any(&self.require_approval, &tool) {
                    tool.gate = ToolGate::Approval;
                }
                let preload = self.preload_all || any(&self.preload, &tool);
                SelectedTool { tool, preload }
            })
            .collect();
        Selection { tools, unknown_names }
    }
}

fn parse_list(field: &'static str, given: &[String]) -> Result<Vec<Selector>, SelectorError> {
    if given.len() > MAX_SELECTORS {
        return Err(SelectorError::TooMany { field });
    }
    given.iter().map(|text| Selector::parse(field, text)).collect()
}

#[cfg(test)]
mod tests {
    use teamster_protocol::ToolInfo;
    use teamster_protocol::agent::McpServerSource;

    use super::*;
    use crate::ToolAnnotations;

    fn tool(name: &str, read_only: bool, destructive: bool) -> Tool {
        Tool {
            name: name.to_owned(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            info: ToolInfo::Mcp { server_id: "id".into(), server_name: "srv".into(), name: name.into() },
            annotations: ToolAnnotations { read_only, destructive, idempotent: false },
            gate: ToolGate::None,
        }
    }

    /// The test server's shape: two read-only tools, a write, a destructive write.
    fn server_tools() -> Vec<Tool> {
        vec![tool("echo", true, false), tool("add", true, false), tool("write_note", false, false), tool("delete", false, true)]
    }

    fn server(fields: serde_json::Value) -> McpServer {
        let mut value = serde_json::json!({"type": "truefoundry-mcp-registry", "name": "srv"});
        value.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    /// Renders a selection as `name[+preload][!approval]` entries.
    fn render(selection: &Selection) -> Vec<String> {
        selection
            .tools
            .iter()
            .map(|selected| {
                let mut text = selected.tool.name.clone();
                if selected.preload {
                    text.push_str("+preload");
                }
                if selected.tool.gate == ToolGate::Approval {
                    text.push_str("!approval");
                }
                text
            })
            .collect()
    }

    #[test]
    fn selectors_pick_preload_and_gate() {
        let cases: &[(&str, serde_json::Value, &[&str], &[&str])] = &[
            ("defaults", serde_json::json!({}), &["echo", "add", "write_note!approval", "delete!approval"], &[]),
            (
                "preload everything, no approvals",
                serde_json::json!({"preload": true, "require_approval_for_tools": []}),
                &["echo+preload", "add+preload", "write_note+preload", "delete+preload"],
                &[],
            ),
            (
                "read-only only",
                serde_json::json!({"enable_tools": ["@read-only"], "preload": true}),
                &["echo+preload", "add+preload"],
                &[],
            ),
            (
                "disable subtracts",
                serde_json::json!({"enable_tools": ["@all"], "disable_tools": ["@destructive", "add"], "require_approval_for_tools": []}),
                &["echo", "write_note"],
                &[],
            ),
            (
                "write tools and a name",
                serde_json::json!({"enable_tools": ["@write", "echo"], "require_approval_for_tools": ["@destructive"]}),
                &["echo", "write_note", "delete!approval"],
                &[],
            ),
            (
                "preload_tools implies deferred for the rest",
                serde_json::json!({"preload": true, "preload_tools": ["echo", "@destructive"], "require_approval_for_tools": ["@all"]}),
                &["echo+preload!approval", "add!approval", "write_note!approval", "delete+preload!approval"],
                &[],
            ),
            (
                "unknown names are ignored and reported",
                serde_json::json!({"enable_tools": ["echo", "gone"], "disable_tools": ["also-gone"], "require_approval_for_tools": ["gone"]}),
                &["echo"],
                &["gone", "also-gone"],
            ),
            ("nothing enabled", serde_json::json!({"enable_tools": []}), &[], &[]),
        ];
        for (what, fields, expected, unknown) in cases {
            let selectors = Selectors::from_server(&server(fields.clone())).unwrap();
            let selection = selectors.apply(server_tools());
            assert_eq!(render(&selection), *expected, "{what}");
            assert_eq!(selection.unknown_names, *unknown, "{what}");
        }
    }

    #[test]
    fn a_client_side_gate_is_kept() {
        let mut client_side = tool("ask", false, false);
        client_side.gate = ToolGate::ClientSide;
        let selection = Selectors::default().apply(vec![client_side]);
        assert_eq!(selection.tools[0].tool.gate, ToolGate::ClientSide);
    }

    #[test]
    fn bad_selectors_are_refused() {
        let cases: &[(serde_json::Value, SelectorError)] = &[
            (
                serde_json::json!({"enable_tools": ["@readonly"]}),
                SelectorError::Unknown { field: "enable_tools", value: "@readonly".into() },
            ),
            (serde_json::json!({"disable_tools": [""]}), SelectorError::Empty { field: "disable_tools" }),
            (
                serde_json::json!({"preload_tools": ["x".repeat(MAX_SELECTOR_BYTES + 1)]}),
                SelectorError::TooLong { field: "preload_tools" },
            ),
            (
                serde_json::json!({"require_approval_for_tools": vec!["a"; MAX_SELECTORS + 1]}),
                SelectorError::TooMany { field: "require_approval_for_tools" },
            ),
        ];
        for (fields, expected) in cases {
            assert_eq!(Selectors::from_server(&server(fields.clone())), Err(expected.clone()), "{fields}");
        }
        assert!(matches!(server(serde_json::json!({})).source, McpServerSource::Registry { .. }));
    }
}
