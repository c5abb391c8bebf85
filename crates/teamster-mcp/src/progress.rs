//! Progress of running calls: the transport ([`Observed`]) hears `notifications/progress` and
//! [`ProgressRoutes`] hands each report to the call whose request carried its token.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ProgressNotificationParam, ProgressToken, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use teamster_tools::ToolProgress;
use tokio::sync::mpsc;

/// Reports kept per running call before the call takes them; more are dropped (progress is
/// advisory, and a call must never wait on its reader).
const QUEUED_PER_CALL: usize = 64;
/// Reports kept for tokens no call has claimed yet: a report can arrive between sending the
/// request and subscribing to its token.
const EARLY_REPORTS: usize = 32;
/// The longest progress message kept, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 1_000;

/// Running calls' progress channels by their request's progress token.
#[derive(Clone, Default)]
pub(crate) struct ProgressRoutes {
    inner: Arc<Mutex<Routes>>,
}

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, mpsc::Sender<ToolProgress>>,
    early: VecDeque<(ProgressToken, ToolProgress)>,
}

impl ProgressRoutes {
    /// Routes `token`'s reports to the returned receiver until the [`Subscription`] is dropped.
    pub(crate) fn subscribe(&self, token: ProgressToken) -> Subscription {
        let (sender, receiver) = mpsc::channel(QUEUED_PER_CALL);
        let mut routes = self.lock();
        let early = std::mem::take(&mut routes.early);
        for (early_token, report) in early {
            if early_token == token {
                let _ = sender.try_send(report);
            } else {
                routes.early.push_back((early_token, report));
            }
        }
        routes.calls.insert(token.clone(), sender);
        Subscription { routes: self.clone(), token, receiver }
    }

    /// Hands a report to its call, or keeps it a little while for a call about to subscribe.
    fn dispatch(&self, param: &ProgressNotificationParam) {
        let Some(report) = report_of(param) else { return };
        let mut routes = self.lock();
        match routes.calls.get(&param.progress_token) {
            // A full queue drops the report: the call is busy and later ones supersede it.
            Some(sender) => {
                let _ = sender.try_send(report);
            }
            None => {
                if routes.early.len() == EARLY_REPORTS {
                    routes.early.pop_front();
                }
                routes.early.push_back((param.progress_token.clone(), report));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A call's progress reports; dropping it stops routing them.
pub(crate) struct Subscription {
    routes: ProgressRoutes,
    token: ProgressToken,
    pub(crate) receiver: mpsc::Receiver<ToolProgress>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.routes.lock().calls.remove(&self.token);
    }
}

/// A report as the tool seam carries it: finite numbers only, the message cut to
/// [`MAX_MESSAGE_CHARS`].
fn report_of(param: &ProgressNotificationParam) -> Option<ToolProgress> {
    if !param.progress.is_finite() {
        return None;
    }
    Some(ToolProgress {
        progress: param.progress,
        total: param.total.filter(|total| total.is_finite()),
        message: param.message.as_ref().map(|message| message.chars().take(MAX_MESSAGE_CHARS).collect()),
    })
}

/// A transport that routes `notifications/progress` as they arrive, before the service sees
/// them: the service handles notifications on tasks of their own, so only here do reports keep
/// their order, and come before the answer that follows them on the wire.
pub(crate) struct Observed<T> {
    inner: T,
    progress: ProgressRoutes,
}

impl<T> Observed<T> {
    pub(crate) fn new(inner: T, progress: &ProgressRoutes) -> Observed<T> {
        Observed { inner, progress: progress.clone() }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observed<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(&mut self, item: TxJsonRpcMessage<RoleClient>) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(progress),
            ..
        })) = &message
        {
            self.progress.dispatch(&progress.params);
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;

    use super::*;

    fn param(token: i64, progress: f64, message: Option<&str>) -> ProgressNotificationParam {
        let mut param = ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), progress);
        param.message = message.map(str::to_owned);
        param
    }

    #[tokio::test]
    async fn reports_reach_their_call_including_those_that_came_first() {
        let routes = ProgressRoutes::default();
        routes.dispatch(&param(1, 1.0, Some("early")));
        routes.dispatch(&param(2, 1.0, Some("someone else's")));
        let mut first = routes.subscribe(ProgressToken(NumberOrString::Number(1)));
        routes.dispatch(&param(1, 2.0, None));
        routes.dispatch(&param(1, f64::NAN, None));
        assert_eq!(first.receiver.recv().await.unwrap().message.as_deref(), Some("early"));
        assert_eq!(first.receiver.recv().await.unwrap().progress, 2.0);
        assert!(first.receiver.try_recv().is_err(), "a report that is not a number is dropped");
        drop(first);
        assert!(routes.lock().calls.is_empty());
        assert_eq!(routes.lock().early.len(), 1, "only the unclaimed report is kept");
    }

    #[test]
    fn unclaimed_and_oversized_reports_are_bounded() {
        let routes = ProgressRoutes::default();
        for token in 0..100 {
            routes.dispatch(&param(token, 1.0, Some(&"x".repeat(5_000))));
        }
        let routes = routes.lock();
        assert_eq!(routes.early.len(), EARLY_REPORTS);
        assert_eq!(routes.early.back().unwrap().1.message.as_ref().unwrap().len(), MAX_MESSAGE_CHARS);
    }
}
