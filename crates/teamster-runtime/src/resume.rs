//! How a taken-over turn goes on from what it recorded before its server stopped: its plan,
//! rebuilt as for any turn, is adjusted by [`teamster_engine::resume_turn`] (what a cut-off
//! model step, a call without a result and an answered call become is documented there).

use teamster_engine::{MetricsAccumulator, Resumed, TurnOutcome, TurnPlan, resume_turn};
use teamster_protocol::{Event, TurnMetrics};
use teamster_store::TurnRecord;

use super::sink::TurnSink;

/// What the runner of a taken-over turn does, decided from what the turn recorded.
// One value per takeover; boxing the outcome would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Resumption {
    /// Run the engine on this plan.
    Run(Box<TurnPlan>),
    /// End the turn with this outcome, with no model call.
    Finished(TurnOutcome),
    /// End the turn `abandoned`, for the reason given.
    Abandon(String),
}

/// Decides how a taken-over turn goes on: `history` is what its plan was built from (the
/// ancestors' events, then the turn's own). Returns the decision and the metrics of the model
/// calls the turn recorded before it stopped, priced as the plan's model.
pub(crate) fn resume(plan: TurnPlan, turn: &TurnRecord, history: &[Event], sink: &TurnSink) -> (Resumption, TurnMetrics) {
    let start = history
        .iter()
        .rposition(|event| matches!(event, Event::TurnCreated(created) if created.turn_id == turn.id))
        .map_or(history.len(), |index| index + 1);
    let recorded = &history[start..];
    let mut prior = MetricsAccumulator::default();
    for event in recorded {
        if let Event::ModelMessage(message) = event
            && let Some(usage) = &message.usage
        {
            prior.add(usage, plan.pricing.as_ref());
        }
    }
    let resumption = match resume_turn(plan, recorded, sink) {
        Resumed::Run(plan) => Resumption::Run(Box::new(plan)),
        Resumed::Finished(outcome) => Resumption::Finished(outcome),
        Resumed::NotResumable(reason) => Resumption::Abandon(reason),
    };
    (resumption, prior.metrics())
}
