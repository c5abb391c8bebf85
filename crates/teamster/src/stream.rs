//! [`AgentStream`]: one run as it happens. It drives the engine's turn loop itself (no task is
//! spawned), translates the turn's events into [`AgentStreamEvent`]s, and ends with the
//! [`AgentResponse`]. Dropping it stops the run.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures_util::Stream;
use futures_util::future::BoxFuture;
use teamster_engine::{EventSink, TurnOutcome, TurnPlan, run_turn};
use teamster_protocol::{Event, MAIN_THREAD_ID, TurnMetrics};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::items::ItemFolder;
use crate::{AgentItem, AgentResponse, Error, Part, Usage};

/// What a run streams: deltas as the model writes, each item once it is complete, the usage
/// of each model call, and finally the whole response.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AgentStreamEvent {
    /// A piece of the answer's text.
    TextDelta(String),
    /// A piece of the model's reasoning.
    ReasoningDelta(String),
    /// A complete item: an assistant message (with its tool calls) or a tool result. The items
    /// are exactly the response's `output`, in order.
    Item(AgentItem),
    /// The tokens one model call used.
    Usage(Usage),
    /// The run's response, the same that [`Agent::run`](crate::Agent::run) returns; always the
    /// last event of a run that succeeds.
    Response(AgentResponse),
}

/// A run in progress; a [`Stream`] of [`AgentStreamEvent`]s that ends after
/// [`AgentStreamEvent::Response`], or after one error. Dropping it stops the run and closes the
/// run session it opened.
///
/// ```
/// use futures_util::StreamExt;
/// use teamster::{Agent, AgentItem, AgentRequest, AgentStreamEvent, Model};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let agent: Agent<()> = Agent::builder("echo", Model::offline()).build()?;
/// let mut stream = agent.run_stream(AgentRequest { input: vec![AgentItem::user("Stream me")], context: () });
/// let mut shown = String::new();
/// while let Some(event) = stream.next().await {
///     match event? {
///         AgentStreamEvent::TextDelta(delta) => shown.push_str(&delta),
///         AgentStreamEvent::Response(response) => assert_eq!(response.text(), shown),
///         _ => {}
///     }
/// }
/// # Ok::<(), teamster::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "a stream does nothing unless polled"]
pub struct AgentStream {
    /// The run: set up, the engine's loop, clean-up. `None` once finished.
    run: Option<BoxFuture<'static, Result<(TurnOutcome, TurnMetrics), Error>>>,
    result: Option<Result<(TurnOutcome, TurnMetrics), Error>>,
    events: mpsc::UnboundedReceiver<SinkEvent>,
    ready: VecDeque<AgentStreamEvent>,
    folder: ItemFolder,
    output: Vec<AgentItem>,
    done: bool,
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("AgentStream").field("done", &self.done).finish_non_exhaustive()
    }
}

/// What the engine hands the stream.
enum SinkEvent {
    Streamed(Event),
    Recorded(Event),
}

/// Where a run's turn sends its events: a channel to its [`AgentStream`]. Only what the stream
/// translates is sent.
pub(crate) struct RunSink {
    sender: mpsc::UnboundedSender<SinkEvent>,
    sequence: AtomicU64,
}

impl EventSink for RunSink {
    fn emit(&self, event: &Event) -> u64 {
        if let Event::ModelMessageDelta(delta) = event
            && delta.thread_id == MAIN_THREAD_ID
        {
            // The stream may be gone already; then nobody listens.
            let _ = self.sender.send(SinkEvent::Streamed(event.clone()));
        }
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn record(&self, _sequence: u64, event: &Event) {
        if matches!(event, Event::ModelMessage(_) | Event::ToolResponse(_)) {
            let _ = self.sender.send(SinkEvent::Recorded(event.clone()));
        }
    }
}

/// Runs a planned turn to its end, with a cancellation token nobody fires: dropping the
/// future is how a run stops.
pub(crate) async fn run_plan(plan: TurnPlan, sink: RunSink) -> (TurnOutcome, TurnMetrics) {
    run_turn(plan, &sink, &CancellationToken::new()).await
}

impl AgentStream {
    /// A stream over the run `start` makes from the sink it is given.
    pub(crate) fn new(
        start: impl FnOnce(RunSink) -> BoxFuture<'static, Result<(TurnOutcome, TurnMetrics), Error>>,
    ) -> AgentStream {
        let (sender, events) = mpsc::unbounded_channel();
        let sink = RunSink { sender, sequence: AtomicU64::new(0) };
        AgentStream {
            run: Some(start(sink)),
            result: None,
            events,
            ready: VecDeque::new(),
            folder: ItemFolder::default(),
            output: Vec::new(),
            done: false,
        }
    }

    /// Runs to the end and returns the response, dropping the events on the way.
    pub(crate) async fn response(mut self) -> Result<AgentResponse, Error> {
        use futures_util::StreamExt;
        while let Some(event) = self.next().await {
            if let AgentStreamEvent::Response(response) = event? {
                return Ok(response);
            }
        }
        Err(Error::Run("the run ended without a response".to_owned()))
    }

    fn translate(&mut self, event: SinkEvent) {
        match event {
            SinkEvent::Streamed(Event::ModelMessageDelta(delta)) => {
                if let Some(reasoning) = delta.reasoning_content.filter(|text| !text.is_empty()) {
                    self.ready.push_back(AgentStreamEvent::ReasoningDelta(reasoning));
                }
                if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                    self.ready.push_back(AgentStreamEvent::TextDelta(text));
                }
            }
            SinkEvent::Recorded(event) => {
                if let Some(item) = self.folder.item(&event) {
                    self.output.push(item.clone());
                    self.ready.push_back(AgentStreamEvent::Item(item));
                }
                if let Event::ModelMessage(message) = &event
                    && message.thread_id == MAIN_THREAD_ID
                    && let Some(usage) = &message.usage
                {
                    self.ready.push_back(AgentStreamEvent::Usage(Usage {
                        input_tokens: usage.input_tokens,
                        output_tokens: usage.output_tokens,
                    }));
                }
            }
            SinkEvent::Streamed(_) => {}
        }
    }

    /// The last event: the response, or why there is none.
    fn finish(&mut self) -> Result<AgentStreamEvent, Error> {
        let (outcome, metrics) = self.result.take().unwrap_or_else(|| Err(Error::Run("the run stopped".to_owned())))?;
        match outcome {
            TurnOutcome::Done { required_actions, .. } if !required_actions.is_empty() => Err(Error::NeedsHuman),
            TurnOutcome::Done { .. } => {
                let content = self
                    .output
                    .iter()
                    .rev()
                    .find_map(|item| match item {
                        AgentItem::Assistant { content } => Some(content.clone()),
                        _ => None,
                    })
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|part| !matches!(part, Part::ToolCall { .. }))
                    .collect::<Vec<Part>>();
                Ok(AgentStreamEvent::Response(AgentResponse {
                    output: std::mem::take(&mut self.output),
                    content,
                    usage: Usage {
                        input_tokens: metrics.total_input_tokens,
                        output_tokens: metrics.total_output_tokens,
                    },
                }))
            }
            TurnOutcome::Failed { message } => Err(Error::Run(message)),
            TurnOutcome::Interrupted => Err(Error::Run("the run was interrupted".to_owned())),
        }
    }
}

impl Stream for AgentStream {
    type Item = Result<AgentStreamEvent, Error>;

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(run) = &mut this.run
                && let Poll::Ready(result) = run.as_mut().poll(context)
            {
                this.result = Some(result);
                // Dropping the finished run drops its sink, which closes the channel.
                this.run = None;
            }
            match this.events.poll_recv(context) {
                Poll::Ready(Some(event)) => this.translate(event),
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(Some(this.finish()));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
