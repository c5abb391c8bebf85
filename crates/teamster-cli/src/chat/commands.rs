//! Slash commands: what a line of the chat's input means when it starts with `/`.

/// A slash command, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Quit,
    /// Cancel the running turn.
    Cancel,
    /// Start a new session, with this agent or the current one.
    New(Option<String>),
    /// List recent sessions.
    Sessions,
    /// Switch to a session, by id or by its number in the last `/sessions` list.
    Resume(String),
    /// Show the mode, or switch to one.
    Mode(Option<String>),
    Tasks,
    Plans,
    /// Join the running turn before its next model call.
    Steer(String),
    /// Queue a message that starts the next turn once this one ends.
    FollowUp(String),
    /// Attach a file to the next message; without a path, list the attachments.
    Attach(Option<String>),
    /// Drop the attachments.
    Detach,
    /// Download a sandbox file of the latest turn, to a local path (default: its file name).
    Download { path: String, to: Option<String> },
    /// Show or collapse reasoning.
    Reasoning,
    Usage,
}

/// The commands as `/help` lists them: usage and what it does.
pub const HELP: &[(&str, &str)] = &[
    ("/help", "this list"),
    ("/sessions", "your recent sessions"),
    ("/resume ID|N", "switch to a session (an id, or a number from /sessions), its history shown"),
    ("/new [AGENT]", "start a new session"),
    ("/mode [NAME]", "show the mode, or switch to another"),
    ("/tasks", "the session's task list"),
    ("/plans", "the plans the agent submitted"),
    ("/steer TEXT", "tell the running turn something before its next step"),
    ("/followup TEXT", "queue a message for when the running turn ends (Enter does this while one runs)"),
    ("/attach [PATH]", "attach a file to your next message (no path: list them)"),
    ("/detach", "drop the attachments"),
    ("/download PATH [TO]", "save a file of the latest turn's sandbox"),
    ("/reasoning", "show or collapse reasoning (Ctrl-O)"),
    ("/usage", "tokens and cost so far"),
    ("/cancel", "cancel the running turn (Ctrl-C)"),
    ("/quit", "leave (Ctrl-C twice, or Ctrl-D)"),
];

/// Parses a line of input: `Ok(None)` when it is a message, not a command; `Err` says what is
/// wrong with a command. `//text` sends `/text` as a message.
pub fn parse(line: &str) -> Result<Option<Command>, String> {
    let line = line.trim();
    let Some(rest) = line.strip_prefix('/') else { return Ok(None) };
    if rest.starts_with('/') {
        return Ok(None);
    }
    let (name, argument) = match rest.split_once(char::is_whitespace) {
        Some((name, argument)) => (name, argument.trim()),
        None => (rest, ""),
    };
    let optional = || (!argument.is_empty()).then(|| argument.to_owned());
    let required = |usage: &str| {
        if argument.is_empty() { Err(format!("usage: {usage}")) } else { Ok(argument.to_owned()) }
    };
    let command = match name {
        "help" | "?" => Command::Help,
        "quit" | "exit" | "q" => Command::Quit,
        "cancel" => Command::Cancel,
        "new" => Command::New(optional()),
        "sessions" => Command::Sessions,
        "resume" => Command::Resume(required("/resume ID|N")?),
        "mode" => Command::Mode(optional()),
        "tasks" => Command::Tasks,
        "plans" | "plan" => Command::Plans,
        "steer" => Command::Steer(required("/steer TEXT")?),
        "followup" | "follow-up" | "queue" => Command::FollowUp(required("/followup TEXT")?),
        "attach" => Command::Attach(optional()),
        "detach" => Command::Detach,
        "download" => {
            let mut words = argument.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(path), to, None) => Command::Download { path: path.to_owned(), to: to.map(str::to_owned) },
                _ => return Err("usage: /download PATH [TO]".to_owned()),
            }
        }
        "reasoning" | "thinking" => Command::Reasoning,
        "usage" | "cost" => Command::Usage,
        other => return Err(format!("unknown command /{other}: /help lists them")),
    };
    Ok(Some(command))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_commands() {
        let cases: &[(&str, Result<Option<Command>, &str>)] = &[
            ("hello", Ok(None)),
            ("  /help ", Ok(Some(Command::Help))),
            ("//not a command", Ok(None)),
            ("/exit", Ok(Some(Command::Quit))),
            ("/new", Ok(Some(Command::New(None)))),
            ("/new helper", Ok(Some(Command::New(Some("helper".into()))))),
            ("/resume 2", Ok(Some(Command::Resume("2".into())))),
            ("/resume", Err("usage: /resume ID|N")),
            ("/mode", Ok(Some(Command::Mode(None)))),
            ("/mode plan", Ok(Some(Command::Mode(Some("plan".into()))))),
            ("/steer  go  left ", Ok(Some(Command::Steer("go  left".into())))),
            ("/followup", Err("usage: /followup TEXT")),
            ("/queue later", Ok(Some(Command::FollowUp("later".into())))),
            ("/attach ./a b.txt", Ok(Some(Command::Attach(Some("./a b.txt".into()))))),
            ("/download /workspace/out.csv", Ok(Some(Command::Download { path: "/workspace/out.csv".into(), to: None }))),
            ("/download a b", Ok(Some(Command::Download { path: "a".into(), to: Some("b".into()) }))),
            ("/download a b c", Err("usage: /download PATH [TO]")),
            ("/nope", Err("unknown command /nope: /help lists them")),
        ];
        for (line, expected) in cases {
            assert_eq!(parse(line), expected.clone().map_err(str::to_owned), "{line:?}");
        }
    }

    #[test]
    fn help_names_every_command_once() {
        for (usage, _) in HELP {
            let line = usage.split_whitespace().next().unwrap();
            assert!(parse(line).is_ok() || parse(&format!("{line} x")).is_ok(), "{usage}");
        }
    }
}
