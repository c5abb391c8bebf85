//! Toolkits: tools (and instructions) made per run session from its context, such as a
//! connection opened for one user, kept for the session's runs and closed with it.

use std::sync::Arc;

use async_trait::async_trait;

use crate::Tool;

/// Makes a [`ToolkitSession`] for each run session, from its context.
///
/// ```
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use teamster::{Tool, ToolError, Toolkit, ToolkitSession, tool};
///
/// struct Tenant {
///     name: String,
/// }
///
/// /// A toolkit whose one tool knows the tenant it was made for.
/// struct Greeter;
///
/// struct GreeterSession {
///     tools: Vec<Arc<dyn Tool<Tenant>>>,
/// }
///
/// #[async_trait]
/// impl Toolkit<Tenant> for Greeter {
///     fn name(&self) -> &str {
///         "greeter"
///     }
///
///     async fn create_session(&self, tenant: &Tenant) -> Result<Box<dyn ToolkitSession<Tenant>>, String> {
///         let greeting = format!("Hello from {}", tenant.name);
///         let greet = tool("greet", "Greets.", move |_: serde_json::Value, _: &Tenant| {
///             let greeting = greeting.clone();
///             async move { Ok::<_, ToolError>(greeting) }
///         });
///         Ok(Box::new(GreeterSession { tools: vec![greet] }))
///     }
/// }
///
/// #[async_trait]
/// impl ToolkitSession<Tenant> for GreeterSession {
///     fn tools(&self) -> Vec<Arc<dyn Tool<Tenant>>> {
///         self.tools.clone()
///     }
/// }
/// ```
#[async_trait]
pub trait Toolkit<Ctx>: Send + Sync {
    /// The toolkit's name, for errors.
    fn name(&self) -> &str;

    /// Prepares the toolkit for one run session. An error fails the session's creation with
    /// [`Error::Toolkit`](crate::Error::Toolkit).
    async fn create_session(&self, context: &Ctx) -> Result<Box<dyn ToolkitSession<Ctx>>, String>;
}

/// A toolkit prepared for one run session: its tools and instructions for every run of the
/// session, until [`ToolkitSession::close`].
#[async_trait]
pub trait ToolkitSession<Ctx>: Send + Sync {
    /// Instructions added after the agent's own, if any.
    fn instructions(&self) -> Option<String> {
        None
    }

    /// The tools it offers.
    fn tools(&self) -> Vec<Arc<dyn Tool<Ctx>>>;

    /// Releases what the session holds. Called once, when the run session closes (or is
    /// dropped without closing).
    async fn close(&self) {}
}
