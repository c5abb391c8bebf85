//! A run session per user, with a toolkit made for that user and a typed tool:
//! `cargo run -p teamster --example session_toolkit`.
//!
//! The toolkit gives each user's session a clock in that user's time zone. Runs on the provider
//! whose key the environment holds, or with `-- --offline` on the offline demo model, which calls
//! `get_current_datetime` when asked for the time, so the whole loop (model, tool, model) runs
//! without a provider.

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use teamster::{Agent, AgentItem, Tool, ToolError, Toolkit, ToolkitSession, tool};

/// Who a session is for.
struct User {
    name: String,
    /// Hours east of UTC.
    utc_offset: i64,
}

/// Arguments of `get_current_datetime`.
#[derive(Deserialize, JsonSchema)]
struct Clock {
    /// Whether to include seconds.
    #[serde(default)]
    seconds: bool,
}

/// Makes each session a clock in its user's time zone.
struct ClockToolkit;

struct ClockSession {
    clock: Arc<dyn Tool<User>>,
}

#[async_trait]
impl Toolkit<User> for ClockToolkit {
    fn name(&self) -> &str {
        "clock"
    }

    async fn create_session(&self, user: &User) -> Result<Box<dyn ToolkitSession<User>>, String> {
        let offset = user.utc_offset;
        let clock = tool("get_current_datetime", "The user's local date and time.", move |args: Clock, _: &User| async move {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(ToolError::from)?;
            let local = now.as_secs() as i64 + offset * 3600;
            let (hours, minutes, seconds) = (local / 3600 % 24, local / 60 % 60, local % 60);
            Ok(if args.seconds {
                format!("{hours:02}:{minutes:02}:{seconds:02} (UTC{offset:+})")
            } else {
                format!("{hours:02}:{minutes:02} (UTC{offset:+})")
            })
        });
        Ok(Box::new(ClockSession { clock }))
    }
}

#[async_trait]
impl ToolkitSession<User> for ClockSession {
    fn instructions(&self) -> Option<String> {
        Some("Times are the user's local time.".to_owned())
    }

    fn tools(&self) -> Vec<Arc<dyn Tool<User>>> {
        vec![self.clock.clone()]
    }
}

#[tokio::main]
async fn main() -> Result<(), support::Failure> {
    let model = support::model()?;
    let agent = Agent::builder("clock", model)
        .dynamic_instructions(|user: &User| Ok(format!("You are {}'s assistant.", user.name)))
        .toolkit(ClockToolkit)
        .build()?;

    for user in [User { name: "Ada".into(), utc_offset: 0 }, User { name: "Hiro".into(), utc_offset: 9 }] {
        let name = user.name.clone();
        let session = agent.create_session(user).await?;
        let response = session.run(vec![AgentItem::user("What time is it?")]).await?;
        println!("{name}: {}", response.text());
        session.close().await;
    }
    Ok(())
}
