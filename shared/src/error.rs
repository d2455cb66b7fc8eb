//! The crate's errors: the snapshot reader's ([`ReadError`], with the
//! errors its input stream carries inside `io::Error`, a decompressor's
//! failure or a stop, turned into them) and a view's ([`ViewError`]).
//!
//! Every error says what was wrong and where: a byte offset into the
//! (decompressed) pickle stream, and for schema errors the field path such as
//! `segments[3].blocks[0].size`.

use thiserror::Error;

/// Why a snapshot could not be read.
///
/// [`ReadError::kind`] gives a stable, machine-readable name for each variant;
/// tests and the server's API rely on those names.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The stream ended before the pickle's STOP opcode.
    #[error("truncated input: the pickle stream ends at byte {offset} while {context}")]
    Truncated {
        /// Bytes of pickle stream read before the end.
        offset: u64,
        /// What the reader was in the middle of.
        context: &'static str,
    },
    /// An opcode that would import or call Python code. Never executed.
    #[error(
        "refused pickle opcode {name} (0x{opcode:02x}) at byte {offset}: a memory snapshot holds only plain \
         data, and vramscope never imports or calls anything named in a pickle"
    )]
    ForbiddenOpcode {
        /// The opcode byte.
        opcode: u8,
        /// Its name in Python's `pickletools`.
        name: &'static str,
        /// Where it stands in the stream.
        offset: u64,
    },
    /// A byte that is no pickle opcode this reader knows.
    #[error("unknown or unsupported pickle opcode 0x{opcode:02x} at byte {offset}{hint}")]
    UnknownOpcode {
        /// The opcode byte.
        opcode: u8,
        /// Where it stands in the stream.
        offset: u64,
        /// Extra explanation, may be empty.
        hint: &'static str,
    },
    /// A valid pickle that holds something other than a memory snapshot.
    #[error("not a PyTorch memory snapshot: {0}")]
    NotASnapshot(String),
    /// A field holds a value of the wrong type or out of range.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        /// Field path, e.g. `segments[2].total_size`.
        path: String,
        /// What the schema wants.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// Reading would take more memory than the configured budget.
    #[error(
        "memory budget exceeded at byte {offset}: {what} would bring the reader to {needed} bytes, \
         over the budget of {budget} bytes (raise it with ReadOptions::memory_budget / --memory-budget)"
    )]
    MemoryBudget {
        /// What was being allocated.
        what: String,
        /// Bytes the reader would hold.
        needed: u64,
        /// The budget.
        budget: u64,
        /// Where in the stream.
        offset: u64,
    },
    /// Nesting beyond what any snapshot has.
    #[error("{path}: nesting deeper than {limit} levels")]
    TooDeep {
        /// Field path where the limit was hit.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// A container that contains itself where the schema needs a tree.
    #[error("{path}: a container that contains itself (a reference cycle through the pickle memo)")]
    Cycle {
        /// Field path where the cycle closes.
        path: String,
    },
    /// A malformed pickle: stack underflow, missing MARK, bad memo index...
    #[error("malformed pickle at byte {offset}: {message}")]
    BadPickle {
        /// Where the problem was found.
        offset: u64,
        /// What was wrong.
        message: String,
    },
    /// A gzip or zstd stream that could not be decompressed.
    #[error("bad {format} compression: {message}")]
    BadCompression {
        /// `gzip` or `zstd`.
        format: &'static str,
        /// The decompressor's message.
        message: String,
    },
    /// A compressed stream that expands more than `ReadOptions::max_expansion`
    /// times: a decompression bomb.
    #[error(
        "{format} stream expands more than {ratio} times ({output} bytes of pickle from the first {input} \
         compressed bytes): refused as a decompression bomb (the limit is ReadOptions::max_expansion)"
    )]
    DecompressionLimit {
        /// `gzip` or `zstd`.
        format: &'static str,
        /// The limit.
        ratio: u32,
        /// Compressed bytes read.
        input: u64,
        /// Pickle bytes they became.
        output: u64,
    },
    /// The caller stopped the reader (`ReadOptions::cancel`): a time limit,
    /// or nobody waiting for the result any more.
    #[error("reading stopped at byte {offset}: cancelled by the caller (a time limit, or nobody waits for it)")]
    Cancelled {
        /// Bytes of pickle stream read before stopping.
        offset: u64,
    },
    /// A file that does not start like a pickle at all (text, a ZIP archive
    /// such as `torch.save` writes, random bytes): said first, with the
    /// reader's own error after. Its kind is that error's, so kinds stay
    /// what they were.
    #[error(
        "not a memory snapshot: {looks_like}; a snapshot is the pickle torch.cuda.memory._dump_snapshot() \
         writes (the reader stopped with: {cause})"
    )]
    Unrecognized {
        /// What the file looks like, in words.
        looks_like: String,
        /// What the pickle reader said.
        cause: Box<ReadError>,
    },
    /// An I/O error from the underlying reader (never from the parser itself).
    #[error("read error at byte {offset}: {source}")]
    Io {
        /// Bytes consumed before the error.
        offset: u64,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl ReadError {
    /// A stable name for the error's kind, used in tests and API responses.
    pub fn kind(&self) -> &'static str {
        match self {
            ReadError::Truncated { .. } => "truncated",
            ReadError::ForbiddenOpcode { .. } => "forbidden_opcode",
            ReadError::UnknownOpcode { .. } => "unknown_opcode",
            ReadError::NotASnapshot(_) => "not_a_snapshot",
            ReadError::WrongType { .. } => "wrong_type",
            ReadError::MemoryBudget { .. } => "memory_budget",
            ReadError::TooDeep { .. } => "too_deep",
            ReadError::Cycle { .. } => "cycle",
            ReadError::BadPickle { .. } => "bad_pickle",
            ReadError::BadCompression { .. } => "bad_compression",
            ReadError::DecompressionLimit { .. } => "decompression_limit",
            ReadError::Cancelled { .. } => "cancelled",
            ReadError::Io { .. } => "io",
            ReadError::Unrecognized { cause, .. } => cause.kind(),
        }
    }
}

/// Why a view could not be answered. The server maps these to 404 and 400.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ViewError {
    /// The device, stack, or axis asked for does not exist.
    #[error("no such {0}")]
    NotFound(String),
    /// The query itself is wrong (an empty window, a row past the end).
    #[error("{0}")]
    BadRequest(String),
}

/// A decompressor failure, carried inside an `io::Error` so the pickle
/// machine's reader can tell it from a plain I/O error.
#[derive(Debug, Error)]
#[error("{format}: {message}")]
pub(crate) struct CompressionFailure {
    /// `gzip` or `zstd`.
    pub(crate) format: &'static str,
    /// The decoder's message.
    pub(crate) message: String,
}

/// Why the guard stopped the stream, carried inside an `io::Error` like
/// [`CompressionFailure`].
#[derive(Debug, Error)]
pub(crate) enum StreamStop {
    /// The caller's cancel flag was set.
    #[error("cancelled at byte {offset}")]
    Cancelled {
        /// Bytes of output produced before it.
        offset: u64,
    },
    /// The stream expanded more than its limit allows.
    #[error("{format} stream expands more than {ratio} times")]
    Expansion {
        /// `gzip` or `zstd`.
        format: &'static str,
        /// The limit: bytes out per byte in.
        ratio: u32,
        /// Compressed bytes read.
        input: u64,
        /// Bytes produced.
        output: u64,
    },
}

/// Turn an I/O error from the input stream into the reader's error (the
/// decompressor's failures and stops travel inside `io::Error`).
pub(crate) fn map_io_error(e: std::io::Error, offset: u64) -> ReadError {
    if let Some(failure) = e.get_ref().and_then(|inner| inner.downcast_ref::<CompressionFailure>()) {
        return ReadError::BadCompression { format: failure.format, message: failure.message.clone() };
    }
    match e.get_ref().and_then(|inner| inner.downcast_ref::<StreamStop>()) {
        Some(StreamStop::Cancelled { offset }) => ReadError::Cancelled { offset: *offset },
        Some(StreamStop::Expansion { format, ratio, input, output }) => {
            ReadError::DecompressionLimit { format, ratio: *ratio, input: *input, output: *output }
        }
        None => ReadError::Io { offset, source: e },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_carrying_a_failure_or_a_stop_become_their_read_errors() {
        let failure = std::io::Error::other(CompressionFailure { format: "zstd", message: "bad frame".into() });
        assert_eq!(map_io_error(failure, 7).kind(), "bad_compression");
        let stop = std::io::Error::other(StreamStop::Cancelled { offset: 9 });
        assert!(matches!(map_io_error(stop, 7), ReadError::Cancelled { offset: 9 }));
        let limit = std::io::Error::other(StreamStop::Expansion { format: "gzip", ratio: 200, input: 1, output: 300 });
        assert_eq!(map_io_error(limit, 7).kind(), "decompression_limit");
        let plain = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert!(matches!(map_io_error(plain, 7), ReadError::Io { offset: 7, .. }));
    }
}
