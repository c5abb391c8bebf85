//! Plans: in a mode with `transitions_to`, the agent submits a plan with `submit_plan`, which
//! waits for the user like an approval (so every dialect's approval flow answers it). The
//! answer never runs the tool: the service turns it into the tool's result ([`approved`] or
//! [`rejected`]), and an approval switches the session to the mode the plan leads to before
//! the resumed turn is planned, so the agent carries the plan out in that mode. A session's
//! plans are a fold of its turns' event logs ([`plans`]), like its task list.

use async_trait::async_trait;
use serde::Deserialize;
use teamster_protocol::control::{Plan, PlanStatus};
use teamster_protocol::input::Approval;
use teamster_protocol::{Event, ToolInfo, TurnInput, TurnState};
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

/// The name of the plan tool.
pub const SUBMIT_PLAN: &str = "submit_plan";

/// The longest title, and the longest plan, in characters (the schema says so to the model).
const MAX_TITLE_CHARS: usize = 200;
const MAX_PLAN_CHARS: usize = 20_000;

/// The `submit_plan` tool of a turn in a mode that transitions to `target`.
#[derive(Debug)]
pub struct SubmitPlan {
    target: String,
}

impl SubmitPlan {
    /// The tool of a mode whose approved plans switch the session to the mode `target`.
    pub fn leading_to(target: impl Into<String>) -> SubmitPlan {
        SubmitPlan { target: target.into() }
    }
}

#[async_trait]
impl ToolSource for SubmitPlan {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![Tool {
            name: SUBMIT_PLAN.to_owned(),
            description: format!(
                "Submits your plan to the user for approval before you act on it. Once the user approves, \
                 the session switches to the {} mode and you carry the plan out; if the user rejects it, you \
                 get their feedback: revise the plan and submit it again.",
                self.target
            ),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": MAX_TITLE_CHARS, "description": "A short title."},
                    "plan": {"type": "string", "maxLength": MAX_PLAN_CHARS, "description": "The plan, as markdown."},
                },
                "required": ["title", "plan"],
                "additionalProperties": false,
            }),
            info: ToolInfo::System { name: SUBMIT_PLAN.to_owned() },
            annotations: ToolAnnotations { read_only: true, destructive: false, idempotent: false },
            gate: ToolGate::Approval,
        }])
    }

    /// Never reached through an answered approval (the service settles those); a direct call
    /// is an error for the model.
    async fn call(&self, _name: &str, _arguments: &str) -> ToolOutput {
        ToolOutput::error("submit_plan waits for the user's decision; it cannot run on its own")
    }
}

/// The tool result of an approved plan.
pub fn approved(target: &str) -> String {
    format!("The user approved the plan. The session is now in the {target} mode: carry the plan out.")
}

/// The tool result of a rejected plan.
pub fn rejected(feedback: Option<&str>) -> String {
    match feedback.map(str::trim).filter(|feedback| !feedback.is_empty()) {
        Some(feedback) => format!(
            "The user rejected the plan. Their feedback: {feedback}\nRevise the plan and submit it again with submit_plan."
        ),
        None => "The user rejected the plan. Revise it and submit it again with submit_plan.".to_owned(),
    }
}

/// Whether `input` approves a `submit_plan` call of `events` (the log of the turn it resumes).
pub fn approves_plan(events: &[Event], input: &[TurnInput]) -> bool {
    input.iter().any(|item| match item {
        TurnInput::ToolApproval { tool_call_id, approval: Approval::Allow { .. }, .. } => events.iter().any(|event| {
            matches!(event, Event::ModelMessage(message)
                if message.tool_calls.iter().flatten().any(|call| call.id == *tool_call_id && call.function.name == SUBMIT_PLAN))
        }),
        _ => false,
    })
}

/// One turn of a session for the plan fold: its id, input and state, the mode it ran in, and
/// its content events.
#[derive(Clone, Copy, Debug)]
pub struct TurnEvents<'a> {
    pub turn_id: &'a str,
    pub input: &'a [TurnInput],
    pub state: &'a TurnState,
    /// The mode the turn ran in, and the one its plans lead to.
    pub mode: &'a str,
    pub transitions_to: &'a str,
    pub events: &'a [Event],
}

#[derive(Deserialize)]
struct PlanArguments {
    #[serde(default)]
    title: String,
    #[serde(default)]
    plan: String,
}

/// A session's plans, oldest first, from its turns oldest first: a `submit_plan` call is
/// pending approval; the next turn's input approves it (then it is executing once the resumed
/// turn settles it, and executed or failed as a turn ends with nothing waiting, or with an
/// error or a cancel) or rejects it (back to draft, with the feedback).
pub fn plans(turns: &[TurnEvents<'_>]) -> Vec<Plan> {
    let mut plans: Vec<Plan> = Vec::new();
    for turn in turns {
        for item in turn.input {
            let TurnInput::ToolApproval { tool_call_id, approval, .. } = item else { continue };
            let Some(plan) = plans.iter_mut().find(|plan| plan.id == *tool_call_id) else { continue };
            if plan.status != PlanStatus::PendingApproval {
                continue;
            }
            match approval {
                Approval::Allow { .. } => plan.status = PlanStatus::Approved,
                Approval::Deny { reason } => {
                    plan.status = PlanStatus::Draft;
                    plan.feedback = reason.clone();
                }
            }
        }
        for event in turn.events {
            match event {
                Event::ModelMessage(message) => {
                    for call in message.tool_calls.iter().flatten().filter(|call| call.function.name == SUBMIT_PLAN) {
                        let arguments = serde_json::from_str::<PlanArguments>(&call.function.arguments)
                            .unwrap_or(PlanArguments { title: String::new(), plan: String::new() });
                        plans.retain(|plan| plan.id != call.id);
                        plans.push(Plan {
                            id: call.id.clone(),
                            title: arguments.title,
                            plan: arguments.plan,
                            status: PlanStatus::PendingApproval,
                            mode: turn.mode.to_owned(),
                            transitions_to: turn.transitions_to.to_owned(),
                            feedback: None,
                            turn_id: turn.turn_id.to_owned(),
                            created_at: message.created_at.clone(),
                        });
                    }
                }
                Event::ToolResponse(response) => {
                    if let Some(plan) = plans.iter_mut().find(|plan| plan.id == response.tool_call_id && plan.status == PlanStatus::Approved) {
                        plan.status = PlanStatus::Executing;
                    }
                }
                _ => {}
            }
        }
        // A plan being carried out is done when a turn ends with nothing waiting.
        let ended = match turn.state {
            TurnState::Done { required_actions, .. } if required_actions.is_empty() => Some(PlanStatus::Executed),
            TurnState::Done { .. } | TurnState::Running => None,
            _ => Some(PlanStatus::Failed),
        };
        if let Some(ended) = ended {
            for plan in plans.iter_mut().filter(|plan| matches!(plan.status, PlanStatus::Approved | PlanStatus::Executing)) {
                plan.status = ended;
            }
        }
    }
    plans
}
