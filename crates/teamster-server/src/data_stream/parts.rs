//! The parts of the data stream, as they go on the wire: `type` plus camelCase fields, optional
//! fields absent when they do not apply.

use serde::Serialize;
use serde_json::Value;
use teamster_protocol::TurnMetrics;

use super::Call;

/// One part of the stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Part {
    StepStart,
    Text {
        text: String,
    },
    Reasoning {
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolInvocation {
        tool_invocation_id: String,
        /// Absent only for the result of a call the stream never saw.
        #[serde(skip_serializing_if = "String::is_empty")]
        tool_name: String,
        #[serde(skip_serializing_if = "Value::is_null")]
        args: Value,
        state: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// The sub-agent thread that made the call; absent for the main thread.
        #[serde(skip_serializing_if = "Option::is_none")]
        thread_id: Option<String>,
    },
    /// A milestone of a running call: `phaseIndex` is the tool's progress so far (it grows),
    /// `totalPhases` its total when the tool knows it, `label` its message.
    #[serde(rename_all = "camelCase")]
    ToolProgress {
        tool_name: String,
        tool_call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        phase_index: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        total_phases: Option<f64>,
        milestone: Value,
        /// The sub-agent thread whose call it is; absent for the main thread.
        #[serde(skip_serializing_if = "Option::is_none")]
        thread_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolAgent {
        agent_name: String,
        state: &'static str,
        tool_call_id: String,
        thread_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    DataToolAgent {
        data: AgentUsage,
    },
    DataFileRegistered {
        data: FileRegistered,
    },
    ApprovalRequired {
        data: ApprovalRequest,
    },
    ApprovalDecision {
        data: ApprovalDecision,
    },
    PlanStatusChange {
        data: PlanStatusChange,
    },
    #[serde(rename_all = "camelCase")]
    Finish {
        finish_reason: &'static str,
        /// Why a cancelled turn was cancelled (a Teamster extension; `finishReason` is `other`).
        #[serde(skip_serializing_if = "Option::is_none")]
        cancel_reason: Option<String>,
        usage: Usage,
    },
    DataCostSummary {
        data: CostSummary,
    },
    DataLatencySummary {
        data: LatencySummary,
    },
    Error {
        error: ErrorBody,
    },
    Custom {
        event_type: &'static str,
        data: Value,
    },
}

impl Part {
    /// A `tool-invocation` part: the call, or with `result` its result.
    pub(super) fn invocation(id: &str, call: &Call, result: Option<Value>) -> Part {
        Part::ToolInvocation {
            tool_invocation_id: id.to_owned(),
            tool_name: call.name.clone(),
            args: call.args.clone(),
            state: if result.is_some() { "result" } else { "call" },
            result,
            thread_id: (call.thread_id != teamster_protocol::MAIN_THREAD_ID).then(|| call.thread_id.clone()),
        }
    }

    /// A `tool-progress` part for what a running command printed: its milestone is the piece
    /// (`stream`, `text`, `offset`, `truncated`), its phase the bytes of the stream so far.
    pub(super) fn shell_output(output: &teamster_protocol::event::ShellOutput) -> Part {
        Part::ToolProgress {
            tool_name: output.tool_name.clone(),
            tool_call_id: output.tool_call_id.clone(),
            label: None,
            phase_index: (output.offset + output.text.len() as u64) as f64,
            total_phases: None,
            milestone: serde_json::json!({ "stream": output.stream, "text": output.text, "offset": output.offset, "truncated": output.truncated }),
            thread_id: (output.thread_id != teamster_protocol::MAIN_THREAD_ID).then(|| output.thread_id.clone()),
        }
    }

    /// A `tool-progress` part; its milestone is the report's figures.
    pub(super) fn progress(progress: &teamster_protocol::event::ToolProgress) -> Part {
        Part::ToolProgress {
            tool_name: progress.tool_name.clone(),
            tool_call_id: progress.tool_call_id.clone(),
            label: progress.message.clone(),
            phase_index: progress.progress,
            total_phases: progress.total,
            milestone: serde_json::json!({ "progress": progress.progress, "total": progress.total }),
            thread_id: (progress.thread_id != teamster_protocol::MAIN_THREAD_ID).then(|| progress.thread_id.clone()),
        }
    }

    /// A file an `exec` call made in the sandbox, now available for download.
    pub(super) fn file_registered(file: crate::streamed::ProducedFile, tool_call_id: &str, thread_id: &str) -> Part {
        Part::DataFileRegistered {
            data: FileRegistered {
                path: file.path,
                size: file.size,
                tool_call_id: tool_call_id.to_owned(),
                thread_id: (thread_id != teamster_protocol::MAIN_THREAD_ID).then(|| thread_id.to_owned()),
            },
        }
    }

    /// A product event that has no part of its own, with the native event as its data.
    pub(super) fn custom(event_type: &'static str, event: &impl Serialize) -> Part {
        Part::Custom { event_type, data: serde_json::to_value(event).unwrap_or(Value::Null) }
    }

    pub(super) fn cost_summary(metrics: Option<&TurnMetrics>) -> Part {
        Part::DataCostSummary {
            data: CostSummary { total_cost_usd: metrics.and_then(|metrics| metrics.total_cost_in_usd), usage: Usage::of(metrics) },
        }
    }

    /// How long the turn took, from its creation to its end (both from the log).
    pub(super) fn latency_summary(started_at: Option<&str>, completed_at: &str) -> Part {
        let parse = teamster_protocol::timestamp::parse;
        let total_ms = started_at
            .and_then(parse)
            .zip(parse(completed_at))
            .map(|(start, end)| u64::try_from((end - start).whole_milliseconds()).unwrap_or(0));
        Part::DataLatencySummary {
            data: LatencySummary { total_ms, started_at: started_at.map(str::to_owned), completed_at: completed_at.to_owned() },
        }
    }
}

/// Token usage in the AI SDK's names; `totalTokens` is prompt plus completion, the cache
/// figures are reported apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    /// The usage of a turn's or a thread's metrics (zero without them).
    pub(super) fn of(metrics: Option<&TurnMetrics>) -> Usage {
        let Some(metrics) = metrics else { return Usage::default() };
        Usage {
            prompt_tokens: metrics.total_input_tokens,
            completion_tokens: metrics.total_output_tokens,
            cache_read_input_tokens: metrics.total_cache_read_tokens.unwrap_or(0),
            cache_creation_input_tokens: metrics.total_cache_write_tokens.unwrap_or(0),
            total_tokens: metrics.total_input_tokens + metrics.total_output_tokens,
        }
    }
}

/// A file the sandbox made available: its `path` in the sandbox (what the download routes
/// take), its `size`, and the call that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileRegistered {
    pub path: String,
    pub size: u64,
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentUsage {
    pub agent_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub thread_id: String,
    pub usage: Usage,
}

/// What waits for the host: `kind` is `tool`, `question` or `plan`; `target` the tool's name
/// (for a plan, the plan's id); `payload` the call's arguments; `threadId` the thread to answer in.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    pub id: String,
    pub kind: &'static str,
    pub target: String,
    pub payload: Value,
    pub thread_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApprovalDecision {
    pub id: String,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The answer to a question (a Teamster extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

/// The Rust `ApprovalOutcome` shape: `{"outcome": "approve"}` or `{"outcome": "reject"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Outcome {
    Approve,
    Reject,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatusChange {
    pub plan_id: String,
    pub from: &'static str,
    pub to: &'static str,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostSummary {
    /// Absent when the model has no configured price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    pub usage: Usage,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencySummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub completed_at: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    pub message: String,
    pub code: &'static str,
}
