//! What a model call cost: its [`TokenUsage`] at a model's [`ModelPricing`].

use teamster_protocol::settings::ModelPricing;

use crate::TokenUsage;

impl TokenUsage {
    /// The cost of this usage in US dollars.
    ///
    /// `input_tokens` is the whole prompt, cache reads and writes included (OpenAI's
    /// `prompt_tokens` convention, which every adapter follows), so only the rest pays the input
    /// price; cache reads and writes pay their own prices, which default to the input price.
    /// `output_tokens` already counts reasoning tokens, which are not charged again.
    pub fn cost_in_usd(&self, pricing: &ModelPricing) -> f64 {
        let cached_input = self.cache_read_tokens.saturating_add(self.cache_write_tokens);
        let uncached_input = self.input_tokens.saturating_sub(cached_input);
        let cache_read_price = pricing.cache_read_per_million.unwrap_or(pricing.input_per_million);
        let cache_write_price = pricing.cache_write_per_million.unwrap_or(pricing.input_per_million);
        let per_million = uncached_input as f64 * pricing.input_per_million
            + self.cache_read_tokens as f64 * cache_read_price
            + self.cache_write_tokens as f64 * cache_write_price
            + self.output_tokens as f64 * pricing.output_per_million;
        per_million / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prices that are exact in binary, so the expected costs are exact too.
    fn pricing(cache_read: Option<f64>, cache_write: Option<f64>) -> ModelPricing {
        ModelPricing {
            input_per_million: 3.0,
            output_per_million: 15.0,
            cache_read_per_million: cache_read,
            cache_write_per_million: cache_write,
        }
    }

    fn usage(input: u64, cache_read: u64, cache_write: u64, output: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            reasoning_tokens: 0,
        }
    }

    #[test]
    fn input_and_output_pay_their_prices() {
        // 2,000 × $3 + 500 × $15 = $13,500 per million tokens.
        assert_eq!(usage(2_000, 0, 0, 500).cost_in_usd(&pricing(None, None)), 0.0135);
        assert_eq!(usage(1_000_000, 0, 0, 1_000_000).cost_in_usd(&pricing(None, None)), 18.0);
        assert_eq!(usage(0, 0, 0, 0).cost_in_usd(&pricing(None, None)), 0.0);
    }

    #[test]
    fn cached_tokens_are_part_of_the_input_and_pay_the_cache_prices() {
        // 500,000 uncached × $3 + 400,000 read × $0.25 + 100,000 written × $3.75
        // + 200,000 output × $15 = $1.5 + $0.1 + $0.375 + $3.
        let cost = usage(1_000_000, 400_000, 100_000, 200_000).cost_in_usd(&pricing(Some(0.25), Some(3.75)));
        assert_eq!(cost, 4.975);
    }

    #[test]
    fn absent_cache_prices_are_the_input_price() {
        let with_cache = usage(1_000_000, 400_000, 100_000, 0).cost_in_usd(&pricing(None, None));
        let without_cache = usage(1_000_000, 0, 0, 0).cost_in_usd(&pricing(None, None));
        assert_eq!((with_cache, without_cache), (3.0, 3.0));
    }

    #[test]
    fn reasoning_tokens_are_not_charged_twice() {
        let mut thinking = usage(0, 0, 0, 1_000);
        thinking.reasoning_tokens = 800;
        assert_eq!(thinking.cost_in_usd(&pricing(None, None)), 0.015);
    }

    #[test]
    fn cache_counts_larger_than_the_input_never_make_it_negative() {
        // A provider that reports more cached tokens than input: nothing pays the input price.
        let cost = usage(100, 80, 80, 0).cost_in_usd(&pricing(Some(0.5), Some(1.0)));
        assert_eq!(cost, 0.000_12);
    }
}
