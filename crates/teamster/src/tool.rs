//! Tools: the [`Tool`] trait an agent calls with its context, and [`tool`], which makes one
//! from an async function of typed arguments whose JSON Schema is derived.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use teamster_protocol::ToolInfo;
use teamster_tools::{ToolAnnotations, ToolGate, ToolOutput, ToolSource};

/// A tool the model may call, run with the context of the session that calls it.
///
/// Most tools come from [`tool`]; implement the trait yourself when a call must borrow the
/// context across `.await`s.
pub trait Tool<Ctx>: Send + Sync {
    /// The name the model calls it by: unique within an agent.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// The JSON Schema of its arguments object.
    fn parameters(&self) -> &serde_json::Value;
    /// Runs a call. `arguments` is the JSON the model wrote, already parsed.
    fn call<'a>(&'a self, arguments: serde_json::Value, context: &'a Ctx) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// Why a tool call failed. The message goes back to the model as the call's result, so it can
/// correct its arguments or tell the user; the run goes on.
///
/// Any error converts into one, so tools can use `?`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError(String);

impl ToolError {
    /// A failure the model is told about.
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError(message.into())
    }

    /// What the model is told.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(error: E) -> ToolError {
        ToolError(error.to_string())
    }
}

/// Makes a tool from an async function of typed arguments and the caller's context.
///
/// The arguments' JSON Schema comes from their [`JsonSchema`] derive, so their doc comments
/// are the descriptions the model reads. Arguments the model writes that do not parse are
/// reported back to it as a failed call, naming what was wrong. The function gets `&Ctx`
/// before its future starts: take out of the context what the call needs.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use teamster::{Tool, ToolError, tool};
///
/// /// Adds two numbers.
/// #[derive(Deserialize, JsonSchema)]
/// struct Add {
///     /// The first number.
///     a: i64,
///     /// The second number.
///     b: i64,
/// }
///
/// struct Caller {
///     name: String,
/// }
///
/// let add = tool("add", "Adds two numbers.", |args: Add, caller: &Caller| {
///     let name = caller.name.clone();
///     async move { Ok::<_, ToolError>(format!("{name}: {}", args.a + args.b)) }
/// });
/// assert_eq!(add.name(), "add");
/// assert_eq!(add.parameters()["required"], serde_json::json!(["a", "b"]));
/// ```
pub fn tool<Ctx, Args, F, Fut>(name: &str, description: &str, function: F) -> Arc<dyn Tool<Ctx>>
where
    Ctx: 'static,
    Args: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(Args, &Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
{
    Arc::new(FnTool {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: schema_of::<Args>(),
        function,
        types: PhantomData,
    })
}

/// A tool made by [`tool`].
struct FnTool<Args, F> {
    name: String,
    description: String,
    parameters: serde_json::Value,
    function: F,
    types: PhantomData<fn(Args)>,
}

impl<Ctx, Args, F, Fut> Tool<Ctx> for FnTool<Args, F>
where
    Args: DeserializeOwned + Send + 'static,
    F: Fn(Args, &Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &serde_json::Value {
        &self.parameters
    }

    fn call<'a>(&'a self, arguments: serde_json::Value, context: &'a Ctx) -> BoxFuture<'a, Result<String, ToolError>> {
        match serde_json::from_value::<Args>(arguments) {
            Ok(arguments) => Box::pin((self.function)(arguments, context)),
            Err(error) => Box::pin(std::future::ready(Err(ToolError::new(format!(
                "invalid arguments for {}: {error}",
                self.name
            ))))),
        }
    }
}

/// Tools bound to the context their calls run with, as the engine's tool source (a session's
/// tools, or a native tool set opened for a turn).
pub(crate) struct BoundTools<Ctx> {
    context: Ctx,
    tools: HashMap<String, Arc<dyn Tool<Ctx>>>,
    listed: Vec<teamster_tools::Tool>,
}

impl<Ctx> BoundTools<Ctx> {
    /// `tools`, each with whether it only reads, bound to `context`; with the first name two of
    /// them share, if any (the later one is kept).
    pub(crate) fn new(tools: impl IntoIterator<Item = (Arc<dyn Tool<Ctx>>, bool)>, context: Ctx) -> (BoundTools<Ctx>, Option<String>) {
        let (mut by_name, mut listed, mut shared) = (HashMap::new(), Vec::new(), None);
        for (tool, read_only) in tools {
            let name = tool.name().to_owned();
            listed.push(teamster_tools::Tool {
                name: name.clone(),
                description: tool.description().to_owned(),
                input_schema: tool.parameters().clone(),
                info: ToolInfo::System { name: name.clone() },
                annotations: ToolAnnotations { read_only, ..ToolAnnotations::default() },
                gate: ToolGate::None,
            });
            if by_name.insert(name.clone(), tool).is_some() && shared.is_none() {
                shared = Some(name);
            }
        }
        (BoundTools { context, tools: by_name, listed }, shared)
    }
}

#[async_trait]
impl<Ctx: Send + Sync> ToolSource for BoundTools<Ctx> {
    async fn list(&self) -> Result<Vec<teamster_tools::Tool>, teamster_tools::Error> {
        Ok(self.listed.clone())
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        match self.tools.get(name) {
            Some(tool) => run_call(tool.as_ref(), arguments, &self.context).await,
            None => ToolOutput::error(format!("there is no tool named {name:?}")),
        }
    }
}

/// Runs one call of `tool` with `context`: the model's argument text parsed (empty meaning
/// `{}`), and the tool's answer or failure as the call's result for the model.
pub(crate) async fn run_call<Ctx>(tool: &dyn Tool<Ctx>, arguments: &str, context: &Ctx) -> ToolOutput {
    let name = tool.name();
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    let arguments = match serde_json::from_str(arguments) {
        Ok(arguments) => arguments,
        Err(error) => return ToolOutput::error(format!("the arguments of {name} are not JSON: {error}")),
    };
    match tool.call(arguments, context).await {
        Ok(output) => ToolOutput::ok(output),
        Err(error) => ToolOutput::error(error.message()),
    }
}

/// The JSON Schema of `Args` as a tool's parameters: an object schema without the meta-schema
/// and title keys that providers do not want.
fn schema_of<Args: JsonSchema>() -> serde_json::Value {
    let schema = serde_json::to_value(schemars::schema_for!(Args)).unwrap_or_default();
    // Arguments of any shape (`serde_json::Value`) have the schema `true`: an empty object.
    let mut object = match schema {
        serde_json::Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    object.remove("$schema");
    object.remove("title");
    object.entry("type").or_insert_with(|| "object".into());
    object.entry("properties").or_insert_with(|| serde_json::json!({}));
    serde_json::Value::Object(object)
}
