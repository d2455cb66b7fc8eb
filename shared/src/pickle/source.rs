//! A buffered byte source that knows its offset and never trusts a length it
//! has not seen the bytes for.

use std::io::Read;

use crate::error::ReadError;

const CHUNK: usize = 256 * 1024;

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

    /// Offset of the next byte to be read.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
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

    /// One byte, or `None` at a clean end of stream.
    #[inline]
    pub(crate) fn next_u8(&mut self) -> Result<Option<u8>, ReadError> {
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

    /// Exactly `n` bytes; `context` says what they are for in the error.
    #[inline]
    pub(crate) fn take(&mut self, n: usize, context: &'static str) -> Result<&[u8], ReadError> {
        if self.end - self.pos < n && !self.fill(n)? {
            return Err(ReadError::Truncated { offset: self.base + self.end as u64, context });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
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

    /// The buffered bytes from the read position on: at least `want` of
    /// them unless the stream ends first. Nothing is consumed.
    #[inline]
    pub(crate) fn window(&mut self, want: usize) -> Result<&[u8], ReadError> {
        if self.end - self.pos < want {
            self.fill(want)?;
        }
        Ok(&self.buf[self.pos..self.end])
    }

    /// Consume `n` bytes of those [`Source::window`] returned.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.pos);
        self.pos = (self.pos + n).min(self.end);
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

fn io_error(e: std::io::Error, offset: u64) -> ReadError {
    crate::error::map_io_error(e, offset)
}
