//! Detect gzip and zstd by their magic bytes and decompress as a stream.

use std::io::{BufRead, BufReader, Read};

use super::model::Compression;
use crate::error::ReadError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A decompressor failure, carried inside an `io::Error` so the pickle
/// machine's reader can tell it from a plain I/O error.
#[derive(Debug)]
pub(crate) struct CompressionFailure {
    pub(crate) format: &'static str,
    pub(crate) message: String,
}

impl std::fmt::Display for CompressionFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.format, self.message)
    }
}

impl std::error::Error for CompressionFailure {}

/// Turn an I/O error from the input stream into the reader's error.
pub(crate) fn map_io_error(e: std::io::Error, offset: u64) -> ReadError {
    if let Some(failure) = e.get_ref().and_then(|inner| inner.downcast_ref::<CompressionFailure>()) {
        return ReadError::BadCompression { format: failure.format, message: failure.message.clone() };
    }
    ReadError::Io { offset, source: e }
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

/// Wrap `input` in the decompressor its first bytes call for.
pub(crate) fn open<'a, R: Read + 'a>(input: R) -> Result<(Box<dyn Read + 'a>, Compression), ReadError> {
    let mut buffered = BufReader::with_capacity(64 * 1024, input);
    let head = buffered.fill_buf().map_err(|e| ReadError::Io { offset: 0, source: e })?;
    if head.starts_with(&GZIP_MAGIC) {
        let decoder = flate2::read::MultiGzDecoder::new(buffered);
        return Ok((Box::new(Decompressing { inner: decoder, format: "gzip" }), Compression::Gzip));
    }
    if head.starts_with(&ZSTD_MAGIC) {
        let decoder = ruzstd::decoding::StreamingDecoder::new(buffered)
            .map_err(|e| ReadError::BadCompression { format: "zstd", message: e.to_string() })?;
        return Ok((Box::new(Decompressing { inner: decoder, format: "zstd" }), Compression::Zstd));
    }
    Ok((Box::new(buffered), Compression::None))
}
