//! A running command's output relayed as it comes: the pieces its streams' readers keep (see
//! `output.rs`) are gathered per stream and handed on at most every [`FLUSH_EVERY`], or once
//! [`FLUSH_BYTES`] have gathered, cut at character boundaries. A command printing a byte at a
//! time makes a few reports a second, not one per byte.

use std::future::Future;
use std::time::Duration;

use teamster_tools::{OutputStream, ProgressSink};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::output::Tap;

/// The longest gathered output waits before it is handed on.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Gathered output handed on at once.
const FLUSH_BYTES: usize = 16 * 1024;

/// Gathers a command's output for `output` while the command runs.
pub(crate) struct OutputRelay<'a> {
    output: &'a dyn ProgressSink,
    receiver: mpsc::UnboundedReceiver<(OutputStream, Vec<u8>)>,
    /// What each stream printed and was not handed on yet: stdout, then stderr.
    pending: [(OutputStream, Vec<u8>); 2],
    /// When the gathered output is due, once some is.
    due: Option<Instant>,
    /// Whether every reader has ended.
    closed: bool,
}

impl<'a> OutputRelay<'a> {
    /// A relay to `output`, and the taps its streams' readers send to.
    pub(crate) fn new(output: &'a dyn ProgressSink) -> (OutputRelay<'a>, Tap, Tap) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let relay = OutputRelay {
            output,
            receiver,
            pending: [(OutputStream::Stdout, Vec::new()), (OutputStream::Stderr, Vec::new())],
            due: None,
            closed: false,
        };
        (relay, (OutputStream::Stdout, sender.clone()), (OutputStream::Stderr, sender))
    }

    /// Relays the output while `until` runs, and answers what it answers.
    pub(crate) async fn during<T>(&mut self, until: impl Future<Output = T>) -> T {
        tokio::pin!(until);
        loop {
            let due = self.due;
            tokio::select! {
                biased;
                value = &mut until => return value,
                piece = self.receiver.recv(), if !self.closed => match piece {
                    Some((stream, bytes)) => self.add(stream, &bytes),
                    None => self.closed = true,
                },
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => self.flush(false),
            }
        }
    }

    /// Hands on everything left, once the readers have ended.
    pub(crate) fn finish(mut self) {
        while let Ok((stream, bytes)) = self.receiver.try_recv() {
            self.add(stream, &bytes);
        }
        self.flush(true);
    }

    fn add(&mut self, stream: OutputStream, bytes: &[u8]) {
        let index = usize::from(stream == OutputStream::Stderr);
        self.pending[index].1.extend_from_slice(bytes);
        if self.pending[index].1.len() >= FLUSH_BYTES {
            self.flush(false);
        } else if self.due.is_none() {
            self.due = Some(Instant::now() + FLUSH_EVERY);
        }
    }

    /// Hands on what each stream gathered: up to its last whole character, or all of it.
    fn flush(&mut self, all: bool) {
        self.due = None;
        for (stream, gathered) in &mut self.pending {
            let cut = if all { gathered.len() } else { whole_characters(gathered) };
            if cut == 0 {
                continue;
            }
            self.output.output(*stream, &String::from_utf8_lossy(&gathered[..cut]));
            gathered.drain(..cut);
        }
    }
}

/// How many leading bytes of `bytes` end at a character boundary: all of them but a character
/// cut short at the end (bytes that are not UTF-8 at all are handed on, replaced).
fn whole_characters(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use teamster_tools::ToolProgress;

    use super::*;

    #[derive(Default)]
    struct Heard(Mutex<Vec<(OutputStream, String)>>);

    impl ProgressSink for Heard {
        fn report(&self, _progress: ToolProgress) {}

        fn output(&self, stream: OutputStream, text: &str) {
            self.0.lock().unwrap().push((stream, text.to_owned()));
        }
    }

    impl Heard {
        fn count(&self) -> usize {
            self.0.lock().unwrap().len()
        }

        /// Waits (while the relay runs) until `count` pieces were heard.
        async fn until(&self, count: usize) {
            while self.count() < count {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    #[tokio::test]
    async fn output_is_gathered_per_stream_cut_at_characters_and_handed_on_when_due() {
        let heard = Heard::default();
        let (mut relay, out, err) = OutputRelay::new(&heard);
        let euro = "€".as_bytes();
        let writer = async {
            for byte in b"hello " {
                out.1.send((out.0, vec![*byte])).unwrap();
            }
            // A character split over two pieces waits for its end.
            out.1.send((out.0, euro[..1].to_vec())).unwrap();
            err.1.send((err.0, b"warn".to_vec())).unwrap();
            // Handed on when due, without the half character.
            heard.until(2).await;
            out.1.send((out.0, euro[1..].to_vec())).unwrap();
            heard.until(3).await;
            // Much at once is handed on at once.
            out.1.send((out.0, vec![b'x'; FLUSH_BYTES])).unwrap();
            heard.until(4).await;
        };
        tokio::time::timeout(Duration::from_secs(10), relay.during(writer)).await.expect("every piece was handed on");
        relay.finish();
        let heard = heard.0.into_inner().unwrap();
        assert_eq!(
            heard,
            vec![
                (OutputStream::Stdout, "hello ".to_owned()),
                (OutputStream::Stderr, "warn".to_owned()),
                (OutputStream::Stdout, "€".to_owned()),
                (OutputStream::Stdout, "x".repeat(FLUSH_BYTES)),
            ]
        );
    }
}
