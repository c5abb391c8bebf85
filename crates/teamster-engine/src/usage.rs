//! Usage per model call and metrics per turn.

use teamster_llm::TokenUsage;
use teamster_protocol::TurnMetrics;
use teamster_protocol::event::{InputTokensBreakdown, Usage};

/// Estimated sizes, in tokens, of the parts of a model call's input.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InputParts {
    pub instructions: u64,
    pub tool_definitions: u64,
}

/// A rough token estimate for text: four characters a token.
pub(crate) fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The wire usage of one call: the provider's counts, with the input split by part. The
/// provider only reports a total, so instructions and tool definitions take their estimated
/// share (capped by the total) and messages take the rest.
pub(crate) fn usage_of(tokens: TokenUsage, parts: InputParts) -> Usage {
    let instructions = parts.instructions.min(tokens.input_tokens);
    let tool_definitions = parts.tool_definitions.min(tokens.input_tokens - instructions);
    let optional = |value: u64| (value > 0).then_some(value);
    Usage {
        input_tokens: tokens.input_tokens,
        output_tokens: tokens.output_tokens,
        cache_read_tokens: optional(tokens.cache_read_tokens),
        cache_write_tokens: optional(tokens.cache_write_tokens),
        reasoning_tokens: optional(tokens.reasoning_tokens),
        input_tokens_breakdown: InputTokensBreakdown {
            harness: 0,
            skills: 0,
            instructions,
            tool_definitions,
            messages: tokens.input_tokens - instructions - tool_definitions,
        },
    }
}

/// Sums the usage of every model call of a turn.
#[derive(Clone, Debug, Default)]
pub struct MetricsAccumulator {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    reasoning: u64,
}

impl MetricsAccumulator {
    pub fn add(&mut self, usage: &Usage) {
        self.input += usage.input_tokens;
        self.output += usage.output_tokens;
        self.cache_read += usage.cache_read_tokens.unwrap_or_default();
        self.cache_write += usage.cache_write_tokens.unwrap_or_default();
        self.reasoning += usage.reasoning_tokens.unwrap_or_default();
    }

    pub fn metrics(&self) -> TurnMetrics {
        TurnMetrics {
            total_input_tokens: self.input,
            total_output_tokens: self.output,
            total_tokens: self.input + self.output,
            total_cache_read_tokens: Some(self.cache_read),
            total_cache_write_tokens: Some(self.cache_write),
            total_reasoning_tokens: Some(self.reasoning),
            total_cost_in_usd: None,
        }
    }
}
