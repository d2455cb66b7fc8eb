//! Reading a snapshot file from the command line: the one `--memory-budget`
//! argument every reading subcommand takes, and the read itself, with a
//! progress bar for slow reads.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use anyhow::{Context, anyhow};
use clap::Args;
use vramscope_shared::pickle::{CHUNK_HEADROOM, ChunkFeed};
use vramscope_shared::{ReadOptions, Snapshot, read_snapshot, read_snapshot_chunks};

use super::Failure;
use super::progress::ProgressFeed;

/// The reader's memory budget, flattened into each subcommand's arguments.
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct MemoryBudget {
    /// Most memory the reader may use, in bytes (guards against hostile files).
    #[arg(long = "memory-budget", default_value_t = ReadOptions::default().memory_budget)]
    pub(crate) memory_budget: u64,
}

impl MemoryBudget {
    /// The reader's options under this budget.
    pub(crate) fn options(self) -> ReadOptions {
        ReadOptions::with_budget(self.memory_budget)
    }
}

/// Open and read a snapshot file, with a progress bar for slow reads; `-`
/// reads standard input.
pub(crate) fn load(path: &Path, budget: MemoryBudget) -> Result<Snapshot, Failure> {
    if path.as_os_str() == "-" {
        let mut stdin = std::io::stdin().lock();
        return read_snapshot(BufReader::with_capacity(1 << 20, &mut stdin), &budget.options())
            .map_err(|e| Failure::BadInput(anyhow!("{e} (standard input)")));
    }
    crate::prefault::start();
    let file =
        File::open(path).with_context(|| format!("cannot open {}", path.display())).map_err(Failure::BadInput)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let label = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let ahead = ReadAhead::new(file).context("cannot start the read-ahead thread").map_err(Failure::Other)?;
    let mut feed = ProgressFeed::new(ahead, size, &label);
    let result = read_snapshot_chunks(&mut feed, &budget.options());
    feed.finish();
    result.map_err(|e| Failure::BadInput(anyhow!("{e} (file: {})", path.display())))
}

/// Bytes per chunk read ahead.
const AHEAD_CHUNK: usize = 1 << 20;
/// Chunks in flight: what the read-ahead adds to the peak (a few MiB).
const AHEAD_DEPTH: usize = 2;
/// Chunks there are: those in flight, the parser's, and the one being
/// filled. The reading thread waits for the parser to give one back. It
/// used to make a new chunk whenever the parser's was not back
/// yet, which was most chunks: a megabyte allocated and zeroed per
/// megabyte read (glibc mostly handed back freed ones, so few were fresh
/// pages; `memset` was 0.5 to 4% of `stats` in `perf`, stop 36).
const AHEAD_CHUNKS: usize = AHEAD_DEPTH + 2;

/// Reads a file on a second thread, a few chunks ahead of the parser: the
/// kernel's copy of the bytes (7% of a plain file's `stats`) runs beside
/// the decoding instead of before it. The parser reads each chunk where it
/// lies (a copy into its own buffer was 3 to 4% of `stats`, stop 37) and
/// hands it back for reuse, so the peak holds `AHEAD_CHUNKS` chunks at most.
struct ReadAhead {
    chunks: Receiver<std::io::Result<Vec<u8>>>,
    spent: SyncSender<Vec<u8>>,
}

impl ReadAhead {
    /// Start the reading thread; fails only when no thread can be started.
    fn new(mut file: File) -> std::io::Result<ReadAhead> {
        let (send, chunks) = sync_channel::<std::io::Result<Vec<u8>>>(AHEAD_DEPTH);
        let (spent, reuse) = sync_channel::<Vec<u8>>(AHEAD_CHUNKS);
        // The chunks there will ever be, empty until first filled.
        for _ in 0..AHEAD_CHUNKS {
            let _ = spent.try_send(Vec::new());
        }
        // Ends at the end of the file, on an error, or when the parser is
        // gone (its receiver dropped, a send or a wait for a chunk fails).
        std::thread::Builder::new().name("read-ahead".into()).spawn(move || {
            loop {
                let Ok(mut buf) = reuse.recv() else { return };
                // The bytes go after the headroom the parser writes into.
                buf.resize(CHUNK_HEADROOM + AHEAD_CHUNK, 0);
                let mut filled = CHUNK_HEADROOM;
                let result = loop {
                    match file.read(&mut buf[filled..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            filled += n;
                            if filled == buf.len() {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                buf.truncate(filled);
                let last = filled < CHUNK_HEADROOM + AHEAD_CHUNK || result.is_err();
                let sent = match result {
                    Ok(()) => send.send(Ok(buf)),
                    Err(e) => send.send(Err(e)),
                };
                if sent.is_err() || last {
                    return;
                }
            }
        })?;
        Ok(ReadAhead { chunks, spent })
    }
}

impl ChunkFeed for ReadAhead {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        match self.chunks.recv() {
            Ok(Ok(chunk)) => Ok(Some(chunk)),
            Ok(Err(e)) => Err(e),
            // The thread ended after the last chunk.
            Err(_) => Ok(None),
        }
    }

    fn recycle(&mut self, chunk: Vec<u8>) {
        // Only the thread's own chunks go back; it may have ended already.
        if chunk.capacity() > 0 {
            let _ = self.spent.try_send(chunk);
        }
    }
}
