//! Detect gzip and zstd by their magic bytes and decompress as a stream,
//! under the reader's limits: how far a compressed stream may expand, and a
//! flag that stops reading from another thread (a deadline, or nobody
//! waiting for the result any more).

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{CompressionFailure, ReadError, StreamStop};

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// What bounds the stream besides the memory budget.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamLimits {
    /// Most bytes of pickle per compressed byte (see `ReadOptions::max_expansion`).
    pub(crate) max_expansion: Option<u32>,
    /// Stop reading when set.
    pub(crate) cancel: Option<Arc<AtomicBool>>,
}

/// Output a compressed stream may produce before the ratio applies: the
/// first block of a decoder can expand far more than the stream as a whole.
const EXPANSION_SLACK: u64 = 16 << 20;

/// Compression detected from the file's magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// A plain pickle.
    None,
    /// gzip (`1f 8b`).
    Gzip,
    /// zstd (`28 b5 2f fd`).
    Zstd,
}

/// Counts the bytes read from the raw (compressed) input.
struct Counting<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// Sits between the decompressor and the pickle machine: checks the cancel
/// flag on every read (the machine reads 256 KiB at a time) and the
/// expansion ratio of compressed input.
struct Guard<'a> {
    inner: Box<dyn Read + 'a>,
    format: &'static str,
    raw: Rc<Cell<u64>>,
    output: u64,
    limits: StreamLimits,
}

impl Read for Guard<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.limits.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(std::io::Error::other(StreamStop::Cancelled { offset: self.output }));
        }
        let n = self.inner.read(buf)?;
        self.output += n as u64;
        if let Some(ratio) = self.limits.max_expansion {
            let input = self.raw.get();
            if self.output > input.saturating_mul(ratio as u64).saturating_add(EXPANSION_SLACK) {
                return Err(std::io::Error::other(StreamStop::Expansion {
                    format: self.format,
                    ratio,
                    input,
                    output: self.output,
                }));
            }
        }
        Ok(n)
    }
}

/// Marks every error of a decompressor as a compression failure.
struct Decompressing<R> {
    inner: R,
    format: &'static str,
}

impl<R: Read> Read for Decompressing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                e
            } else {
                std::io::Error::other(CompressionFailure { format: self.format, message: e.to_string() })
            }
        })
    }
}

/// The compression a stream's first bytes name.
pub(crate) fn detect(head: &[u8]) -> Compression {
    if head.starts_with(&GZIP_MAGIC) {
        Compression::Gzip
    } else if head.starts_with(&ZSTD_MAGIC) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// Wrap `input` in the decompressor its first bytes call for, under `limits`.
pub(crate) fn open<'a, R: Read + 'a>(
    input: R,
    limits: StreamLimits,
) -> Result<(Box<dyn Read + 'a>, Compression), ReadError> {
    let raw = Rc::new(Cell::new(0));
    let counted = Counting { inner: input, read: Rc::clone(&raw) };
    let mut buffered = BufReader::with_capacity(64 * 1024, counted);
    let head = buffered.fill_buf().map_err(|e| ReadError::Io { offset: 0, source: e })?;
    let (inner, format, compression): (Box<dyn Read + 'a>, _, _) = match detect(head) {
        Compression::Gzip => {
            let decoder = flate2::read::MultiGzDecoder::new(buffered);
            (Box::new(Decompressing { inner: decoder, format: "gzip" }), "gzip", Compression::Gzip)
        }
        Compression::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(buffered)
                .map_err(|e| ReadError::BadCompression { format: "zstd", message: e.to_string() })?;
            (Box::new(Decompressing { inner: decoder, format: "zstd" }), "zstd", Compression::Zstd)
        }
        Compression::None => {
            // Plain pickle: no ratio to watch, only the cancel flag.
            let limits = StreamLimits { max_expansion: None, ..limits };
            return Ok((
                Box::new(Guard { inner: Box::new(buffered), format: "", raw, output: 0, limits }),
                Compression::None,
            ));
        }
    };
    Ok((Box::new(Guard { inner, format, raw, output: 0, limits }), compression))
}
