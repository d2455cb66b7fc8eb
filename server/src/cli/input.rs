//! Reading a snapshot file from the command line: the one `--memory-budget`
//! argument every reading subcommand takes, and the read itself, with a
//! progress bar for slow reads.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use anyhow::{Context, anyhow};
use clap::Args;
use vramscope_shared::{ReadOptions, Snapshot, read_snapshot};

use super::Failure;
use super::progress::ProgressReader;

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
    let file =
        File::open(path).with_context(|| format!("cannot open {}", path.display())).map_err(Failure::BadInput)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let label = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    // No buffer of our own: the reader buffers (and reads 256 KiB at a
    // time), so the bytes go from the kernel straight into its buffer.
    let mut reader = ProgressReader::new(file, size, &label);
    let result = read_snapshot(&mut reader, &budget.options());
    reader.finish();
    result.map_err(|e| Failure::BadInput(anyhow!("{e} (file: {})", path.display())))
}
