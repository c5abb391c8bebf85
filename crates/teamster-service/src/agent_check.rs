//! "Why this toolset": the check of an agent manifest before it is saved or run (`POST
//! /api/v1/agents/check`, `teamster agents apply --dry-run`). It validates the manifest as
//! saving would, resolves every model it names, connects to every MCP server it names, and
//! lists the tools a new session's model would be offered — built-ins, the sandbox's, the task
//! and plan tools, the engine's and each server's selected tools, named as a turn names them —
//! with whether each tool's calls wait for approval and why, and each tool it could have had
//! but does not, with the key that decides it. Nothing is stored, and a problem is part of the
//! report, not an error.

use std::collections::HashSet;

use teamster_control::{DecidedBy, SUBMIT_PLAN, STATE_GET, STATE_UPDATE, SubmitPlan, TASK_TOOLS, TaskBoard};
use teamster_engine::{ASK_USER_QUESTION, LOAD_TOOLS, READ_TOOL_RESULT, RUN_SUB_AGENT, SEARCH_TOOLS};
use teamster_protocol::agent::{AgentSpec, McpServer, is_valid_resource_name};
use teamster_protocol::agent_check::{AbsentTool, AgentCheckReport, CheckProblem, McpServerCheck, ModelCheck, ToolCheck};
use teamster_protocol::ToolInfo;
use teamster_protocol::control::{Permission, SessionControl};
use teamster_sandbox::EXEC_TOOL;
use teamster_tools::selector::{Selector, Selectors};
use teamster_tools::{Tool, ToolGate, ToolSource};

use crate::Caller;
use crate::catalog::Catalog;
use crate::error::ServiceError;
use teamster_mcp_host::McpHost;

/// A server's tool the agent gets: the tool, whether it is preloaded, and why its calls ask for
/// approval or run at once.
type Chosen = (Tool, bool, String);

/// The check of one manifest, against the catalog's models and the MCP host's servers.
pub(crate) struct AgentCheck<'a> {
    pub(crate) catalog: &'a Catalog,
    pub(crate) mcp: &'a McpHost,
}

impl AgentCheck<'_> {
    /// Checks the manifest of an agent named `name` for `caller` (see the module comment).
    /// `problems` are those already found in the request (unknown keys); `spec` is absent
    /// when the manifest could not be read at all.
    pub(crate) async fn run(&self, caller: &Caller, name: Option<&str>, spec: Option<&AgentSpec>, problems: Vec<CheckProblem>) -> AgentCheckReport {
        let mut report = AgentCheckReport { problems, ..AgentCheckReport::default() };
        if let Some(name) = name
            && !is_valid_resource_name(name)
        {
            report.problems.push(CheckProblem {
                param: Some("name".to_owned()),
                message: format!("agent name {name:?} must be 2-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter and ending with a letter or digit"),
            });
        }
        if let Some(spec) = spec {
            if let Err(error) = self.catalog.check_saved_spec(spec) {
                report.problems.push(problem(error));
            }
            report.models = self.check_models(spec);
            self.check_tools(caller, spec, &SessionControl::default(), &mut report).await;
        }
        report.ok = report.problems.is_empty();
        report
    }

    /// Every model the spec names, resolved against the providers in force.
    fn check_models(&self, spec: &AgentSpec) -> Vec<ModelCheck> {
        let mut named = vec![("model.name".to_owned(), spec.model.name.clone())];
        for (index, mode) in spec.modes.iter().flatten().enumerate() {
            named.extend(mode.model.clone().map(|model| (format!("modes[{index}].model"), model)));
        }
        for (index, declared) in spec.sub_agents.iter().flatten().enumerate() {
            named.extend(declared.model.clone().map(|model| (format!("sub_agents[{index}].model"), model)));
        }
        let models = self.catalog.models();
        named
            .into_iter()
            .map(|(param, name)| match models.resolve(&name) {
                Ok(resolved) => ModelCheck { param, name, available: true, model_id: Some(resolved.model_id), error: None },
                Err(error) => ModelCheck { param, name, available: false, model_id: None, error: Some(error.to_string()) },
            })
            .collect()
    }

    /// The tools a session with `control` (its mode, policy and grants) offers its model now,
    /// and whether each runs at once, asks or is refused (`GET /api/v1/sessions/{id}/tools`).
    pub(crate) async fn session_tools(&self, caller: &Caller, spec: &AgentSpec, control: &SessionControl) -> Vec<ToolCheck> {
        let mut report = AgentCheckReport::default();
        self.check_tools(caller, spec, control, &mut report).await;
        report.tools
    }

    /// The servers connected, and the tools of a session with `control` (a new session's:
    /// its starting mode).
    async fn check_tools(&self, caller: &Caller, spec: &AgentSpec, control: &SessionControl, report: &mut AgentCheckReport) {
        let mode = teamster_control::mode_in_force(spec, control.mode.as_deref());
        report.mode = mode.map(|mode| mode.id.clone());
        let running = teamster_control::agent_in_mode(spec, control);
        let config = spec.config.as_ref();
        let mut tools: Vec<(Tool, &'static str, String, bool)> = Vec::new();
        let mut absent = Vec::new();
        let mut offer = |tool: Tool, source: &'static str, reason: &str| {
            let reason = reason.to_owned();
            tools.push((tool, source, reason, true));
        };

        for tool in listed(&teamster_tools::builtin::Builtins).await {
            offer(tool, "built-in", "built-in tools run at once");
        }
        match config.and_then(|config| config.sandbox.as_ref()).filter(|sandbox| sandbox.enabled) {
            Some(sandbox) => {
                let chosen = sandbox.tools.as_ref();
                let shown = teamster_workspace::shown_names(chosen);
                for tool in teamster_workspace::as_chosen(teamster_workspace::sandbox_tool_definitions(), chosen) {
                    let reason = match matches!(&tool.info, ToolInfo::System { name } if name == EXEC_TOOL) {
                        true => "commands run at once, inside the session's sandbox (no network unless config.sandbox.network)",
                        false => "file tools run at once, on the session's workspace",
                    };
                    offer(tool, "sandbox", reason);
                }
                let left_out = teamster_workspace::sandbox_tool_names().filter(|name| !shown.contains_key(name));
                absent.extend(left_out.map(|name| gone(name, "sandbox", "config.sandbox.tools leaves it out")));
            }
            None => absent.extend(
                teamster_workspace::sandbox_tool_names().map(|name| gone(name, "sandbox", "config.sandbox.enabled is not true: the agent has no sandbox")),
            ),
        }
        if config.and_then(|config| config.tasks.as_ref()).is_some_and(|tasks| tasks.enabled) {
            for tool in listed(&TaskBoard::from_events(&[])).await {
                offer(tool, "tasks", "the task list is the session's own: its tools run at once");
            }
        } else {
            absent.extend(TASK_TOOLS.iter().map(|name| gone(name, "tasks", "config.tasks.enabled is not true")));
        }
        match mode.and_then(|mode| mode.transitions_to.as_deref()) {
            Some(target) => {
                for tool in listed(&SubmitPlan::leading_to(target)).await {
                    offer(tool, "plan", &format!("a submitted plan waits for the user's approval, which switches the session to the {target:?} mode"));
                }
            }
            None if mode.is_some() => {
                absent.push(gone(SUBMIT_PLAN, "plan", "the starting mode has no transitions_to"));
            }
            None => {}
        }
        let state_tool = config.and_then(|config| config.state_tool.as_ref()).is_some_and(|tool| tool.enabled);
        let state_names = [STATE_GET, STATE_UPDATE];
        if !state_tool {
            absent.extend(state_names.iter().map(|name| gone(name, "state", "config.state_tool.enabled is not true")));
        }
        let asks = config.and_then(|config| config.ask_user_questions.as_ref()).is_none_or(|toggle| toggle.enabled);
        let dynamic = config.and_then(|config| config.dynamic_sub_agents.as_ref()).is_none_or(|toggle| toggle.enabled);
        let declared = spec.sub_agents.as_ref().is_some_and(|declared| !declared.is_empty());

        // The MCP servers: every one the manifest names is connected; those of the starting
        // mode give the session's tools.
        let mut named: Vec<(String, &McpServer)> = Vec::new();
        named.extend(spec.mcp_servers.iter().flatten().enumerate().map(|(index, server)| (format!("mcp_servers[{index}]"), server)));
        for (index, mode) in spec.modes.iter().flatten().enumerate() {
            named.extend(
                mode.additional_tools.iter().flatten().enumerate().map(|(inner, server)| (format!("modes[{index}].additional_tools[{inner}]"), server)),
            );
        }
        let probed = futures_util::future::join_all(named.iter().map(|(_, server)| self.mcp.probe(caller, server))).await;
        let in_session: Vec<&McpServer> = running.mcp_servers.iter().flatten().collect();
        let mut selected: Vec<(&McpServer, Vec<Chosen>)> = Vec::new();
        for ((param, server), listed) in named.iter().zip(probed) {
            let name = server.source.name().to_owned();
            let tools = match listed {
                Ok(tools) => {
                    report.mcp_servers.push(McpServerCheck { param: param.clone(), name: name.clone(), connected: true, listed_tools: tools.len(), error: None });
                    tools
                }
                Err(error) => {
                    report.warnings.push(CheckProblem {
                        param: Some(param.clone()),
                        message: format!("MCP server {name:?} cannot be used now (a turn goes on without its tools): {error}"),
                    });
                    report.mcp_servers.push(McpServerCheck { param: param.clone(), name, connected: false, listed_tools: 0, error: Some(error) });
                    continue;
                }
            };
            if !in_session.iter().any(|running| std::ptr::eq(*running, *server) || *running == *server) {
                let mode_id = param.strip_prefix("modes[").and_then(|rest| rest.split(']').next()).and_then(|index| index.parse::<usize>().ok());
                let owner = mode_id.and_then(|index| spec.modes.as_ref()?.get(index)).map_or("another", |mode| mode.id.as_str());
                for tool in tools {
                    absent.push(AbsentTool {
                        name: tool.name,
                        source: format!("mcp:{}", server.source.name()),
                        reason: format!("only the {owner:?} mode adds this server ({param}); a new session starts in another mode"),
                    });
                }
                continue;
            }
            let Ok(selectors) = Selectors::from_server(server) else { continue };
            let selection = selectors.apply(tools.clone());
            for unknown in &selection.unknown_names {
                report.warnings.push(CheckProblem {
                    param: Some(param.clone()),
                    message: format!("a selector names {unknown:?}, which MCP server {:?} does not have (ignored)", server.source.name()),
                });
            }
            for tool in &tools {
                if !selection.tools.iter().any(|chosen| chosen.tool.name == tool.name) {
                    absent.push(AbsentTool { name: tool.name.clone(), source: format!("mcp:{}", server.source.name()), reason: unselected(&selectors, tool, param) });
                }
            }
            let chosen = selection
                .tools
                .into_iter()
                .map(|chosen| {
                    let reason = approval_reason(&selectors, &chosen.tool, server, param);
                    (chosen.tool, chosen.preload, reason)
                })
                .collect();
            selected.push((server, chosen));
        }

        // The servers' tools are named as a turn names them.
        let mut reserved: HashSet<String> = tools.iter().map(|(tool, ..)| tool.name.clone()).collect();
        reserved.extend([READ_TOOL_RESULT, ASK_USER_QUESTION, SEARCH_TOOLS, LOAD_TOOLS].map(str::to_owned));
        let listed_names: Vec<(&str, Vec<&str>)> =
            selected.iter().map(|(server, chosen)| (server.source.name(), chosen.iter().map(|(tool, ..)| tool.name.as_str()).collect())).collect();
        let names = teamster_mcp_host::tool_names(&listed_names, &reserved);
        let mut server_tools = Vec::new();
        for ((server, chosen), names) in selected.iter().zip(names) {
            for ((tool, preload, reason), name) in chosen.iter().zip(names) {
                let mut tool = tool.clone();
                tool.name = name;
                server_tools.push((tool, format!("mcp:{}", server.source.name()), reason.clone(), *preload));
            }
        }
        let deferred = server_tools.iter().any(|(.., preload)| !preload);

        let mut checks: Vec<ToolCheck> = tools
            .into_iter()
            .map(|(tool, source, reason, preloaded)| check(spec, &tool, source.to_owned(), reason, preloaded))
            .chain(server_tools.into_iter().map(|(tool, source, reason, preloaded)| check(spec, &tool, source, reason, preloaded)))
            .collect();
        if state_tool {
            for name in state_names {
                checks.push(engine_tool(spec, name, "state", "the session state is the session's own: its tools run at once"));
            }
        }
        if asks {
            checks.push(engine_tool(spec, ASK_USER_QUESTION, "engine", "a question waits for the user's answer; it is not an approval"));
        } else {
            absent.push(gone(ASK_USER_QUESTION, "engine", "config.ask_user_questions.enabled is false"));
        }
        if dynamic || declared {
            checks.push(engine_tool(spec, RUN_SUB_AGENT, "engine", "a sub-agent runs at once; its own tool calls ask for approval as its tools say"));
        } else {
            absent.push(gone(RUN_SUB_AGENT, "engine", "config.dynamic_sub_agents.enabled is false and no sub_agents are declared"));
        }
        if deferred {
            for name in [SEARCH_TOOLS, LOAD_TOOLS] {
                checks.push(engine_tool(spec, name, "engine", "offered because some MCP tools are deferred (not preloaded); they run at once"));
            }
        }
        for tool in &mut checks {
            apply_session_rules(control, tool);
        }

        // The starting mode may offer only some tools.
        if let Some(mode) = mode
            && let Some(only) = &mode.tools
        {
            let (kept, dropped): (Vec<ToolCheck>, Vec<ToolCheck>) =
                checks.into_iter().partition(|tool| teamster_control::offers(spec, control, &tool.name));
            checks = kept;
            absent.extend(dropped.into_iter().map(|tool| AbsentTool {
                name: tool.name,
                source: tool.source,
                reason: format!("the {:?} mode offers only its tools list: {}", mode.id, only.join(", ")),
            }));
        }
        report.tools = checks;
        report.absent_tools = absent;
    }
}

/// A tool source's tools (none when it cannot list them).
async fn listed(source: &dyn ToolSource) -> Vec<Tool> {
    source.list().await.unwrap_or_default()
}

fn gone(name: &str, source: &str, reason: &str) -> AbsentTool {
    AbsentTool { name: name.to_owned(), source: source.to_owned(), reason: reason.to_owned() }
}

fn engine_tool(spec: &AgentSpec, name: &str, source: &str, reason: &str) -> ToolCheck {
    let category = teamster_control::category_of(spec, name, &ToolInfo::System { name: name.to_owned() }, false);
    ToolCheck {
        name: name.to_owned(),
        source: source.to_owned(),
        category,
        requires_approval: false,
        permission: Permission::Allow,
        approval_reason: reason.to_owned(),
        preloaded: true,
    }
}

fn check(spec: &AgentSpec, tool: &Tool, source: String, reason: String, preloaded: bool) -> ToolCheck {
    let requires_approval = tool.gate == ToolGate::Approval;
    ToolCheck {
        name: tool.name.clone(),
        source,
        category: teamster_control::category(spec, tool),
        requires_approval,
        permission: if requires_approval { Permission::Ask } else { Permission::Allow },
        approval_reason: reason,
        preloaded,
    }
}

/// What the session's grants and policy make of a tool the agent's rules gate: a grant allows,
/// then a policy entry for its name, then one for its category.
fn apply_session_rules(control: &SessionControl, tool: &mut ToolCheck) {
    let Some((permission, decided_by)) = teamster_control::decision(control, &tool.name, tool.category) else { return };
    let (category, said) = (wire_name(tool.category), wire_name(permission));
    tool.approval_reason = match decided_by {
        DecidedBy::Grant => format!("the session's \"always allow\" grant of the tool or of its category ({category}) allows it"),
        DecidedBy::ToolPolicy => format!("the session's permissions say {said} for this tool"),
        DecidedBy::CategoryPolicy => format!("the session's permissions say {said} for the {category} category"),
    };
    tool.permission = permission;
    tool.requires_approval = permission == Permission::Ask;
}

/// A value as the wire spells it (`"ask"`, `"execute"`).
fn wire_name(value: impl serde::Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|value| value.as_str().map(str::to_owned)).unwrap_or_default()
}

/// A selector as the manifest spells it.
fn spelled(selector: &Selector) -> String {
    match selector {
        Selector::All => "@all".to_owned(),
        Selector::ReadOnly => "@read-only".to_owned(),
        Selector::Write => "@write".to_owned(),
        Selector::Destructive => "@destructive".to_owned(),
        Selector::Name(name) => name.clone(),
    }
}

/// What a tool says of itself, for the reasons.
fn hints(tool: &Tool) -> &'static str {
    match (tool.annotations.read_only, tool.annotations.destructive) {
        (true, _) => "the server marks it read-only",
        (false, true) => "the server marks it destructive",
        (false, false) => "the server does not mark it read-only",
    }
}

/// Why a server's tool is not selected.
fn unselected(selectors: &Selectors, tool: &Tool, param: &str) -> String {
    match selectors.disable.iter().find(|selector| selector.matches(tool)) {
        Some(selector) => format!("{param}.disable_tools has {:?}, which picks it ({})", spelled(selector), hints(tool)),
        None => format!(
            "{param}.enable_tools ({}) does not pick it ({})",
            selectors.enable.iter().map(spelled).collect::<Vec<_>>().join(", "),
            hints(tool)
        ),
    }
}

/// Why a selected server tool's calls wait for approval, or do not.
fn approval_reason(selectors: &Selectors, tool: &Tool, server: &McpServer, param: &str) -> String {
    let list = if server.require_approval_for_tools.is_some() {
        format!("{param}.require_approval_for_tools")
    } else {
        format!("{param}.require_approval_for_tools (absent: @write, @destructive)")
    };
    match selectors.require_approval.iter().find(|selector| selector.matches(tool)) {
        Some(selector) => format!("{list} has {:?}, which picks it ({})", spelled(selector), hints(tool)),
        None => format!("nothing in {list} picks it ({}), so its calls run at once", hints(tool)),
    }
}

/// A validation error as a problem of the report.
fn problem(error: ServiceError) -> CheckProblem {
    match error {
        ServiceError::Invalid { message, param } => CheckProblem { param: param.map(|param| format!("manifest.{param}")), message },
        other => CheckProblem { param: None, message: other.to_string() },
    }
}
