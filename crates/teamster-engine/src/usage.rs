//! Usage per model call and metrics per turn.

use teamster_llm::TokenUsage;
use teamster_protocol::TurnMetrics;
use teamster_protocol::event::{InputTokensBreakdown, Usage};
use teamster_protocol::settings::ModelPricing;

/// Estimated sizes, in tokens, of the parts of a model call's input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InputParts {
    /// Framing the harness adds: compaction summaries, large-result notes.
    pub harness: u64,
    /// The skills section of the system prompt.
    pub skills: u64,
    pub instructions: u64,
    pub tool_definitions: u64,
    /// Everything else: the conversation's messages.
    pub messages: u64,
}

impl InputParts {
    pub fn total(&self) -> u64 {
        self.harness + self.skills + self.instructions + self.tool_definitions + self.messages
    }
}

/// A rough token estimate for text: four bytes a token, rounded up.
pub(crate) fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The wire usage of one call: the provider's counts, with its input total split in the
/// proportions of the estimated parts (the provider reports only the total). The parts always
/// add up to `input_tokens`; messages take the rounding.
pub(crate) fn usage_of(tokens: TokenUsage, parts: InputParts) -> Usage {
    let total = tokens.input_tokens;
    let estimated = parts.total();
    let share = |part: u64| if estimated == 0 { 0 } else { (u128::from(part) * u128::from(total) / u128::from(estimated)) as u64 };
    let harness = share(parts.harness);
    let skills = share(parts.skills);
    let instructions = share(parts.instructions);
    let tool_definitions = share(parts.tool_definitions);
    let optional = |value: u64| (value > 0).then_some(value);
    Usage {
        input_tokens: total,
        output_tokens: tokens.output_tokens,
        cache_read_tokens: optional(tokens.cache_read_tokens),
        cache_write_tokens: optional(tokens.cache_write_tokens),
        reasoning_tokens: optional(tokens.reasoning_tokens),
        input_tokens_breakdown: InputTokensBreakdown {
            harness,
            skills,
            instructions,
            tool_definitions,
            messages: total - harness - skills - instructions - tool_definitions,
        },
    }
}

/// Adds each model call's usage to its thread's metrics and to the whole turn's.
pub(crate) struct Meter<'a> {
    pub thread: MetricsAccumulator,
    turn: &'a std::sync::Mutex<MetricsAccumulator>,
}

impl<'a> Meter<'a> {
    pub fn new(turn: &'a std::sync::Mutex<MetricsAccumulator>) -> Meter<'a> {
        Meter { thread: MetricsAccumulator::default(), turn }
    }

    pub fn add(&mut self, usage: &Usage, pricing: Option<&ModelPricing>) {
        self.thread.add(usage, pricing);
        self.turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(usage, pricing);
    }
}

/// Sums the usage of every model call of a turn, and its cost when every call's model has a
/// price.
#[derive(Clone, Debug)]
pub struct MetricsAccumulator {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    reasoning: u64,
    /// `None` once a call was made on a model without a price: a partial sum would mislead.
    cost: Option<f64>,
}

impl Default for MetricsAccumulator {
    fn default() -> Self {
        MetricsAccumulator { input: 0, output: 0, cache_read: 0, cache_write: 0, reasoning: 0, cost: Some(0.0) }
    }
}

impl MetricsAccumulator {
    /// Adds one call's usage, priced at `pricing` (`None`: the model has no known price).
    pub fn add(&mut self, usage: &Usage, pricing: Option<&ModelPricing>) {
        self.input += usage.input_tokens;
        self.output += usage.output_tokens;
        self.cache_read += usage.cache_read_tokens.unwrap_or_default();
        self.cache_write += usage.cache_write_tokens.unwrap_or_default();
        self.reasoning += usage.reasoning_tokens.unwrap_or_default();
        let tokens = TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens.unwrap_or_default(),
            cache_write_tokens: usage.cache_write_tokens.unwrap_or_default(),
            reasoning_tokens: usage.reasoning_tokens.unwrap_or_default(),
        };
        self.cost = match (self.cost, pricing) {
            (Some(sum), Some(pricing)) => Some(sum + tokens.cost_in_usd(pricing)),
            _ => None,
        };
    }

    pub fn metrics(&self) -> TurnMetrics {
        TurnMetrics {
            total_input_tokens: self.input,
            total_output_tokens: self.output,
            total_tokens: self.input + self.output,
            total_cache_read_tokens: Some(self.cache_read),
            total_cache_write_tokens: Some(self.cache_write),
            total_reasoning_tokens: Some(self.reasoning),
            // No calls, no cost to report.
            total_cost_in_usd: self.cost.filter(|_| self.input + self.output > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breakdown_splits_the_reported_total_in_proportion() {
        let parts = InputParts { harness: 10, skills: 5, instructions: 20, tool_definitions: 30, messages: 35 };
        let usage = usage_of(TokenUsage { input_tokens: 1000, output_tokens: 7, ..TokenUsage::default() }, parts);
        let breakdown = usage.input_tokens_breakdown;
        assert_eq!(
            (breakdown.harness, breakdown.skills, breakdown.instructions, breakdown.tool_definitions, breakdown.messages),
            (100, 50, 200, 300, 350)
        );
        let odd = usage_of(TokenUsage { input_tokens: 7, ..TokenUsage::default() }, parts).input_tokens_breakdown;
        assert_eq!(odd.harness + odd.skills + odd.instructions + odd.tool_definitions + odd.messages, 7);
        let nothing = usage_of(TokenUsage { input_tokens: 5, ..TokenUsage::default() }, InputParts::default());
        assert_eq!(nothing.input_tokens_breakdown.messages, 5);
    }

    #[test]
    fn metrics_sum_every_call_and_price_them_only_when_every_price_is_known() {
        let pricing = ModelPricing {
            input_per_million: 2.0,
            output_per_million: 8.0,
            cache_read_per_million: Some(0.5),
            cache_write_per_million: None,
        };
        let call = |input, output, cache_read| {
            usage_of(
                TokenUsage { input_tokens: input, output_tokens: output, cache_read_tokens: cache_read, ..TokenUsage::default() },
                InputParts::default(),
            )
        };
        let mut metrics = MetricsAccumulator::default();
        assert_eq!(metrics.metrics().total_cost_in_usd, None, "no calls, no cost");
        metrics.add(&call(1_000_000, 250_000, 0), Some(&pricing));
        metrics.add(&call(500_000, 0, 500_000), Some(&pricing));
        let totals = metrics.metrics();
        assert_eq!((totals.total_input_tokens, totals.total_output_tokens, totals.total_tokens), (1_500_000, 250_000, 1_750_000));
        assert_eq!(totals.total_cache_read_tokens, Some(500_000));
        assert_eq!(totals.total_cost_in_usd, Some(2.0 + 2.0 + 0.25));
        metrics.add(&call(10, 1, 0), None);
        assert_eq!(metrics.metrics().total_cost_in_usd, None, "a call without a price makes the sum unknown");
    }
}
