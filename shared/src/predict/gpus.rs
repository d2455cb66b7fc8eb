//! The memory a process can use on a GPU, by the card's name: what CUDA
//! reports as the device's total (`torch.cuda.get_device_properties(d)
//! .total_memory`, less than the marketing figure and than `nvidia-smi`'s,
//! which count memory the driver keeps), less what the CUDA context and the
//! libraries take outside the caching allocator.
//!
//! Figures for the H100 and H200 are measured (the corpus's H200 runs and
//! the H100 runs in `tests/gpu/results/`); the others are estimates from
//! public figures, and each card says which, and where its figures come
//! from. `docs/gpu-capacities.md` has the same table with its sources.
//!
//! The overhead depends on the job: the context alone (about 518 MiB on an
//! H100 or H200 with CUDA 13) grows as cuBLAS, cuDNN and the kernels a job
//! launches are loaded (about 753 MiB for the corpus's training jobs). The
//! table takes the training figure, so that a size predicted to fit leaves
//! room for them.

use thiserror::Error;

const MIB: u64 = 1 << 20;

/// The CUDA context and libraries of a training job on an H200 (PyTorch
/// 2.11, CUDA 13): the most the corpus's training runs show, device total
/// less `mem_get_info()`'s free less the allocator's reserved bytes
/// (`gpt_long.stats.json`, `gpt_varlen.stats.json`: 752.8125 MiB).
pub const MEASURED_TRAINING_OVERHEAD: u64 = 789_381_120;

/// One card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The name answers use (`H100-80GB`).
    pub name: &'static str,
    /// Other names it is known by, matched as [`find`] matches.
    pub aliases: &'static [&'static str],
    /// The device's total memory as CUDA reports it.
    pub cuda_total_bytes: u64,
    /// Where that figure comes from.
    pub total_source: &'static str,
    /// Memory the CUDA context and libraries take outside the allocator.
    pub overhead_bytes: u64,
    /// Where that figure comes from.
    pub overhead_source: &'static str,
    /// Both figures were measured on the card (not estimated).
    pub measured: bool,
}

impl Gpu {
    /// What the allocator can reserve there: the total less the overhead.
    pub fn capacity_bytes(&self) -> u64 {
        self.cuda_total_bytes.saturating_sub(self.overhead_bytes)
    }
}

const ESTIMATED_OVERHEAD: &str = "estimate: the H200's measured training overhead (752.8 MiB, PyTorch 2.11, CUDA 13); \
     the context grows with the SM count and the CUDA version, so measure it on the card \
     (device total - torch.cuda.mem_get_info()[0] - torch.cuda.memory_reserved())";

/// The cards known by name.
pub const GPUS: &[Gpu] = &[
    Gpu {
        name: "H100-80GB",
        aliases: &["H100", "H100 SXM", "H100 80GB HBM3"],
        cuda_total_bytes: 85_017_493_504,
        total_source: "measured: torch total_memory on an H100 80GB HBM3 (tests/gpu/results/check_fixture-h100-2026-12-05.json, \
             tests/fixtures/corpus/agent_capped.pickle)",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: "measured: the context alone is 518 MiB on this H100 (agent_capped.pickle: NVML's process usage less \
             the allocator's reserved bytes), as on the H200 (fraction_oom.pickle); with a training job's libraries, the H200's \
             752.8 MiB (same GH100 die, 132 SMs)",
        measured: true,
    },
    Gpu {
        name: "H200",
        aliases: &["H200 141GB", "H200 SXM", "H200-141GB"],
        cuda_total_bytes: 150_109_880_320,
        total_source: "measured: torch total_memory and mem_get_info() on an H200 (tests/gpu/results/predict-h200-2026-12-04.json, \
             the corpus's *.stats.json)",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: "measured: device total - mem_get_info() free - reserved in the corpus's training runs \
             (750.8 to 752.8 MiB; 526.8 MiB for a job without cuBLAS)",
        measured: true,
    },
    Gpu {
        name: "A100-40GB",
        aliases: &["A100 SXM4 40GB", "A100 PCIE 40GB"],
        cuda_total_bytes: 42_298_834_944,
        total_source: "deviceQuery on an A100-SXM4-40GB: 42298834944 bytes (github.com/bottlerocket-os/bottlerocket/pull/3873)",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
    Gpu {
        name: "A100-80GB",
        aliases: &["A100 SXM4 80GB", "A100 PCIE 80GB"],
        cuda_total_bytes: (81_920 - 621) * MIB,
        total_source: "estimate: nvidia-smi's 81920 MiB (github.com/modal-labs/modal-client/pull/2797) less the 621 MiB the \
             driver keeps on the A100-40GB (40960 MiB there, 42298834944 bytes to CUDA)",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
    Gpu {
        name: "A10G",
        aliases: &["A10", "A10 24GB"],
        cuda_total_bytes: 22_587 * MIB,
        total_source: "torch total_memory=22587MB on an A10G (TorchCodec's CUDA decoding tutorial, docs.pytorch.org/torchcodec); \
             MiB-rounded",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
    Gpu {
        name: "L4",
        aliases: &["L4 24GB"],
        cuda_total_bytes: (23_034 - 441) * MIB,
        total_source: "estimate: nvidia-smi's 23034 MiB (github.com/modal-labs/modal-client/pull/2797) less the 441 MiB the \
             driver keeps on the A10G (24 GB GDDR6 as well: 23028 MiB there, 22587 MiB to CUDA)",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
    Gpu {
        name: "L40S",
        aliases: &["L40S 48GB"],
        cuda_total_bytes: (46_068 - 441) * MIB,
        total_source: "estimate: nvidia-smi's 46068 MiB (github.com/modal-labs/modal-client/pull/2797) less the A10G's 441 MiB",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
    Gpu {
        name: "RTX 4090",
        aliases: &["4090", "GeForce RTX 4090", "RTX 4090 24GB"],
        cuda_total_bytes: 24_563 * MIB,
        total_source: "estimate: torch total_memory=24563MB as printed on an RTX 4090 in public set-up notes (no ECC: nearly \
             the 24 GiB NVIDIA specifies); MiB-rounded",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
    Gpu {
        name: "T4",
        aliases: &["Tesla T4", "T4 16GB"],
        cuda_total_bytes: 15_843_721_216,
        total_source: "deviceQuery on a Tesla T4: 15843721216 bytes (chiemon.github.io/2024/12/25/显卡信息.html)",
        overhead_bytes: MEASURED_TRAINING_OVERHEAD,
        overhead_source: ESTIMATED_OVERHEAD,
        measured: false,
    },
];

/// A name matched no card.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("--gpu {given:?}: no card of that name; known: {known} (or give --capacity)")]
pub struct UnknownGpu {
    /// The name given.
    pub given: String,
    /// The known names, comma-separated.
    pub known: String,
}

/// The card named `name`, matched forgivingly: case, spaces, `-` and `_`
/// do not matter, nor a leading `NVIDIA`, `GeForce` or `Tesla`, nor the
/// form factor and memory type (`SXM4`, `PCIe`, `HBM3`), nor `GB`/`G`/`GiB`
/// after the size (`h100 80g`, `NVIDIA H100 80GB HBM3`, `a100_40gb`).
pub fn find(name: &str) -> Result<&'static Gpu, UnknownGpu> {
    let wanted = key(name);
    GPUS.iter()
        .find(|g| {
            !wanted.is_empty() && std::iter::once(g.name).chain(g.aliases.iter().copied()).any(|n| key(n) == wanted)
        })
        .ok_or_else(|| UnknownGpu {
            given: name.to_owned(),
            known: GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", "),
        })
}

/// A name reduced to what tells cards apart.
fn key(name: &str) -> String {
    const NOISE: &[&str] =
        &["nvidia", "geforce", "tesla", "sxm", "sxm4", "sxm5", "pcie", "hbm3", "hbm3e", "hbm2e", "gpu"];
    let lower = name.to_lowercase();
    let mut out = String::new();
    for token in lower.split(|c: char| !c.is_ascii_alphanumeric()).filter(|t| !t.is_empty()) {
        if NOISE.contains(&token) {
            continue;
        }
        // A size: 80, 80g, 80gb, 80gib all read 80gb; glued to the model
        // (`h10080gb`) it stays as written.
        let digits = token.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &token[digits.len()..];
        if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) && matches!(unit, "g" | "gb" | "gib") {
            out.push_str(digits);
            out.push_str("gb");
        } else {
            out.push_str(token);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_matched_forgivingly() {
        for name in ["H100-80GB", "h100", "NVIDIA H100 80GB HBM3", "h100 80g", "H100_80GiB", "h100-sxm"] {
            assert_eq!(find(name).map(|g| g.name), Ok("H100-80GB"), "{name}");
        }
        for (name, card) in [
            ("a100-40gb", "A100-40GB"),
            ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
            ("A100 80G", "A100-80GB"),
            ("rtx4090", "RTX 4090"),
            ("NVIDIA GeForce RTX 4090", "RTX 4090"),
            ("a10g", "A10G"),
            ("NVIDIA L4", "L4"),
            ("Tesla T4", "T4"),
            ("h200", "H200"),
        ] {
            assert_eq!(find(name).map(|g| g.name), Ok(card), "{name}");
        }
    }

    #[test]
    fn an_unknown_or_ambiguous_name_lists_the_known_ones() {
        for name in ["A100", "B200", "", "80GB"] {
            let e = find(name).expect_err(name);
            assert!(e.to_string().contains("known: H100-80GB, H200, A100-40GB, A100-80GB"), "{e}");
        }
    }

    #[test]
    fn the_capacity_is_the_total_less_the_overhead() {
        let h200 = find("H200").expect("known");
        assert_eq!(h200.capacity_bytes(), 150_109_880_320 - 789_381_120);
        assert!(h200.measured);
        assert!(!find("L4").expect("known").measured);
        // Every card's capacity is below its total and above nothing.
        for g in GPUS {
            assert!(g.capacity_bytes() > 0 && g.capacity_bytes() < g.cuda_total_bytes, "{}", g.name);
        }
    }
}
