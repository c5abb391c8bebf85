//! Resuming a turn whose server stopped while it ran, from what the turn recorded.
//!
//! The server that takes a turn over plans it like any turn, from the stored history, which
//! already holds what the turn recorded before it stopped: its complete model messages and
//! tool results. [`resume_turn`] adjusts that plan so the turn goes on from where it stopped,
//! and never runs a call twice:
//! - A model step cut off mid-stream recorded no message (only its placeholder and deltas are
//!   in the stream), so for the model it never happened: the turn calls the model again.
//! - A tool call with a recorded result is never run again.
//! - A call that may have started but has no result gets an error result saying so
//!   ([`INTERRUPTED_CALL`]), which the model and the client see as its `tool.response`; a call
//!   of a tool declared idempotent runs again instead. The engine makes every message durable
//!   before it starts the message's calls ([`crate::EventSink::checkpoint`]), so a call whose
//!   message is not in the log never started.
//! - A turn whose last message was the agent's answer, or waited for a human, ends as it would
//!   have: with that answer (checked against the response format), or waiting for the human.
//! - Model calls made before the stop count against the iteration limit
//!   ([`TurnPlan::iterations_done`]).
//!
//! A recorded model message that did not finish means its step failed or was cancelled: the
//! turn was already ending, for a reason the log does not hold. Such a turn is not resumed.

use std::collections::HashSet;

use teamster_llm::Message;
use teamster_protocol::event::{ModelMessage, ToolCall};
use teamster_protocol::Event;
use teamster_tools::ToolGate;

use crate::gates::{ASK_USER_QUESTION, Decision, Resolution, Split};
use crate::run::{EndsWaiting, TurnOutcome, TurnPlan};
use crate::sink::EventSink;
use crate::structured::OutputCheck;

/// The result of a tool call that may have started before its server stopped, and that is not
/// run again.
pub const INTERRUPTED_CALL: &str = "Error: The server running this tool call stopped before its result was \
     recorded; the call may or may not have completed.";

/// What a turn taken over from a stopped server does next.
// One value per takeover; boxing the plan would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Resumed {
    /// Run the engine on the adjusted plan: its resolutions settle the calls left without a
    /// result, and `iterations_done` counts the model calls made before.
    Run(TurnPlan),
    /// The turn had reached its end before its server stopped; it ends so.
    Finished(TurnOutcome),
    /// The turn cannot be resumed safely, for the reason given; the caller ends it.
    NotResumable(String),
}

/// Adjusts the plan of a turn taken over from a stopped server (built from the stored history
/// as for any turn) to go on from where the turn stopped. `recorded` are the content events the
/// turn recorded after its `turn.created`, oldest first. When the turn stopped at a message
/// waiting for a human, what waits is announced to `sink` (unless the turn did), and the plan
/// runs that message's other calls and ends waiting ([`TurnPlan::ends_waiting`]).
pub fn resume_turn(mut plan: TurnPlan, recorded: &[Event], sink: &dyn EventSink) -> Resumed {
    let thread_id = plan.thread_id.clone();
    let messages: Vec<&ModelMessage> = recorded
        .iter()
        .filter_map(|event| match event {
            Event::ModelMessage(message) if message.thread_id == thread_id => Some(message),
            _ => None,
        })
        .collect();
    if messages.iter().any(|message| message.finish_reason.is_none()) {
        return Resumed::NotResumable("a model call of the turn did not finish, so the turn was already ending".to_owned());
    }
    let used = messages.len() as u64;
    if used >= plan.iteration_limit {
        return Resumed::Finished(TurnOutcome::Failed {
            message: format!(
                "The agent reached its iteration limit of {} model calls without finishing.",
                plan.iteration_limit
            ),
        });
    }
    plan.iterations_done = used;

    let answered: HashSet<&str> = recorded
        .iter()
        .filter_map(|event| match event {
            Event::ToolResponse(response) => Some(response.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    // Decisions this turn applies (its input): those whose result was recorded are done; an
    // allowed call without one may have started.
    plan.resolutions.retain(|resolution| !answered.contains(resolution.call.id.as_str()));
    let mut resolutions = std::mem::take(&mut plan.resolutions);
    for resolution in &mut resolutions {
        if resolution.decision == Decision::Allow && !idempotent(&plan, &resolution.call) {
            resolution.decision = Decision::Respond { content: INTERRUPTED_CALL.to_owned() };
        }
    }
    plan.resolutions = resolutions;

    let Some(last) = messages.last().map(|message| (*message).clone()) else {
        return Resumed::Run(plan);
    };
    let calls = last.tool_calls.clone().unwrap_or_default();
    if calls.is_empty() {
        return answer(plan, last);
    }
    let split = Split::of(&calls, |name| gate(&plan, name));
    let unanswered: Vec<Resolution> = split
        .run_now
        .iter()
        .filter(|call| !answered.contains(call.id.as_str()))
        .map(|call| Resolution {
            thread_id: thread_id.clone(),
            call: call.clone(),
            decision: if idempotent(&plan, call) {
                Decision::Allow
            } else {
                Decision::Respond { content: INTERRUPTED_CALL.to_owned() }
            },
        })
        .collect();
    if split.approval.is_empty() && split.client_side.is_empty() {
        plan.resolutions.extend(unanswered);
        return Resumed::Run(plan);
    }

    // The message waits for a human: announce what waits (unless the turn did), settle the
    // calls that ran at once, and end the turn waiting.
    let announced: Vec<Event> = recorded
        .iter()
        .filter(|event| match event {
            Event::ToolApprovalRequired(pending) | Event::ToolResponseRequired(pending) => {
                pending.tool_calls.iter().any(|call| call.source_event_id == last.id)
            }
            _ => false,
        })
        .cloned()
        .collect();
    let required_actions = if announced.is_empty() {
        let events = split.pending_events(&thread_id, &last.id);
        for event in &events {
            sink.emit_content(event);
        }
        events
    } else {
        announced
    };
    // The calls that ran at once and have no result go through the engine's own tool step
    // (large results kept as files, fan-out bounds, sub-agents) before the turn ends waiting.
    plan.resolutions.extend(unanswered);
    plan.ends_waiting = Some(EndsWaiting { message: last, required_actions });
    Resumed::Run(plan)
}

/// A turn whose last message was an answer: it ends with it if the answer passes the response
/// format's check; otherwise the model is asked to correct it.
fn answer(mut plan: TurnPlan, last: ModelMessage) -> Resumed {
    match OutputCheck::new(plan.response_format.as_ref()) {
        Err(message) => Resumed::Finished(TurnOutcome::Failed { message }),
        Ok(None) => Resumed::Finished(TurnOutcome::Done { output: Some(last), required_actions: Vec::new() }),
        Ok(Some(check)) => match check.check(&last.text()) {
            Ok(()) => Resumed::Finished(TurnOutcome::Done { output: Some(last), required_actions: Vec::new() }),
            Err(problem) => {
                plan.messages.push(Message::user(check.correction(&problem)));
                Resumed::Run(plan)
            }
        },
    }
}

/// What a call of the tool `name` waits for, as the turn's engine sees it: the built-in
/// `ask_user_question` joins the toolbox only when the turn runs.
fn gate(plan: &TurnPlan, name: &str) -> ToolGate {
    if name == ASK_USER_QUESTION && plan.ask_user_questions {
        return ToolGate::ClientSide;
    }
    plan.toolbox.get(name).map(|tool| tool.gate).unwrap_or_default()
}

/// Whether a call may run again: its tool declares itself idempotent.
fn idempotent(plan: &TurnPlan, call: &ToolCall) -> bool {
    plan.toolbox.get(&call.function.name).is_some_and(|tool| tool.annotations.idempotent)
}
