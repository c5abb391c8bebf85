//! Turn metrics rebuilt from stored messages, for turns whose process died, and metrics added
//! up across a takeover.

use teamster_engine::MetricsAccumulator;
use teamster_protocol::{Event, TurnMetrics};
use teamster_store::ContentEvent;

/// Sums the usage of every stored model message (without a cost: the prices in force when the
/// turn ran are not known here).
pub(crate) fn metrics_from_content(content: &[ContentEvent]) -> TurnMetrics {
    let mut metrics = MetricsAccumulator::default();
    for stored in content.iter().filter(|event| event.kind == "model.message") {
        if let Ok(Event::ModelMessage(message)) = serde_json::from_str::<Event>(&stored.data)
            && let Some(usage) = &message.usage {
                metrics.add(usage, None);
            }
    }
    metrics.metrics()
}

/// The metrics of two sets of model calls together; the cost is known only if both are.
pub(crate) fn add_metrics(first: &TurnMetrics, second: &TurnMetrics) -> TurnMetrics {
    let optional = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or_default() + b.unwrap_or_default()),
    };
    let no_calls = |metrics: &TurnMetrics| metrics.total_tokens == 0;
    TurnMetrics {
        total_input_tokens: first.total_input_tokens + second.total_input_tokens,
        total_output_tokens: first.total_output_tokens + second.total_output_tokens,
        total_tokens: first.total_tokens + second.total_tokens,
        total_cache_read_tokens: optional(first.total_cache_read_tokens, second.total_cache_read_tokens),
        total_cache_write_tokens: optional(first.total_cache_write_tokens, second.total_cache_write_tokens),
        total_reasoning_tokens: optional(first.total_reasoning_tokens, second.total_reasoning_tokens),
        total_cost_in_usd: match (first.total_cost_in_usd, second.total_cost_in_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (Some(cost), None) if no_calls(second) => Some(cost),
            (None, Some(cost)) if no_calls(first) => Some(cost),
            _ => None,
        },
    }
}
