//! A progress bar on stderr for reads that take more than a second.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vramscope_shared::pickle::{CHUNK_HEADROOM, ChunkFeed};

/// How long a read runs before the bar appears: quick reads print nothing.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Wraps a chunk feed and shows a byte-count bar once reading passes one second.
pub(crate) struct ProgressFeed<R> {
    inner: R,
    bar: ProgressBar,
    started: Instant,
    shown: bool,
}

impl<R: ChunkFeed> ProgressFeed<R> {
    /// `total` is the file size, `label` the file name shown beside the bar.
    pub(crate) fn new(inner: R, total: u64, label: &str) -> Self {
        // A pipe or FIFO has no size: show bytes read and speed, no bar.
        let (length, template) = if total > 0 {
            (Some(total), "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})")
        } else {
            (None, "{msg} {spinner} {bytes} read ({bytes_per_sec})")
        };
        let bar = ProgressBar::with_draw_target(length, ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template(template)
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_message(label.to_owned());
        ProgressFeed { inner, bar, started: Instant::now(), shown: false }
    }

    /// Remove the bar from the terminal.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl<R: ChunkFeed> ChunkFeed for ProgressFeed<R> {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let chunk = self.inner.next_chunk()?;
        self.bar.inc(chunk.as_ref().map_or(0, |c| c.len().saturating_sub(CHUNK_HEADROOM)) as u64);
        if !self.shown && self.started.elapsed() > SHOW_AFTER {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        Ok(chunk)
    }

    fn recycle(&mut self, chunk: Vec<u8>) {
        self.inner.recycle(chunk);
    }
}
