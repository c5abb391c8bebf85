//! Bounds on a turn's fan-out: how many tool calls of one model message run at once, and how
//! many sub-agent threads one turn may start in all (at every depth, counted together).
//!
//! The operator sets the defaults; an agent spec's `config.fan_out` may lower them, never
//! raise them. Calls of a message beyond the parallel cap wait their turn (every call is still
//! answered, in call order); a `run_sub_agent` call beyond the thread cap is answered with a
//! tool error saying the cap was reached.

use teamster_protocol::agent::FanOutConfig;

/// The caps one turn runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FanOut {
    /// How many tool calls of one model message run at the same time (at least 1).
    pub max_parallel_tool_calls: u32,
    /// How many sub-agent threads one turn may start, at every depth together (0: none).
    pub max_threads_per_turn: u32,
}

impl FanOut {
    pub const DEFAULT_PARALLEL_TOOL_CALLS: u32 = 4;
    pub const DEFAULT_THREADS_PER_TURN: u32 = 16;

    /// These caps, lowered where `spec` asks for less (it cannot ask for more).
    pub fn lowered_by(self, spec: Option<&FanOutConfig>) -> FanOut {
        let lower = |cap: u32, asked: Option<u64>| {
            asked.map_or(cap, |asked| {
                cap.min(u32::try_from(asked).unwrap_or(u32::MAX))
            })
        };
        FanOut {
            max_parallel_tool_calls: lower(
                self.max_parallel_tool_calls,
                spec.and_then(|spec| spec.max_parallel_tool_calls),
            )
            .max(1),
            max_threads_per_turn: lower(
                self.max_threads_per_turn,
                spec.and_then(|spec| spec.max_threads_per_turn),
            ),
        }
    }
}

impl Default for FanOut {
    fn default() -> Self {
        FanOut {
            max_parallel_tool_calls: Self::DEFAULT_PARALLEL_TOOL_CALLS,
            max_threads_per_turn: Self::DEFAULT_THREADS_PER_TURN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_lowers_the_caps_and_never_raises_them() {
        let operator = FanOut {
            max_parallel_tool_calls: 4,
            max_threads_per_turn: 16,
        };
        assert_eq!(operator.lowered_by(None), operator);
        let lower = FanOutConfig {
            max_parallel_tool_calls: Some(2),
            max_threads_per_turn: Some(3),
        };
        assert_eq!(
            operator.lowered_by(Some(&lower)),
            FanOut {
                max_parallel_tool_calls: 2,
                max_threads_per_turn: 3
            }
        );
        let higher = FanOutConfig {
            max_parallel_tool_calls: Some(1_000),
            max_threads_per_turn: Some(u64::MAX),
        };
        assert_eq!(operator.lowered_by(Some(&higher)), operator);
        let zero = FanOutConfig {
            max_parallel_tool_calls: Some(0),
            max_threads_per_turn: Some(0),
        };
        assert_eq!(
            operator.lowered_by(Some(&zero)),
            FanOut {
                max_parallel_tool_calls: 1,
                max_threads_per_turn: 0
            }
        );
    }
}
