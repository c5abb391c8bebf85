//! The operator's limits from `teamster serve`'s flags: the service's quota of running turns
//! per subject, the tenant budget and the caps on a turn's fan-out (the request rate limit goes
//! to the server's config).

use std::time::Duration;

use teamster_protocol::agent::Budget;
use teamster_service::{Limits, TenantBudget};

use crate::args::ServeArgs;

/// The service's limits as the flags set them.
pub fn service_limits(args: &ServeArgs) -> Limits {
    let budget = Budget { max_tokens: args.tenant_token_budget, max_cost_usd: args.tenant_cost_budget_usd };
    let tenant_budget = (budget.max_tokens.is_some() || budget.max_cost_usd.is_some())
        .then(|| TenantBudget { budget, window: Duration::from_secs(args.tenant_budget_window_hours * 3600) });
    Limits {
        max_concurrent_turns_per_subject: args.max_concurrent_turns_per_subject,
        tenant_budget,
        fan_out: teamster_service::FanOut {
            max_parallel_tool_calls: args.max_parallel_tool_calls,
            max_threads_per_turn: args.max_threads_per_turn,
        },
    }
}
