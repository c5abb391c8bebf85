//! [`NativeTools`]: a program's own Rust tools (the [`tool`](crate::tool) functions and
//! [`Tool`] implementations of the stateless level) hosted by the embedded runtime under a
//! name, so that gating a function behind a human's approval needs no MCP server.
//!
//! An agent names the set in its `mcp_servers` as it names a configured server
//! (`{"name": "orders", "require_approval_for_tools": ["refund_order"]}`), and the set's tools
//! go through the service's one tool seam (`teamster_tools::tool_sets`): the same selectors
//! (by default every tool not marked read-only waits for approval, as an MCP tool without
//! `readOnlyHint` does), the same session permissions and grants, durable waits and
//! sub-agents. Each turn opens the set with a context the program makes from the turn's
//! [`ToolScope`].

use std::sync::Arc;

use super::RuntimeOptions;
use teamster_tools::tool_sets::ToolSet;
use teamster_tools::ToolSource;

use crate::tool::BoundTools;
use crate::{Error, Tool};

pub use teamster_tools::tool_sets::ToolScope;

/// Native Rust tools the runtime hosts under one name, called with a context `Ctx` made for
/// each turn from its [`ToolScope`].
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use teamster::runtime::{NativeTools, Runtime, RuntimeOptions, ToolScope};
/// use teamster::{ToolError, tool};
///
/// /// Arguments of `refund_order`.
/// #[derive(Deserialize, JsonSchema)]
/// struct Refund {
///     /// The order to refund.
///     order_id: String,
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let refund = tool("refund_order", "Refunds an order in full.", |args: Refund, scope: &ToolScope| {
///     let who = scope.user.subject_id.clone();
///     async move { Ok::<_, ToolError>(format!("order {} of {who} is refunded", args.order_id)) }
/// });
/// let mut options = RuntimeOptions::default();
/// NativeTools::new("orders").tool(refund).register(&mut options)?;
/// let runtime = Runtime::open_with("sqlite::memory:", options).await?;
/// // Agents name the set in `mcp_servers`; `refund_order` waits for approval (it is not read-only).
/// let spec = serde_json::json!({"model": {"name": "offline/echo"}, "mcp_servers": [{"name": "orders"}]});
/// runtime.save_agent("desk", serde_json::from_value(spec).unwrap()).await?;
/// runtime.shutdown().await;
/// # Ok::<(), teamster::runtime::RuntimeError>(())
/// # }).unwrap();
/// ```
pub struct NativeTools<Ctx> {
    name: String,
    context: Arc<dyn Fn(&ToolScope) -> Ctx + Send + Sync>,
    tools: Vec<(Arc<dyn Tool<Ctx>>, bool)>,
}

impl<Ctx> std::fmt::Debug for NativeTools<Ctx> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<&str> = self.tools.iter().map(|(tool, _)| tool.name()).collect();
        formatter.debug_struct("NativeTools").field("name", &self.name).field("tools", &tools).finish()
    }
}

impl NativeTools<ToolScope> {
    /// An empty set named `name` whose tools get the turn's [`ToolScope`] as their context.
    pub fn new(name: impl Into<String>) -> NativeTools<ToolScope> {
        NativeTools::with_context(name, ToolScope::clone)
    }
}

impl<Ctx: Send + Sync + 'static> NativeTools<Ctx> {
    /// An empty set named `name` whose tools get the context `context` makes from each turn's
    /// [`ToolScope`] (the program's user record for the turn's user, say).
    pub fn with_context(name: impl Into<String>, context: impl Fn(&ToolScope) -> Ctx + Send + Sync + 'static) -> NativeTools<Ctx> {
        NativeTools { name: name.into(), context: Arc::new(context), tools: Vec::new() }
    }

    /// Adds a tool that may change something: by default its calls wait for approval.
    pub fn tool(mut self, tool: Arc<dyn Tool<Ctx>>) -> NativeTools<Ctx> {
        self.tools.push((tool, false));
        self
    }

    /// Adds a tool that only reads (MCP's `readOnlyHint`): by default its calls run at once.
    pub fn read_only_tool(mut self, tool: Arc<dyn Tool<Ctx>>) -> NativeTools<Ctx> {
        self.tools.push((tool, true));
        self
    }

    /// Adds the set to `options`' tool sets (replacing a set of the same name), for the
    /// runtime opened with them. Fails when two tools share a name.
    pub fn register(self, options: &mut RuntimeOptions) -> Result<(), Error> {
        let mut seen = std::collections::HashSet::new();
        if let Some((tool, _)) = self.tools.iter().find(|(tool, _)| !seen.insert(tool.name().to_owned())) {
            return Err(Error::Toolkit { toolkit: self.name, reason: format!("two tools are named {:?}", tool.name()) });
        }
        let name = self.name.clone();
        options.tool_sets.insert(name, Arc::new(self));
        Ok(())
    }
}

impl<Ctx: Send + Sync + 'static> ToolSet for NativeTools<Ctx> {
    fn open(&self, scope: &ToolScope) -> Arc<dyn ToolSource> {
        // Registration refused tools that share a name: nothing is shared here.
        let (tools, _) = BoundTools::new(self.tools.iter().cloned(), (self.context)(scope));
        Arc::new(tools)
    }
}
