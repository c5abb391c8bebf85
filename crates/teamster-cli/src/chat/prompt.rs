//! What the chat asks the user when a turn waits for a human: approve a gated call (allow, deny
//! with a reason, always allow; a submitted plan is one of these), answer `ask_user_question`
//! (one option, several, or free text), or authorize an MCP server and resume.

use std::collections::BTreeSet;

use serde_json::Value;
use teamster_protocol::control::GrantScope;
use teamster_protocol::event::Event;
use teamster_protocol::input::{Approval, TurnInput};

use super::transcript::Transcript;

/// The tool whose calls the user answers.
const ASK_USER_QUESTION: &str = "ask_user_question";
/// The tool an agent submits its plan with; approving it approves the plan.
const SUBMIT_PLAN: &str = "submit_plan";

/// One option of a question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub label: String,
    pub description: Option<String>,
}

/// A thing waiting for the user.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Approval {
        thread_id: String,
        call_id: String,
        tool: String,
        arguments: String,
        /// Set once the user chose to deny: the input line is the reason.
        denying: bool,
    },
    Question {
        thread_id: String,
        call_id: String,
        /// The tool asking (`ask_user_question`, or another client-side tool).
        tool: String,
        question: String,
        choices: Vec<Choice>,
        multi_select: bool,
        /// The highlighted choice.
        cursor: usize,
        /// The ticked choices (multi-select).
        ticked: BTreeSet<usize>,
    },
    /// MCP servers to authorize in a browser; the turn resumes with an empty input.
    Authorize { links: Vec<(String, String)> },
}

impl Prompt {
    /// The prompts for a turn's required actions, in order.
    pub fn from_pending(transcript: &Transcript) -> Vec<Prompt> {
        let mut prompts = Vec::new();
        for event in &transcript.pending {
            match event {
                Event::ToolApprovalRequired(pending) => {
                    for reference in &pending.tool_calls {
                        let call = transcript.call(&reference.source_event_id, &reference.id);
                        prompts.push(Prompt::Approval {
                            thread_id: pending.thread_id.clone(),
                            call_id: reference.id.clone(),
                            tool: call.map_or_else(|| "a tool".to_owned(), |call| call.function.name.clone()),
                            arguments: call.map(|call| call.function.arguments.clone()).unwrap_or_default(),
                            denying: false,
                        });
                    }
                }
                Event::ToolResponseRequired(pending) => {
                    for reference in &pending.tool_calls {
                        let call = transcript.call(&reference.source_event_id, &reference.id);
                        let tool = call.map_or_else(|| ASK_USER_QUESTION.to_owned(), |call| call.function.name.clone());
                        let arguments: Value = call
                            .and_then(|call| serde_json::from_str(&call.function.arguments).ok())
                            .unwrap_or(Value::Null);
                        prompts.push(question(pending.thread_id.clone(), reference.id.clone(), tool, &arguments));
                    }
                }
                Event::McpAuthRequired(required) => prompts.push(Prompt::Authorize {
                    links: required.mcp_servers.iter().map(|server| (server.name.clone(), server.auth_url.clone())).collect(),
                }),
                _ => {}
            }
        }
        prompts
    }

    /// Whether the input line is typed into this prompt (a denial's reason, a free answer).
    pub fn takes_text(&self) -> bool {
        match self {
            Prompt::Approval { denying, .. } => *denying,
            Prompt::Question { .. } => true,
            Prompt::Authorize { .. } => false,
        }
    }

    /// Whether this approval is of a submitted plan.
    pub fn is_plan(&self) -> bool {
        matches!(self, Prompt::Approval { tool, .. } if tool == SUBMIT_PLAN)
    }

    /// Moves a question's highlight by `step`.
    pub fn move_cursor(&mut self, step: isize) {
        if let Prompt::Question { choices, cursor, .. } = self
            && !choices.is_empty()
        {
            *cursor = (*cursor as isize + step).rem_euclid(choices.len() as isize) as usize;
        }
    }

    /// Ticks or unticks the highlighted choice of a multi-select question.
    pub fn toggle(&mut self) {
        if let Prompt::Question { multi_select: true, cursor, ticked, choices, .. } = self
            && *cursor < choices.len()
            && !ticked.remove(cursor)
        {
            ticked.insert(*cursor);
        }
    }

    /// The answer to a question when Enter is pressed with `typed` in the input line: the typed
    /// text if any, else the ticked choices (multi-select) or the highlighted one. `None` when
    /// there is nothing to answer with yet.
    pub fn answer(&self, typed: &str) -> Option<TurnInput> {
        let Prompt::Question { thread_id, call_id, choices, multi_select, cursor, ticked, .. } = self else {
            return None;
        };
        let content = if !typed.trim().is_empty() {
            typed.trim().to_owned()
        } else if *multi_select {
            let labels: Vec<&str> = ticked.iter().filter_map(|index| choices.get(*index)).map(|choice| choice.label.as_str()).collect();
            if labels.is_empty() {
                return None;
            }
            labels.join(", ")
        } else {
            choices.get(*cursor)?.label.clone()
        };
        Some(TurnInput::ToolResponse { thread_id: thread_id.clone(), tool_call_id: call_id.clone(), content })
    }

    /// The decision on an approval: allow (`always`: from now on, for this tool), or deny with
    /// an optional reason.
    pub fn decide(&self, allow: bool, always: bool, reason: &str) -> Option<TurnInput> {
        let Prompt::Approval { thread_id, call_id, .. } = self else { return None };
        let approval = if allow {
            Approval::Allow { always: always.then_some(GrantScope::Tool) }
        } else {
            Approval::Deny { reason: (!reason.trim().is_empty()).then(|| reason.trim().to_owned()) }
        };
        Some(TurnInput::ToolApproval { thread_id: thread_id.clone(), tool_call_id: call_id.clone(), approval })
    }
}

/// A question from a client-side call's arguments (`question`, `options`, `multi_select`).
fn question(thread_id: String, call_id: String, tool: String, arguments: &Value) -> Prompt {
    let question = match arguments["question"].as_str() {
        Some(question) => question.to_owned(),
        None if tool == ASK_USER_QUESTION => "The agent asks:".to_owned(),
        None => format!("{tool} needs a result from you ({arguments})"),
    };
    let choices = arguments["options"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|option| {
            let label = option["label"].as_str().or_else(|| option.as_str())?;
            Some(Choice { label: label.to_owned(), description: option["description"].as_str().map(str::to_owned) })
        })
        .collect();
    Prompt::Question {
        thread_id,
        call_id,
        tool,
        question,
        choices,
        multi_select: arguments["multi_select"].as_bool().unwrap_or(false),
        cursor: 0,
        ticked: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(arguments: Value) -> Prompt {
        question("main".into(), "c1".into(), ASK_USER_QUESTION.into(), &arguments)
    }

    fn content(input: Option<TurnInput>) -> Option<String> {
        match input {
            Some(TurnInput::ToolResponse { content, .. }) => Some(content),
            _ => None,
        }
    }

    #[test]
    fn questions_are_answered_by_choice_ticks_or_text() {
        let options = serde_json::json!([{"label": "Blue"}, {"label": "Red", "description": "warm"}, "Green"]);
        let mut single = asked(serde_json::json!({"question": "Which?", "options": options}));
        assert_eq!(content(single.answer("")), Some("Blue".into()));
        single.move_cursor(-1);
        assert_eq!(content(single.answer("")), Some("Green".into()));
        assert_eq!(content(single.answer(" teal ")), Some("teal".into()));

        let mut multi = asked(serde_json::json!({"question": "Which?", "options": options, "multi_select": true}));
        assert_eq!(multi.answer(""), None, "nothing ticked yet");
        multi.toggle();
        multi.move_cursor(2);
        multi.toggle();
        assert_eq!(content(multi.answer("")), Some("Blue, Green".into()));
        multi.toggle();
        assert_eq!(content(multi.answer("")), Some("Blue".into()));

        let free = asked(serde_json::json!({"question": "Name?"}));
        assert_eq!(free.answer(""), None);
        assert_eq!(content(free.answer("Ada")), Some("Ada".into()));
    }

    #[test]
    fn approvals_allow_always_or_deny_with_a_reason() {
        let prompt = Prompt::Approval { thread_id: "main".into(), call_id: "c1".into(), tool: "echo".into(), arguments: "{}".into(), denying: false };
        let approval = |input: Option<TurnInput>| match input {
            Some(TurnInput::ToolApproval { approval, .. }) => approval,
            other => panic!("{other:?}"),
        };
        assert_eq!(approval(prompt.decide(true, false, "")), Approval::allow());
        assert_eq!(approval(prompt.decide(true, true, "")), Approval::Allow { always: Some(GrantScope::Tool) });
        assert_eq!(approval(prompt.decide(false, false, " too risky ")), Approval::Deny { reason: Some("too risky".into()) });
        assert_eq!(approval(prompt.decide(false, false, "")), Approval::Deny { reason: None });
    }
}
