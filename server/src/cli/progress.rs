//! A progress bar on stderr for reads that take more than a second.

use std::io::Read;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a read runs before the bar appears: quick reads print nothing.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Wraps a reader and shows a byte-count bar once reading passes one second.
pub(crate) struct ProgressReader<R> {
    inner: R,
    bar: ProgressBar,
    started: Instant,
    shown: bool,
}

impl<R: Read> ProgressReader<R> {
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
        ProgressReader { inner, bar, started: Instant::now(), shown: false }
    }

    /// Remove the bar from the terminal.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        if !self.shown && self.started.elapsed() > SHOW_AFTER {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        Ok(n)
    }
}
