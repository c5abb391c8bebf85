//! Capturing a command's output up to a limit, reading (and counting) the rest so the command
//! never blocks on a full pipe.

use teamster_tools::OutputStream;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// Where the kept bytes of a stream go as they are read, tagged with their stream.
pub(crate) type Tap = (OutputStream, mpsc::UnboundedSender<(OutputStream, Vec<u8>)>);

/// What was captured of one stream.
#[derive(Debug, Default)]
pub struct Captured {
    pub kept: Vec<u8>,
    pub dropped: u64,
}

impl Captured {
    /// The kept bytes as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }
}

/// Reads `reader` to its end, keeping the first `limit` bytes.
pub async fn capture(reader: impl AsyncRead + Unpin, limit: usize) -> Captured {
    capture_tapped(reader, limit, None).await
}

/// Like [`capture`], sending each piece of the kept bytes to `tap` as it is read.
pub(crate) async fn capture_tapped(mut reader: impl AsyncRead + Unpin, limit: usize, tap: Option<Tap>) -> Captured {
    let mut captured = Captured::default();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return captured,
            Ok(read) => read,
        };
        let room = limit.saturating_sub(captured.kept.len());
        let kept = read.min(room);
        captured.kept.extend_from_slice(&buffer[..kept]);
        if let Some((stream, sender)) = &tap
            && kept > 0
        {
            let _ = sender.send((*stream, buffer[..kept].to_vec()));
        }
        captured.dropped += (read - kept) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_first_bytes_and_counts_the_rest() {
        let input = vec![b'x'; 50_000];
        let captured = capture(&input[..], 1000).await;
        assert_eq!((captured.kept.len(), captured.dropped), (1000, 49_000));
        let captured = capture(&b"short"[..], 1000).await;
        assert_eq!((captured.text(), captured.dropped), ("short".to_owned(), 0));
    }
}
