//! A session's workspace as file tools, beside the sandbox's `exec`: `read_file`, `write_file`,
//! `edit_file`, `list_files`, `glob` and `grep` ([`FileTools`]). They work on the files through
//! the [`SandboxProvider`] seam, so they keep its confinement: paths are the sandbox's
//! (relative to `/workspace`, or absolute under it or `/tmp`), `..` is refused, a symbolic link
//! is never followed out of the workspace, and reads are bounded. No shell starts for a read.
//!
//! `tools.rs` holds the tools' definitions and what each call does, `selection.rs` the tools an
//! agent chose (`config.sandbox.tools`: `exec` and these, each by its name or another, or left
//! out) as one [`WorkspaceTools`], `glob.rs` the glob patterns, `text.rs` what counts as a text
//! file and how lines are cut, `lifecycle.rs` the workspace's lifecycle ([`Workspaces`]: made
//! ahead of the first tool call or by it, reported with its usage and files, destroyed while
//! the session goes on).
//!
//! Invariant: no knowledge of turns, stores or who may read a session; a session id (only as
//! the provider's key), a sandbox id and a provider in, reports, events and tool results out.

mod glob;
mod lifecycle;
mod selection;
mod text;
mod tools;

pub use lifecycle::{FilesQuery, MAX_LISTED_DEPTH, MAX_LISTED_FILES, Standing, Workspaces};
pub use selection::{WorkspaceTools, as_chosen, check_choices, sandbox_tool_definitions, sandbox_tool_names, shown_names};
pub use tools::{EDIT_TOOLS, FILE_TOOLS, FileTools, READ_TOOLS};
