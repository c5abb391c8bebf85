//! Calls waiting for a human: what a finished turn left in its `required_actions`, how the
//! next turn's decisions are checked against it, and how they become the engine's
//! [`Resolution`]s.
//!
//! Nothing but the stored turn state and events holds this, so a pause survives restarts and
//! costs no memory. A turn that starts with user messages instead of decisions leaves the
//! waiting calls undecided: they never run, and the model is told they have no result.
//!
//! A turn that paused for MCP authorization (`mcp.auth_required`) waits for no decision: the
//! next turn resumes it with an empty input once the user has authorized the servers (or with a
//! new message).

use std::collections::{BTreeSet, HashMap};

use teamster_protocol::event::ToolCall;
use teamster_protocol::input::{Approval, InputKind, TurnInput};
use teamster_protocol::{Event, TurnState};

use crate::gates::{Decision, Resolution};

/// Why a turn's input does not fit what waits: a message for the client, about its `input`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecisionError(pub String);

/// What a waiting call needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Approval,
    Response,
}

/// One call waiting for a human.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub thread_id: String,
    pub tool_call_id: String,
    /// The `model.message` holding the call.
    pub source_event_id: String,
    pub needs: Needs,
}

/// The calls a turn left waiting: those of its `required_actions` when it ended `done`.
pub fn waiting_calls(state: &TurnState) -> Vec<Waiting> {
    let TurnState::Done { required_actions, .. } = state else {
        return Vec::new();
    };
    let mut waiting = Vec::new();
    for action in required_actions {
        let (pending, needs) = match action {
            Event::ToolApprovalRequired(pending) => (pending, Needs::Approval),
            Event::ToolResponseRequired(pending) => (pending, Needs::Response),
            _ => continue,
        };
        waiting.extend(pending.tool_calls.iter().map(|call| Waiting {
            thread_id: pending.thread_id.clone(),
            tool_call_id: call.id.clone(),
            source_event_id: call.source_event_id.clone(),
            needs,
        }));
    }
    waiting
}

/// Whether a turn ended waiting for the user to authorize MCP servers: `done` with an
/// `mcp.auth_required` in its `required_actions`.
pub fn awaits_authorization(state: &TurnState) -> bool {
    matches!(state, TurnState::Done { required_actions, .. }
        if required_actions.iter().any(|action| matches!(action, Event::McpAuthRequired(_))))
}

/// Names the calls that decisions left out: a decision without a `tool_call_id` is on the one
/// call waiting (an error when several or none wait), and one without a `thread_id` is in the
/// thread its call waits in. Decisions that name their call are left for [`check_input`].
pub fn name_omitted_calls(waiting: &[Waiting], input: &mut [TurnInput]) -> Result<(), DecisionError> {
    for (index, item) in input.iter_mut().enumerate() {
        let (thread_id, tool_call_id) = match item {
            TurnInput::ToolApproval { thread_id, tool_call_id, .. } | TurnInput::ToolResponse { thread_id, tool_call_id, .. } => {
                (thread_id, tool_call_id)
            }
            TurnInput::Message { .. } => continue,
        };
        if tool_call_id.is_empty() {
            let [only] = waiting else {
                let waits = match waiting.len() {
                    0 => "no tool call waits".to_owned(),
                    count => format!("{count} tool calls wait"),
                };
                return Err(DecisionError(format!(
                    "input[{index}] leaves out tool_call_id, which is allowed only when exactly one tool call waits; {waits}"
                )));
            };
            if !thread_id.is_empty() && *thread_id != only.thread_id {
                return Err(DecisionError(format!(
                    "input[{index}]: the waiting tool call {:?} is in thread {:?}, not {thread_id:?}",
                    only.tool_call_id, only.thread_id
                )));
            }
            tool_call_id.clone_from(&only.tool_call_id);
        }
        if thread_id.is_empty() {
            let mut threads = waiting.iter().filter(|call| call.tool_call_id == *tool_call_id).map(|call| &call.thread_id);
            match (threads.next(), threads.next()) {
                (Some(thread), None) => thread_id.clone_from(thread),
                (Some(_), Some(_)) => {
                    return Err(DecisionError(format!(
                        "input[{index}]: tool call {tool_call_id:?} waits in several threads; name its thread_id"
                    )));
                }
                // Not waiting: `check_input` says so.
                (None, _) => {}
            }
        }
    }
    Ok(())
}

/// Checks a turn's input against what the turn it follows left waiting: decisions must name
/// every waiting call exactly once, with the right kind; an empty input cannot leave calls
/// waiting, and is accepted only to resume a turn that paused for MCP authorization
/// (`awaits_authorization`). User messages are always accepted (they leave the calls
/// undecided).
pub fn check_input(waiting: &[Waiting], awaits_authorization: bool, input: &[TurnInput]) -> Result<(), DecisionError> {
    let describe = |calls: &mut dyn Iterator<Item = &Waiting>| {
        calls.map(|call| format!("{:?} (thread {:?})", call.tool_call_id, call.thread_id)).collect::<Vec<_>>().join(", ")
    };
    let Some(first) = input.first() else {
        if waiting.is_empty() && awaits_authorization {
            return Ok(());
        }
        if waiting.is_empty() {
            return Err(DecisionError("input is empty and nothing in this session is waiting to be resumed".to_owned()));
        }
        return Err(DecisionError(
            format!(
                "input is empty, but tool calls are waiting for a decision: {}; send a user.tool_approval or user.tool_response for each, or a new user message",
                describe(&mut waiting.iter())
            ),
        ));
    };
    if first.kind() == InputKind::Messages {
        return Ok(());
    }
    let mut decided = BTreeSet::new();
    for (index, item) in input.iter().enumerate() {
        let (thread_id, tool_call_id, needs) = match item {
            TurnInput::ToolApproval { thread_id, tool_call_id, .. } => (thread_id, tool_call_id, Needs::Approval),
            TurnInput::ToolResponse { thread_id, tool_call_id, .. } => (thread_id, tool_call_id, Needs::Response),
            TurnInput::Message { .. } => continue,
        };
        let found = waiting.iter().find(|call| call.tool_call_id == *tool_call_id && call.thread_id == *thread_id);
        let Some(call) = found else {
            let elsewhere = waiting.iter().find(|call| call.tool_call_id == *tool_call_id);
            let message = match elsewhere {
                Some(call) => format!(
                    "input[{index}]: tool call {tool_call_id:?} is waiting in thread {:?}, not {thread_id:?}",
                    call.thread_id
                ),
                None if waiting.is_empty() => format!(
                    "input[{index}]: tool call {tool_call_id:?} in thread {thread_id:?} is not waiting for a decision; nothing in this session is"
                ),
                None => format!(
                    "input[{index}]: tool call {tool_call_id:?} in thread {thread_id:?} is not waiting for a decision; waiting: {}",
                    describe(&mut waiting.iter())
                ),
            };
            return Err(DecisionError(message));
        };
        if call.needs != needs {
            let (wanted, got) = match call.needs {
                Needs::Approval => ("user.tool_approval", "user.tool_response"),
                Needs::Response => ("user.tool_response", "user.tool_approval"),
            };
            return Err(DecisionError(
                format!("input[{index}]: tool call {tool_call_id:?} needs a {wanted}, not a {got}"),
            ));
        }
        if !decided.insert((thread_id.as_str(), tool_call_id.as_str())) {
            return Err(DecisionError(
                format!("input[{index}]: tool call {tool_call_id:?} is decided twice"),
            ));
        }
    }
    let mut missing = waiting.iter().filter(|call| !decided.contains(&(call.thread_id.as_str(), call.tool_call_id.as_str())));
    let missing = describe(&mut missing);
    if !missing.is_empty() {
        return Err(DecisionError(
            format!("every waiting tool call needs a decision in the same turn; missing: {missing}"),
        ));
    }
    Ok(())
}

/// The engine's resolutions for a turn whose input decides `waiting` calls (already checked
/// with [`check_input`]): each call's name and arguments come from its message in `history`.
/// A call whose message cannot be found is an error the turn reports.
pub fn resolutions(waiting: &[Waiting], input: &[TurnInput], history: &[Event]) -> Result<Vec<Resolution>, String> {
    let mut calls: HashMap<(&str, &str), &ToolCall> = HashMap::new();
    for event in history {
        if let Event::ModelMessage(message) = event {
            for call in message.tool_calls.iter().flatten() {
                calls.insert((message.id.as_str(), call.id.as_str()), call);
            }
        }
    }
    let mut resolutions = Vec::new();
    for item in input {
        let (thread_id, tool_call_id, decision) = match item {
            TurnInput::ToolApproval { thread_id, tool_call_id, approval } => (
                thread_id,
                tool_call_id,
                match approval {
                    Approval::Allow { .. } => Decision::Allow,
                    Approval::Deny { reason } => Decision::Deny { reason: reason.clone() },
                },
            ),
            TurnInput::ToolResponse { thread_id, tool_call_id, content } => {
                (thread_id, tool_call_id, Decision::Respond { content: content.clone() })
            }
            TurnInput::Message { .. } => continue,
        };
        let Some(waiting) = waiting.iter().find(|call| call.tool_call_id == *tool_call_id && call.thread_id == *thread_id) else {
            continue;
        };
        let call = calls
            .get(&(waiting.source_event_id.as_str(), tool_call_id.as_str()))
            .ok_or_else(|| format!("The waiting tool call {tool_call_id:?} is no longer in the session's history."))?;
        resolutions.push(Resolution { thread_id: thread_id.clone(), call: (*call).clone(), decision });
    }
    Ok(resolutions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> Vec<Waiting> {
        ["c1", "c2"]
            .iter()
            .map(|id| Waiting {
                thread_id: "main".into(),
                tool_call_id: (*id).into(),
                source_event_id: "m1".into(),
                needs: Needs::Approval,
            })
            .chain([Waiting {
                thread_id: "main".into(),
                tool_call_id: "q1".into(),
                source_event_id: "m1".into(),
                needs: Needs::Response,
            }])
            .collect()
    }

    fn allow(id: &str) -> TurnInput {
        TurnInput::ToolApproval { thread_id: "main".into(), tool_call_id: id.into(), approval: Approval::allow() }
    }

    fn answer(id: &str) -> TurnInput {
        TurnInput::ToolResponse { thread_id: "main".into(), tool_call_id: id.into(), content: "yes".into() }
    }

    #[test]
    fn decisions_must_match_the_waiting_calls_exactly() {
        let cases: Vec<(&str, Vec<TurnInput>, Option<&str>)> = vec![
            ("all decided", vec![allow("c1"), allow("c2"), answer("q1")], None),
            ("a message moves on", vec![TurnInput::Message { content: teamster_protocol::UserContent::Text("new".into()) }], None),
            ("one missing", vec![allow("c1"), answer("q1")], Some("missing: \"c2\"")),
            ("unknown call", vec![allow("zz")], Some("\"zz\" in thread \"main\" is not waiting")),
            ("wrong thread", vec![TurnInput::ToolApproval { thread_id: "t9".into(), tool_call_id: "c1".into(), approval: Approval::allow() }], Some("waiting in thread \"main\", not \"t9\"")),
            ("wrong kind", vec![answer("c1")], Some("needs a user.tool_approval")),
            ("twice", vec![allow("c1"), allow("c1"), allow("c2"), answer("q1")], Some("decided twice")),
            ("empty", vec![], Some("tool calls are waiting")),
        ];
        for (name, input, problem) in cases {
            let result = check_input(&waiting(), false, &input);
            match problem {
                None => assert!(result.is_ok(), "{name}: {result:?}"),
                Some(problem) => {
                    let message = result.expect_err(name).to_string();
                    assert!(message.contains(problem), "{name}: {message}");
                }
            }
        }
        assert!(check_input(&[], false, &[allow("c1")]).unwrap_err().to_string().contains("nothing in this session is"));
    }

    #[test]
    fn a_decision_may_leave_out_the_one_waiting_call() {
        let one = &waiting()[2..];
        let unnamed = || TurnInput::ToolResponse { thread_id: String::new(), tool_call_id: String::new(), content: "yes".into() };
        let mut input = vec![unnamed()];
        name_omitted_calls(one, &mut input).unwrap();
        assert_eq!(input, [answer("q1")]);
        check_input(one, false, &input).unwrap();
        let several = name_omitted_calls(&waiting(), &mut [unnamed()]).unwrap_err().to_string();
        assert!(several.contains("3 tool calls wait"), "{several}");
        assert!(name_omitted_calls(&[], &mut [unnamed()]).unwrap_err().to_string().contains("no tool call waits"));
        let elsewhere = TurnInput::ToolResponse { thread_id: "t9".into(), tool_call_id: String::new(), content: "yes".into() };
        assert!(name_omitted_calls(one, &mut [elsewhere]).unwrap_err().to_string().contains("not \"t9\""));
        // A named call without its thread gets the thread it waits in.
        let mut input = vec![TurnInput::ToolApproval { thread_id: String::new(), tool_call_id: "c2".into(), approval: Approval::allow() }];
        name_omitted_calls(&waiting(), &mut input).unwrap();
        assert_eq!(input, [allow("c2")]);
    }

    fn done(required_actions: Vec<Event>) -> TurnState {
        TurnState::Done { output: None, required_actions, completed_at: "t".into(), metrics: None }
    }

    fn auth_required() -> Event {
        Event::McpAuthRequired(teamster_protocol::event::McpAuthRequired {
            id: "evt_a".into(),
            created_at: "t".into(),
            thread_id: None,
            mcp_servers: vec![teamster_protocol::event::McpServerAuth {
                id: "mcp:gh".into(),
                name: "gh".into(),
                auth_url: "http://x/api/v1/mcp-servers/gh/authorize?ticket=t".into(),
            }],
        })
    }

    #[test]
    fn an_empty_input_resumes_only_an_authorization_pause() {
        let paused = done(vec![auth_required()]);
        assert!(awaits_authorization(&paused));
        assert!(waiting_calls(&paused).is_empty());
        assert!(check_input(&waiting_calls(&paused), awaits_authorization(&paused), &[]).is_ok());

        for state in [done(Vec::new()), TurnState::Running] {
            assert!(!awaits_authorization(&state));
            let message = check_input(&[], awaits_authorization(&state), &[]).unwrap_err().to_string();
            assert!(message.contains("nothing in this session is waiting"), "{message}");
        }
        // Calls waiting for decisions still need them, whatever else waits.
        let message = check_input(&waiting(), true, &[]).unwrap_err().to_string();
        assert!(message.contains("tool calls are waiting"), "{message}");
        // Decisions after an authorization pause name nothing that waits.
        let message = check_input(&[], true, &[allow("c1")]).unwrap_err().to_string();
        assert!(message.contains("nothing in this session is"), "{message}");
        // A new message is always fine.
        let message = TurnInput::Message { content: teamster_protocol::UserContent::Text("new".into()) };
        assert!(check_input(&[], true, &[message]).is_ok());
    }
}
