//! Destroying a workspace under running commands. Every command of a sandbox passes its gate
//! and holds it while it runs; [`CommandGates::close`] tells the sandbox's commands to stop,
//! waits until each has, and keeps the gate shut while the workspace is removed, so nothing
//! writes into a workspace being removed and no command starts in one half gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// The gates of a provider's sandboxes, by sandbox id.
#[derive(Debug, Default)]
pub(crate) struct CommandGates {
    gates: Mutex<HashMap<String, Arc<Gate>>>,
}

#[derive(Debug)]
struct Gate {
    /// Held shared by each running command, exclusively while the workspace is destroyed.
    running: Arc<RwLock<()>>,
    /// True while the workspace is being destroyed: its commands stop.
    closing: AtomicBool,
    /// Wakes the running commands when `closing` turns true.
    woken: Notify,
}

/// A command's passage through its sandbox's gate, held while it runs.
pub(crate) struct Pass {
    _running: OwnedRwLockReadGuard<()>,
    gate: Arc<Gate>,
}

impl Pass {
    /// Resolves once the sandbox's workspace is being destroyed: the command must stop.
    pub(crate) async fn closing(&self) {
        loop {
            // Registered before the flag is read, so a close in between still wakes it.
            let woken = self.gate.woken.notified();
            if self.gate.closing.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }
}

/// A shut gate: no command of the sandbox runs until it is dropped.
pub(crate) struct Shut {
    _running: OwnedRwLockWriteGuard<()>,
    gate: Arc<Gate>,
}

impl Drop for Shut {
    fn drop(&mut self) {
        self.gate.closing.store(false, Ordering::Release);
    }
}

impl CommandGates {
    fn gate(&self, sandbox_id: &str) -> Arc<Gate> {
        let mut gates = self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        gates
            .entry(sandbox_id.to_owned())
            .or_insert_with(|| Arc::new(Gate { running: Arc::new(RwLock::new(())), closing: AtomicBool::new(false), woken: Notify::new() }))
            .clone()
    }

    /// Passes the sandbox's gate (waiting while it is shut).
    pub(crate) async fn enter(&self, sandbox_id: &str) -> Pass {
        let gate = self.gate(sandbox_id);
        let running = gate.running.clone().read_owned().await;
        Pass { _running: running, gate }
    }

    /// Tells the sandbox's running commands to stop and waits until they have; the gate stays
    /// shut while the returned guard lives.
    pub(crate) async fn close(&self, sandbox_id: &str) -> Shut {
        let gate = self.gate(sandbox_id);
        gate.closing.store(true, Ordering::Release);
        gate.woken.notify_waiters();
        let running = gate.running.clone().write_owned().await;
        Shut { _running: running, gate }
    }

    /// Forgets the gate of a sandbox that is gone for good (its session was deleted).
    pub(crate) fn forget(&self, sandbox_id: &str) {
        self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(sandbox_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closing_stops_the_running_commands_and_holds_new_ones_until_it_is_done() {
        let gates = Arc::new(CommandGates::default());
        let pass = gates.enter("sbx_a").await;
        let other = gates.enter("sbx_b").await;
        let closer = tokio::spawn({
            let gates = gates.clone();
            async move { gates.close("sbx_a").await }
        });
        // The running command is told to stop; the close waits until it has.
        pass.closing().await;
        assert!(!closer.is_finished());
        drop(pass);
        let shut = closer.await.unwrap();
        // A command of another sandbox is untouched; a new one of this sandbox waits.
        assert!(!other.gate.closing.load(Ordering::Acquire));
        let waiting = tokio::spawn({
            let gates = gates.clone();
            async move { gates.enter("sbx_a").await.gate.closing.load(Ordering::Acquire) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(shut);
        assert!(!waiting.await.unwrap(), "after the close the gate is open, not closing");
    }
}
