//! The machine's bytes: one [`Source`] that knows its offset and never
//! trusts a length it has not seen the bytes for, over one of three
//! [`Backing`]s: a buffered [`Read`] ([`Streamed`]), bytes held in memory
//! and read in place ([`Held`]), or owned chunks from a [`ChunkFeed`] (a
//! reading thread's buffers), read in place ([`Chunked`]).

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::ReadError;

const CHUNK: usize = 256 * 1024;

/// The readable part of a backing's bytes: `bytes()[pos..end]`, the first
/// of them at stream offset `base + pos` (in wrapping arithmetic: a
/// [`Chunked`] window starts inside its first chunk, past its headroom).
#[derive(Default)]
pub(crate) struct Window {
    pos: usize,
    end: usize,
    base: u64,
}

/// Where a [`Source`]'s bytes come from.
pub(crate) trait Backing {
    /// The bytes that [`Window`] indexes.
    fn bytes(&self) -> &[u8];

    /// Make at least `n` bytes readable after `w.pos` (moving the window
    /// as it likes). Returns false at the end of the stream, with the
    /// window's end at the last byte there is.
    fn fill(&mut self, w: &mut Window, n: usize) -> Result<bool, ReadError>;

    /// After a large value, give memory back instead of holding the peak.
    fn shrink(&mut self, _w: &mut Window) {}
}

/// The machine's input: reads through a [`Window`] over a [`Backing`].
pub(crate) struct Source<B> {
    back: B,
    w: Window,
}

impl<B: Backing> Source<B> {
    pub(crate) fn new(back: B) -> Self {
        Source { back, w: Window::default() }
    }

    /// Offset of the next byte to be read.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.w.base.wrapping_add(self.w.pos as u64)
    }

    /// One byte, or `None` at a clean end of stream.
    #[inline]
    pub(crate) fn next_u8(&mut self) -> Result<Option<u8>, ReadError> {
        if self.w.pos >= self.w.end && !self.back.fill(&mut self.w, 1)? {
            return Ok(None);
        }
        let b = self.back.bytes()[self.w.pos];
        self.w.pos += 1;
        Ok(Some(b))
    }

    /// Exactly `n` bytes; `context` says what they are for in the error.
    #[inline]
    pub(crate) fn take(&mut self, n: usize, context: &'static str) -> Result<&[u8], ReadError> {
        if self.w.end - self.w.pos < n && !self.back.fill(&mut self.w, n)? {
            return Err(ReadError::Truncated { offset: self.w.base.wrapping_add(self.w.end as u64), context });
        }
        let start = self.w.pos;
        self.w.pos += n;
        Ok(&self.back.bytes()[start..start + n])
    }

    /// A byte, failing as truncated at the end of the stream.
    #[inline]
    pub(crate) fn u8(&mut self, context: &'static str) -> Result<u8, ReadError> {
        match self.next_u8()? {
            Some(b) => Ok(b),
            None => Err(ReadError::Truncated { offset: self.offset(), context }),
        }
    }

    /// A little-endian unsigned integer of `N` bytes.
    #[inline]
    pub(crate) fn le<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N], ReadError> {
        let bytes = self.take(N, context)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// The readable bytes from the read position on: at least `want` of
    /// them unless the stream ends first. Nothing is consumed.
    #[inline]
    pub(crate) fn window(&mut self, want: usize) -> Result<&[u8], ReadError> {
        if self.w.end - self.w.pos < want {
            self.back.fill(&mut self.w, want)?;
        }
        Ok(&self.back.bytes()[self.w.pos..self.w.end])
    }

    /// Consume `n` bytes of those [`Source::window`] returned.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.w.end - self.w.pos);
        self.w.pos = (self.w.pos + n).min(self.w.end);
    }

    /// A line ending in `\n` (text opcodes of protocol 0), without the newline.
    pub(crate) fn line(&mut self, context: &'static str) -> Result<Vec<u8>, ReadError> {
        let mut out = Vec::new();
        loop {
            let b = self.u8(context)?;
            if b == b'\n' {
                return Ok(out);
            }
            if out.len() > 4096 {
                return Err(ReadError::BadPickle {
                    offset: self.offset(),
                    message: format!("text line for {context} longer than 4096 bytes"),
                });
            }
            out.push(b);
        }
    }

    /// After a large value, give memory back instead of holding the peak.
    pub(crate) fn shrink(&mut self) {
        self.back.shrink(&mut self.w);
    }
}

/// Any [`Read`], through a buffer that grows only as real data arrives.
pub(crate) struct Streamed<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: Read> Streamed<R> {
    pub(crate) fn new(inner: R) -> Self {
        Streamed { inner, buf: vec![0; CHUNK] }
    }
}

impl<R: Read> Backing for Streamed<R> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        &self.buf
    }

    fn fill(&mut self, w: &mut Window, n: usize) -> Result<bool, ReadError> {
        if w.end - w.pos >= n {
            return Ok(true);
        }
        // Slide the unread tail to the front.
        if w.pos > 0 {
            self.buf.copy_within(w.pos..w.end, 0);
            w.base += w.pos as u64;
            w.end -= w.pos;
            w.pos = 0;
        }
        while w.end < n {
            if w.end == self.buf.len() {
                // Grow geometrically, but never beyond what was asked: a claimed
                // 10 GB string in a 1 KB file fails as truncated after 1 KB.
                let new_len = (self.buf.len() * 2).min(n.max(CHUNK));
                self.buf.resize(new_len, 0);
            }
            match self.inner.read(&mut self.buf[w.end..]) {
                Ok(0) => return Ok(false),
                Ok(k) => w.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(crate::error::map_io_error(e, w.base + w.end as u64)),
            }
        }
        Ok(true)
    }

    fn shrink(&mut self, w: &mut Window) {
        if self.buf.len() > 4 * CHUNK && w.end - w.pos <= CHUNK {
            self.buf.copy_within(w.pos..w.end, 0);
            w.base += w.pos as u64;
            w.end -= w.pos;
            w.pos = 0;
            self.buf.truncate(CHUNK);
            self.buf.shrink_to_fit();
        }
    }
}

/// A pickle held in memory, read in place: no copy into a buffer. Every
/// [`CHUNK`] bytes (the granularity of a [`Streamed`] read) it checks the
/// cancel flag and tells the caller how far it has read.
pub(crate) struct Held<'a, F> {
    bytes: &'a [u8],
    cancel: Option<Arc<AtomicBool>>,
    /// Called with the offset below which no byte will be read again.
    consumed: F,
}

impl<'a, F: FnMut(u64)> Held<'a, F> {
    pub(crate) fn new(bytes: &'a [u8], cancel: Option<Arc<AtomicBool>>, consumed: F) -> Self {
        Held { bytes, cancel, consumed }
    }
}

impl<F: FnMut(u64)> Backing for Held<'_, F> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.bytes
    }

    /// The window's end moves a step past what is asked, after the checks.
    #[cold]
    fn fill(&mut self, w: &mut Window, n: usize) -> Result<bool, ReadError> {
        if w.end - w.pos >= n {
            return Ok(true);
        }
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(ReadError::Cancelled { offset: w.pos as u64 });
        }
        (self.consumed)(w.pos as u64);
        let left = self.bytes.len() - w.pos;
        w.end = w.pos + left.min(n.max(CHUNK));
        Ok(left >= n)
    }
}

/// Room left at the front of every chunk a [`ChunkFeed`] hands over. The
/// unread end of the chunk before (a value cut by the chunk's end: a few
/// bytes, mostly) is put there, so a chunk is read where it lies, not
/// copied into a buffer. A value longer than this is put together in a
/// buffer of its own.
pub const CHUNK_HEADROOM: usize = 4096;

/// A byte stream that arrives in owned chunks: a reading thread's buffers,
/// handed over and back instead of copied.
pub trait ChunkFeed {
    /// The next chunk: its bytes are `chunk[CHUNK_HEADROOM..]`, and what
    /// is before them is the reader's to write. `None` at the end of the
    /// stream, and after it.
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>>;

    /// A chunk read to its end, for the feed to fill again.
    fn recycle(&mut self, chunk: Vec<u8>);
}

impl<F: ChunkFeed + ?Sized> ChunkFeed for &mut F {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        (**self).next_chunk()
    }

    fn recycle(&mut self, chunk: Vec<u8>) {
        (**self).recycle(chunk);
    }
}

/// A [`ChunkFeed`]'s chunks, read in place.
pub(crate) struct Chunked<F> {
    feed: F,
    /// The chunk being read, or a value longer than the headroom put
    /// together (`stitched`).
    buf: Vec<u8>,
    stitched: bool,
    ended: bool,
    cancel: Option<Arc<AtomicBool>>,
}

impl<F: ChunkFeed> Chunked<F> {
    pub(crate) fn new(feed: F, cancel: Option<Arc<AtomicBool>>) -> Self {
        Chunked { feed, buf: Vec::new(), stitched: false, ended: false, cancel }
    }
}

impl<F: ChunkFeed> Backing for Chunked<F> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        &self.buf
    }

    fn fill(&mut self, w: &mut Window, n: usize) -> Result<bool, ReadError> {
        while w.end - w.pos < n {
            if self.ended {
                return Ok(false);
            }
            // The stream offset of the first unread byte, which stays put.
            let offset = w.base.wrapping_add(w.pos as u64);
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(ReadError::Cancelled { offset });
            }
            let next = match self.feed.next_chunk() {
                Ok(Some(chunk)) if chunk.len() > CHUNK_HEADROOM => chunk,
                Ok(Some(empty)) => {
                    self.feed.recycle(empty);
                    continue;
                }
                Ok(None) => {
                    self.ended = true;
                    continue;
                }
                Err(e) => return Err(crate::error::map_io_error(e, w.base.wrapping_add(w.end as u64))),
            };
            let tail = w.end - w.pos;
            if tail > CHUNK_HEADROOM {
                // A long value: gathered in a buffer of its own, which
                // grows by the bytes that come (never by a claimed length).
                if self.stitched {
                    self.buf.copy_within(w.pos..w.end, 0);
                    self.buf.truncate(tail);
                } else {
                    let mut joined = Vec::with_capacity(tail + next.len() - CHUNK_HEADROOM);
                    joined.extend_from_slice(&self.buf[w.pos..w.end]);
                    let chunk = std::mem::replace(&mut self.buf, joined);
                    self.feed.recycle(chunk);
                    self.stitched = true;
                }
                self.buf.extend_from_slice(&next[CHUNK_HEADROOM..]);
                self.feed.recycle(next);
                w.pos = 0;
            } else {
                let mut next = next;
                let start = CHUNK_HEADROOM - tail;
                next[start..CHUNK_HEADROOM].copy_from_slice(&self.buf[w.pos..w.end]);
                let spent = std::mem::replace(&mut self.buf, next);
                // A stitched buffer is let go; a chunk goes back.
                if !std::mem::take(&mut self.stitched) && spent.capacity() > 0 {
                    self.feed.recycle(spent);
                }
                w.pos = start;
            }
            w.end = self.buf.len();
            w.base = offset.wrapping_sub(w.pos as u64);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::SliceFeed as Feed;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// Reads of every length, across chunk ends, give the stream's bytes
    /// at the stream's offsets; values longer than the headroom are
    /// gathered whole; the reader holds two chunks at most; the end is a
    /// truncation at the last byte.
    #[test]
    fn chunked_reads_match_the_stream_across_chunk_ends() {
        let bytes = pattern(200_000);
        for sizes in [&[1usize][..], &[3, 4096, 5], &[5000], &[65536, 1, 10_000], &[CHUNK_HEADROOM]] {
            let mut src = Source::new(Chunked::new(Feed::new(bytes.clone(), sizes), None));
            let mut at = 0usize;
            for (i, n) in [1usize, 9, 4095, 4096, 4097, 30_000, 2, 70_000].iter().cycle().enumerate() {
                let n = (*n).min(bytes.len() - at);
                if n == 0 {
                    break;
                }
                assert_eq!(src.offset(), at as u64, "sizes {sizes:?}, read {i}");
                let got = src.take(n, "test").unwrap_or_else(|e| panic!("sizes {sizes:?}, read {i}: {e}"));
                assert!(got == &bytes[at..at + n], "sizes {sizes:?}, read {i} of {n} at {at}");
                at += n;
            }
            assert_eq!(src.offset(), bytes.len() as u64);
            match src.take(1, "the end") {
                Err(ReadError::Truncated { offset, .. }) => assert_eq!(offset, bytes.len() as u64),
                other => panic!("sizes {sizes:?}: past the end gave {:?}", other.map(<[u8]>::len)),
            }
            assert!(src.back.feed.most_out <= 2, "sizes {sizes:?}: {} chunks held", src.back.feed.most_out);
        }
    }

    /// A cancelled read stops before its next chunk, at the offset it had
    /// reached.
    #[test]
    fn chunked_read_stops_when_cancelled() {
        let cancel = Arc::new(AtomicBool::new(false));
        let mut src = Source::new(Chunked::new(Feed::new(pattern(10_000), &[1000]), Some(Arc::clone(&cancel))));
        src.take(1500, "test").expect("reads");
        cancel.store(true, Ordering::Relaxed);
        src.take(400, "test").expect("the chunk already there");
        match src.take(200, "test") {
            Err(ReadError::Cancelled { offset }) => assert_eq!(offset, 1900),
            other => panic!("a cancelled read gave {:?}", other.map(<[u8]>::len)),
        }
    }
}
