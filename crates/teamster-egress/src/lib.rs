//! Where member-supplied URLs may lead: the address ranges they may not reach
//! ([`FORBIDDEN_RANGES`], [`forbidden`]), the operator's allow-list ([`EgressPolicy`]), and
//! the policy applied to HTTP clients ([`GuardedResolver`], [`redirect_policy`],
//! [`client_builder`]) and to other clients that resolve a host first
//! ([`EgressPolicy::resolve`], e.g. a git fetch pinned to the checked address).
//!
//! Checks are on addresses, after resolution and at connect time, not on how a URL spells its
//! host: `localhost`, `0x7f000001`, `[::ffff:127.0.0.1]` and a name whose DNS answer changes
//! between two requests all meet the same table. Operator-configured destinations do not go
//! through this crate; only what members may write (agent specs, skill sources) does.

mod client;
mod policy;
mod ranges;

pub use client::{GuardedResolver, MAX_REDIRECTS, client_builder, redirect_policy, refusal};
pub use policy::{EgressError, EgressPolicy, RESOLVE_TIMEOUT};
pub use ranges::{Cidr, FORBIDDEN_RANGES, ForbiddenRange, InvalidCidr, forbidden};
