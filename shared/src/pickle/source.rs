//! The machine's bytes: a buffered [`Read`] ([`Source`]) or a slice read in
//! place ([`SliceSource`]), behind one trait ([`ByteSource`]). Both know
//! their offset and never trust a length they have not seen the bytes for.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::ReadError;

const CHUNK: usize = 256 * 1024;

/// What the pickle machine reads its opcodes from.
pub(crate) trait ByteSource {
    /// Offset of the next byte to be read.
    fn offset(&self) -> u64;

    /// One byte, or `None` at a clean end of stream.
    fn next_u8(&mut self) -> Result<Option<u8>, ReadError>;

    /// Exactly `n` bytes; `context` says what they are for in the error.
    fn take(&mut self, n: usize, context: &'static str) -> Result<&[u8], ReadError>;

    /// The bytes from the read position on: at least `want` of them unless
    /// the stream ends first. Nothing is consumed.
    fn window(&mut self, want: usize) -> Result<&[u8], ReadError>;

    /// Consume `n` bytes of those [`ByteSource::window`] returned.
    fn advance(&mut self, n: usize);

    /// After a large value, give memory back instead of holding the peak.
    fn shrink(&mut self);

    /// A byte, failing as truncated at the end of the stream.
    #[inline]
    fn u8(&mut self, context: &'static str) -> Result<u8, ReadError> {
        match self.next_u8()? {
            Some(b) => Ok(b),
            None => Err(ReadError::Truncated { offset: self.offset(), context }),
        }
    }

    /// A little-endian unsigned integer of `N` bytes.
    #[inline]
    fn le<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N], ReadError> {
        let bytes = self.take(N, context)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// A line ending in `\n` (text opcodes of protocol 0), without the newline.
    fn line(&mut self, context: &'static str) -> Result<Vec<u8>, ReadError> {
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
}

/// Buffered reading over any [`Read`], tracking the stream offset.
pub(crate) struct Source<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
}

impl<R: Read> Source<R> {
    pub(crate) fn new(inner: R) -> Self {
        Source { inner, buf: vec![0; CHUNK], pos: 0, end: 0, base: 0 }
    }

    /// Read into the buffer until `n` bytes are available after `pos`, growing
    /// the buffer only as real data arrives. Returns false at end of stream.
    fn fill(&mut self, n: usize) -> Result<bool, ReadError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        // Slide the unread tail to the front.
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        while self.end < n {
            if self.end == self.buf.len() {
                // Grow geometrically, but never beyond what was asked: a claimed
                // 10 GB string in a 1 KB file fails as truncated after 1 KB.
                let new_len = (self.buf.len() * 2).min(n.max(CHUNK));
                self.buf.resize(new_len, 0);
            }
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e, self.base + self.end as u64)),
            }
        }
        Ok(true)
    }

    /// Shrink the buffer after a large value, once little of it is unread.
    fn shrink_buffer(&mut self) {
        if self.buf.len() > 4 * CHUNK && self.end - self.pos <= CHUNK {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
            self.buf.truncate(CHUNK);
            self.buf.shrink_to_fit();
        }
    }
}

impl<R: Read> ByteSource for Source<R> {
    #[inline]
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    #[inline]
    fn next_u8(&mut self) -> Result<Option<u8>, ReadError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(Some(b));
        }
        if !self.fill(1)? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    #[inline]
    fn take(&mut self, n: usize, context: &'static str) -> Result<&[u8], ReadError> {
        if self.end - self.pos < n && !self.fill(n)? {
            return Err(ReadError::Truncated { offset: self.base + self.end as u64, context });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
    }

    #[inline]
    fn window(&mut self, want: usize) -> Result<&[u8], ReadError> {
        if self.end - self.pos < want {
            self.fill(want)?;
        }
        Ok(&self.buf[self.pos..self.end])
    }

    #[inline]
    fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.pos);
        self.pos = (self.pos + n).min(self.end);
    }

    fn shrink(&mut self) {
        self.shrink_buffer();
    }
}

/// Bytes a [`SliceSource`] lets the machine read between two calls of its
/// `consumed` callback (and two looks at the cancel flag): the same
/// granularity as a [`Source`]'s reads.
const SLICE_STEP: usize = CHUNK;

/// A pickle held in memory, read in place: no copy into a buffer. Every
/// [`SLICE_STEP`] bytes it checks the cancel flag and tells the caller how
/// far it has read, as [`Source`] does on each read of its input.
pub(crate) struct SliceSource<'a, F> {
    bytes: &'a [u8],
    pos: usize,
    /// How far the machine may read before the next check (`<= bytes.len()`).
    end: usize,
    cancel: Option<Arc<AtomicBool>>,
    /// Called with the offset below which no byte will be read again.
    consumed: F,
}

impl<'a, F: FnMut(u64)> SliceSource<'a, F> {
    pub(crate) fn new(bytes: &'a [u8], cancel: Option<Arc<AtomicBool>>, consumed: F) -> Self {
        SliceSource { bytes, pos: 0, end: 0, cancel, consumed }
    }

    /// Let the machine read at least `n` bytes past `pos` (or to the end),
    /// after the checks. Returns false when fewer than `n` remain.
    #[cold]
    fn fill(&mut self, n: usize) -> Result<bool, ReadError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(ReadError::Cancelled { offset: self.pos as u64 });
        }
        (self.consumed)(self.pos as u64);
        let left = self.bytes.len() - self.pos;
        self.end = self.pos + left.min(n.max(SLICE_STEP));
        Ok(left >= n)
    }
}

impl<F: FnMut(u64)> ByteSource for SliceSource<'_, F> {
    #[inline]
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    #[inline]
    fn next_u8(&mut self) -> Result<Option<u8>, ReadError> {
        if self.pos >= self.end && !self.fill(1)? {
            return Ok(None);
        }
        let b = self.bytes[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    #[inline]
    fn take(&mut self, n: usize, context: &'static str) -> Result<&[u8], ReadError> {
        if self.end - self.pos < n && !self.fill(n)? {
            return Err(ReadError::Truncated { offset: self.end as u64, context });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.bytes[start..start + n])
    }

    #[inline]
    fn window(&mut self, want: usize) -> Result<&[u8], ReadError> {
        if self.end - self.pos < want {
            self.fill(want)?;
        }
        Ok(&self.bytes[self.pos..self.end])
    }

    #[inline]
    fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.pos);
        self.pos = (self.pos + n).min(self.end);
    }

    /// Nothing is buffered.
    fn shrink(&mut self) {}
}

fn io_error(e: std::io::Error, offset: u64) -> ReadError {
    crate::error::map_io_error(e, offset)
}
