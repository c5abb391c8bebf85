//! Turn metrics rebuilt from stored messages, for turns whose process died.

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
