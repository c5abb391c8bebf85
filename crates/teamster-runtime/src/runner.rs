//! The task that runs one turn: read its history, have it planned (see [`PlanTurns`](super::PlanTurns)), run
//! the engine with a deadline, and record how it ended.

use std::sync::Arc;
use std::time::Duration;

use teamster_engine::{EventSink, TurnOutcome, run_turn};
use teamster_protocol::event::TurnDone;
use teamster_protocol::agent::AgentSpec;
use teamster_protocol::{CancelReason, Event, MAIN_THREAD_ID, TurnMetrics, TurnState, ids, timestamp};
use teamster_store::{LogWrite, SessionRecord, TurnRecord};
use tracing::Instrument;

use super::TurnRuntime;
use super::history::History;
use super::leases::Hold;
use super::live::TurnLog;
use super::metrics::add_metrics;
use super::running::EndingTurn;
use super::resume::{self, Resumption};
use super::sink::TurnSink;
use super::TurnStart;

/// How long a new turn waits for the previous turn of its session to record its end.
const PREVIOUS_TURN_WAIT: Duration = Duration::from_secs(10);

/// A turn just created here: its `turn.created` as stored (its only content so far), the
/// agent spec it was admitted with, and the session's previous turn if that is still ending.
pub(crate) struct NewTurn {
    pub created: Arc<str>,
    pub admitted: AgentSpec,
    pub ending_previous: Option<EndingTurn>,
}

/// How a runner starts its turn.
enum Start {
    /// A new turn, once the session's previous turn (if it is still ending) has ended.
    New(Box<NewTurn>),
    /// A turn this replica took over from a stopped server (see `replicas`), with what is left
    /// of its time.
    Resumed { timeout: Duration },
}

/// Starts a new turn's task (holding the turn's new lease), and a supervisor that ends the
/// turn with an error if the task panics, so no turn is ever left running.
pub(crate) fn spawn(runtime: TurnRuntime, log: Arc<TurnLog>, session: SessionRecord, turn: TurnRecord, new: NewTurn) {
    let hold = runtime.inner.leases.hold_new(&log);
    start(runtime, log, hold, session, turn, Start::New(Box::new(new)));
}

/// Starts the task of a turn this replica took over and holds, like [`spawn`].
pub(crate) fn spawn_resumed(
    runtime: TurnRuntime,
    log: Arc<TurnLog>,
    hold: Arc<Hold>,
    session: SessionRecord,
    turn: TurnRecord,
    timeout: Duration,
) {
    start(runtime, log, hold, session, turn, Start::Resumed { timeout });
}

fn start(runtime: TurnRuntime, log: Arc<TurnLog>, hold: Arc<Hold>, session: SessionRecord, turn: TurnRecord, how: Start) {
    let trace = runtime.inner.telemetry.start_trace(&session, &turn, teamster_telemetry::traces::caller_parent());
    // Every log line of the turn's task carries its ids, and its trace's when it is traced.
    let span = tracing::info_span!("turn", session_id = %session.id, turn_id = %turn.id, trace_id = tracing::field::Empty);
    if let Some(trace) = &trace {
        span.record("trace_id", trace.trace_id_hex());
    }
    let sink = TurnSink::new(log.clone(), runtime.inner.writer.clone(), Some(hold), runtime.inner.telemetry.clone()).traced(trace);
    // A new turn's sink sees every content write of the turn, so its history is cached from
    // them; a taken-over turn's began elsewhere.
    let sink = Arc::new(if matches!(how, Start::New(_)) { sink.mirrored() } else { sink });
    let task = tokio::spawn(run(runtime.clone(), sink.clone(), session, turn, how).instrument(span));
    tokio::spawn(async move {
        if let Err(error) = task.await {
            tracing::error!(turn_id = %log.turn_id, %error, "turn task failed");
            if log.final_state().is_none() {
                let state = TurnState::Error {
                    message: "The turn failed because of an internal error.".to_owned(),
                    completed_at: timestamp::now(),
                    metrics: None,
                };
                finish(&runtime, &sink, state, None).await;
            }
        }
    });
}

async fn run(runtime: TurnRuntime, sink: Arc<TurnSink>, session: SessionRecord, turn: TurnRecord, how: Start) {
    let (timeout, resumed, own, admitted) = match how {
        Start::New(new) => {
            let NewTurn { created, admitted, ending_previous } = *new;
            if let Some(previous) = ending_previous {
                previous.wait(&runtime, PREVIOUS_TURN_WAIT).await;
            }
            (runtime.inner.turn_timeout, false, Some(created), Some(admitted))
        }
        Start::Resumed { timeout } => (timeout, true, None, None),
    };
    let log = sink.log.clone();
    let planned = match runtime.inner.history.history(runtime.events(), &turn, own.as_deref()).await {
        Ok(history) => {
            let planning = runtime.inner.planner.plan(&session, &turn, admitted, &history.events, &sink);
            planning.await.map(|start| (start, history))
        }
        Err(error) => Err(format!("The session's history could not be read: {error}.")),
    };
    let mut history = None;
    let (outcome, metrics) = match planned {
        Err(message) if resumed => {
            tracing::warn!(turn_id = %turn.id, "ending a taken-over turn as abandoned: {message}");
            log.request_cancel(CancelReason::Abandoned);
            (TurnOutcome::Interrupted, TurnMetrics::default())
        }
        Err(message) => (TurnOutcome::Failed { message }, TurnMetrics::default()),
        Ok((TurnStart::NeedsAuthorization(required), used_history)) => {
            history = Some(used_history);
            let event = Event::McpAuthRequired(required);
            sink.emit_content(&event);
            (TurnOutcome::Done { output: None, required_actions: vec![event] }, TurnMetrics::default())
        }
        Ok((TurnStart::Run { plan, time_limit }, used_history)) => {
            // A taken-over turn has `timeout` left of the runtime's limit: as long of the agent's
            // has gone by.
            let gone = runtime.inner.turn_timeout.saturating_sub(timeout);
            let timeout = time_limit.map_or(timeout, |limit| timeout.min(limit.saturating_sub(gone)));
            let (resumption, prior) = if resumed {
                resume::resume(*plan, &turn, &used_history.events, &sink)
            } else {
                (Resumption::Run(plan), TurnMetrics::default())
            };
            history = Some(used_history);
            let (outcome, metrics) = match resumption {
                Resumption::Run(plan) => {
                    let run = run_turn(*plan, sink.as_ref(), &log.cancel);
                    tokio::pin!(run);
                    tokio::select! {
                        result = &mut run => result,
                        () = tokio::time::sleep(timeout) => {
                            log.request_cancel(CancelReason::ServerExecutionTimeout);
                            run.await
                        }
                    }
                }
                Resumption::Finished(outcome) => (outcome, TurnMetrics::default()),
                Resumption::Abandon(reason) => {
                    tracing::warn!(turn_id = %turn.id, "ending a taken-over turn as abandoned: {reason}");
                    log.request_cancel(CancelReason::Abandoned);
                    (TurnOutcome::Interrupted, TurnMetrics::default())
                }
            };
            (outcome, add_metrics(&prior, &metrics))
        }
    };
    let completed_at = timestamp::now();
    let state = match outcome {
        TurnOutcome::Done { output, required_actions } => TurnState::Done {
            output: output.map(Box::new),
            required_actions,
            completed_at,
            metrics: Some(metrics),
        },
        TurnOutcome::Interrupted => TurnState::Cancelled {
            reason: log.cancel_reason().unwrap_or(CancelReason::ClientCancelled),
            completed_at,
            metrics: Some(metrics),
        },
        TurnOutcome::Failed { message } => TurnState::Error { message, completed_at, metrics: Some(metrics) },
    };
    runtime.inner.planner.ended(&turn).await;
    finish(&runtime, &sink, state, history.map(|history| (&turn, history))).await;
}

/// Records the turn's end: `turn.done` on the stream and as content, and the turn's state in
/// the same commit, then waits until all of it is durable, caches the history through this
/// turn (so a turn chained to it finds it), and only then lets the turn leave memory.
///
/// A fenced turn (this replica no longer owns it) records nothing: it only leaves memory.
async fn finish(runtime: &TurnRuntime, sink: &TurnSink, state: TurnState, history: Option<(&TurnRecord, History)>) {
    let log = &sink.log;
    if log.is_fenced() {
        runtime.inner.live.remove(&log.turn_id);
        log.mark_finished();
        return;
    }
    sink.telemetry.turn_ended(&state, sink.started.elapsed());
    let status = match &state {
        TurnState::Running => "running",
        TurnState::Done { .. } => "done",
        TurnState::Cancelled { .. } => "cancelled",
        TurnState::Error { .. } => "error",
    };
    tracing::info!(status, "turn ended");
    log.set_final_state(state.clone());
    let at = timestamp::now();
    let done = Event::TurnDone(TurnDone {
        id: ids::new_id("evt"),
        state: state.clone(),
        created_at: at.clone(),
        thread_id: Some(MAIN_THREAD_ID.to_owned()),
    });
    sink.emit_done(&done, LogWrite::TurnState { turn_id: log.turn_id.clone(), state, at });
    runtime.inner.writer.flush().await;
    runtime.inner.leases.release_hold(&log.turn_id);
    // A turn fenced while its last writes were committed may have lost some of them.
    if let Some((turn, history)) = history.filter(|_| !log.is_fenced()) {
        runtime.inner.history.cache(runtime.events(), turn, history, sink.take_recorded()).await;
    }
    runtime.inner.live.remove(&log.turn_id);
    log.mark_finished();
}
