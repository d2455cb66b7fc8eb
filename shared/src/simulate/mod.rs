//! Replaying a trace through a model of PyTorch's native CUDA caching
//! allocator (`c10/cuda/CUDACachingAllocator.cpp`), with the recorded
//! settings or with others: what would have been allocated and reserved,
//! how fragmented, and whether and where it would run out of memory under a
//! given capacity.
//!
//! The model ([`CachingAllocator`]) follows the C++ rule by rule: 512-byte
//! rounding and `roundup_power2_divisions`; a small pool (≤ 1 MiB, 2 MiB
//! segments) and a large pool (20 MiB segments under 10 MiB, 2 MiB rounding
//! above); best fit by `(stream, size, address)`; the split rules (small
//! pool or expandable: remainder ≥ 512 B; large pool: remainder > 1 MiB and
//! request below `max_split_size`); `max_split_size_mb` and
//! `max_non_split_rounding_mb`; merging of freed neighbours; pending frees
//! of `record_stream`; the out-of-memory path (release oversize blocks,
//! then every unsplit cached segment, then retry); garbage collection; and
//! expandable segments (one growable range per stream and pool, mapped in
//! 2 MiB or 20 MiB pages, whole free pages unmapped on release).
//! CUDA graphs' private pools (`PrivatePool`: small and large blocks of
//! their own, kept from `empty_cache()` while a graph uses them) are
//! modelled too; which pool each request went to is read from the snapshot
//! ([`crate::pools`]).
//!
//! [`simulate`] replays every device to the end; [`Replayer`] steps through
//! one device's trace so that the simulated layout can be read at any row.
//! How trace entries drive the model (recorded addresses as keys only,
//! `segment_free` runs as `empty_cache`, `oom` entries attempted again) is
//! described in the `replay` module.
//!
//! Only traces that start from an empty allocator can be replayed: a wrapped
//! ring buffer is refused ([`SimError::TraceWrapped`]). No I/O, no threads,
//! no clock: it runs in the browser too.

mod allocator;
mod config;
mod replay;
pub mod tune;
pub mod window_start;

use serde::Serialize;
use thiserror::Error;

pub use allocator::{
    Allocation, AllocatorStats, CachingAllocator, Counter, LARGE_BUFFER, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, OutOfMemory,
    ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE, SimBlock, SimSegment, allocation_size, round_size,
};
pub use config::{AllocatorConfig, ConfigError, ROUNDUP_INTERVALS, parse_size};
pub use replay::{DeviceSimulation, Replayer, Series, SimOom};

use crate::snapshot::Snapshot;

/// Why a snapshot could not be simulated.
#[derive(Debug, Error, PartialEq)]
pub enum SimError {
    /// The allocator settings given could not be understood.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The trace does not reach back to an empty allocator.
    #[error(
        "device {device}: the trace does not start from an empty allocator (the ring buffer wrapped, or recording \
         started while memory was in use), so it cannot be replayed; record with a larger max_entries from the \
         start of the program"
    )]
    TraceWrapped {
        /// CUDA device index.
        device: u32,
    },
    /// The trace does not start from an empty allocator, and its state at
    /// the first entry could not be worked out from the final state.
    #[error(
        "device {device}: the trace does not start from an empty allocator, and its state at the first entry \
         cannot be worked out ({reason}); record with a larger max_entries from the start of the program"
    )]
    WindowStart {
        /// CUDA device index.
        device: u32,
        /// Why.
        reason: window_start::WindowStartError,
    },
    /// A device has memory but no trace.
    #[error(
        "device {device}: the snapshot has no trace (history was not recorded: \
         torch.cuda.memory._record_memory_history(enabled=\"all\"))"
    )]
    NoTrace {
        /// CUDA device index.
        device: u32,
    },
    /// Nothing to simulate.
    #[error("the snapshot has no device with a trace")]
    NoDevices,
    /// `per_process_memory_fraction` was given for a snapshot that does not
    /// know the device's total memory.
    #[error(
        "device {device}: per_process_memory_fraction:{fraction} is a fraction of the device's total memory, \
         which this snapshot does not record (snapshots taken by the vramscope agent do): give --capacity instead"
    )]
    FractionWithoutTotal {
        /// CUDA device index.
        device: u32,
        /// The fraction given.
        fraction: f64,
    },
}

/// What to simulate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimulateOptions {
    /// `PYTORCH_CUDA_ALLOC_CONF` to replay with; `None` for the recorded
    /// settings (PyTorch's defaults when the file predates
    /// `allocator_settings`).
    pub alloc_conf: Option<String>,
    /// Memory each device may reserve, in bytes (as a memory fraction sets
    /// it); `None` for unlimited.
    pub capacity: Option<u64>,
    /// Keep the allocated/reserved series over time.
    pub record_series: bool,
    /// Serve the requests that failed in the recorded run (its `oom`
    /// entries) as if there had been memory for them. Without it and
    /// without a capacity, a replay honours them as failures and reproduces
    /// the recorded run.
    pub grant_recorded_ooms: bool,
}

/// A whole snapshot, simulated.
#[derive(Clone, Debug)]
pub struct Simulation {
    /// The settings string replayed with: the one given, else the recorded one.
    pub alloc_conf: String,
    /// The settings came from the snapshot, not from the caller.
    pub recorded_settings: bool,
    /// The settings as modelled.
    pub config: AllocatorConfig,
    /// The capacity replayed under (given, or from the fraction).
    pub capacity: Option<u64>,
    /// The capacity is `per_process_memory_fraction` of the device's total
    /// memory, not one given.
    pub capacity_from_fraction: bool,
    /// The capacity is the least a process that ran out had, inferred from
    /// its recorded OOM by the caller (see
    /// `analysis::capacity::simulate_with_inferred_capacity`), not one given.
    pub capacity_inferred: bool,
    /// The capacity is the cap the capture recorded for the process (its
    /// memory fraction of the device), chosen by the caller (see
    /// `analysis::capacity::simulate_with_inferred_capacity`), not one given.
    pub capacity_recorded: bool,
    /// One per device with a trace, in the snapshot's order.
    pub devices: Vec<DeviceSimulation>,
}

/// The cap the recorded settings' `per_process_memory_fraction` gives
/// device `device`: that fraction of the device's total as CUDA reported it
/// to the process (captures before the agent recorded the cap itself,
/// [`Snapshot::recorded_capacity`], have both).
pub fn fraction_capacity(snapshot: &Snapshot, device: u32) -> Option<u64> {
    let recorded = snapshot.capture.as_ref()?.devices.iter().find(|d| d.device == device)?;
    let (config, _) = settings_for(snapshot, None).ok()?;
    config.capacity_for(recorded.cuda_total_bytes)
}

/// The settings a replay of `snapshot` uses for `alloc_conf`, and the string
/// naming them.
pub fn settings_for(snapshot: &Snapshot, alloc_conf: Option<&str>) -> Result<(AllocatorConfig, String), SimError> {
    Ok(match alloc_conf {
        Some(conf) => (AllocatorConfig::parse(conf)?, conf.to_owned()),
        None => match &snapshot.allocator_settings {
            Some(recorded) => {
                (AllocatorConfig::from_recorded(recorded), recorded.alloc_conf.clone().unwrap_or_default())
            }
            None => (AllocatorConfig::default(), String::new()),
        },
    })
}

/// Replay every device's trace with the given settings.
///
/// Without a capacity, settings with `per_process_memory_fraction` give
/// each device one: the fraction of its total memory, when the snapshot
/// knows that total (the vramscope agent records it). Given settings with a
/// fraction need it; recorded ones without it are replayed without a
/// capacity, and the fraction is named as not modelled.
pub fn simulate(snapshot: &Snapshot, options: &SimulateOptions) -> Result<Simulation, SimError> {
    let (mut config, alloc_conf) = settings_for(snapshot, options.alloc_conf.as_deref())?;
    let same_settings = config == settings_for(snapshot, None)?.0;
    let cuda_total =
        |device: u32| snapshot.capture.as_ref()?.devices.iter().find(|d| d.device == device)?.cuda_total_bytes;
    let mut capacity_from_fraction = None;
    let mut devices = Vec::new();
    for device in &snapshot.devices {
        if device.trace.is_empty() && device.segments.is_empty() {
            continue;
        }
        let capacity = match (options.capacity, config.memory_fraction) {
            (Some(c), _) => Some(c),
            (None, Some(fraction)) => match config.capacity_for(cuda_total(device.device)) {
                Some(c) => {
                    capacity_from_fraction = Some(c);
                    Some(c)
                }
                None if options.alloc_conf.is_some() => {
                    return Err(SimError::FractionWithoutTotal { device: device.device, fraction });
                }
                None => {
                    let note = format!(
                        "per_process_memory_fraction:{fraction} (the device's total memory is not in this \
                         snapshot; the vramscope agent records it, or give --capacity)"
                    );
                    if !config.not_modelled.contains(&note) {
                        config.not_modelled.push(note);
                    }
                    None
                }
            },
            (None, None) => None,
        };
        let replayer = Replayer::new(device, config.clone(), capacity, options.record_series)?;
        devices
            .push(replayer.recorded_settings(same_settings).grant_recorded_ooms(options.grant_recorded_ooms).finish());
    }
    if devices.is_empty() {
        return Err(SimError::NoDevices);
    }
    Ok(Simulation {
        alloc_conf,
        recorded_settings: options.alloc_conf.is_none(),
        config,
        capacity: options.capacity.or(capacity_from_fraction),
        capacity_from_fraction: options.capacity.is_none() && capacity_from_fraction.is_some(),
        capacity_inferred: false,
        capacity_recorded: false,
        devices,
    })
}

/// The JSON object of `vramscope simulate --json`. Fields are only ever
/// added, never renamed or removed.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SimulationReport {
    /// The settings string replayed with.
    pub alloc_conf: String,
    /// One entry per device.
    pub devices: Vec<DeviceReport>,
    /// `"recorded"` or `"given"`.
    pub settings: &'static str,
    /// The capacity, if one was given or came from
    /// `per_process_memory_fraction` (see `capacity_source`).
    pub capacity_bytes: Option<u64>,
    /// Where the capacity came from: `"given"`, `"per_process_memory_fraction"`,
    /// `"recorded"` (the cap the capture recorded: the process's memory
    /// fraction of the device, the default when the snapshot has one),
    /// `"inferred"` (the least the process had when it ran out: the default
    /// for a snapshot that records an OOM and no cap), or absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<&'static str>,
    /// Options of the recorded setting string that are not modelled (the
    /// replay uses PyTorch's defaults for them), as written; empty when
    /// every option was.
    pub not_modelled_settings: Vec<String>,
}

/// The peaks and counts of a replay: what tune's rows and a what-if's
/// figures both show, declared once. Flattened into their JSON, so the
/// answers keep their fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReplayPeaks {
    /// Highest reserved bytes.
    pub reserved_peak_bytes: u64,
    /// Highest allocated bytes (rounded block sizes, unsplit blocks included).
    pub allocated_peak_bytes: u64,
    /// Highest requested (unrounded) bytes: the same for every setting that
    /// does not run out of memory.
    pub requested_peak_bytes: u64,
    /// Highest free-but-unreleasable bytes in split segments.
    pub inactive_split_peak_bytes: u64,
    /// cudaMalloc calls and page mappings: each costs time.
    pub device_allocs: u64,
    /// cudaFree calls and page unmappings.
    pub device_frees: u64,
    /// Allocations retried after releasing the cache.
    pub alloc_retries: u64,
}

impl ReplayPeaks {
    /// One device's figures.
    pub fn of(s: &AllocatorStats) -> Self {
        Self {
            reserved_peak_bytes: s.reserved_bytes.peak,
            allocated_peak_bytes: s.allocated_bytes.peak,
            requested_peak_bytes: s.requested_bytes.peak,
            inactive_split_peak_bytes: s.inactive_split_bytes.peak,
            device_allocs: s.num_device_alloc,
            device_frees: s.num_device_free,
            alloc_retries: s.num_alloc_retries,
        }
    }

    /// Each figure the largest of any device's (memory is limited per device).
    pub fn max_over(devices: impl IntoIterator<Item = Self>) -> Self {
        devices.into_iter().fold(Self::default(), |a, b| Self {
            reserved_peak_bytes: a.reserved_peak_bytes.max(b.reserved_peak_bytes),
            allocated_peak_bytes: a.allocated_peak_bytes.max(b.allocated_peak_bytes),
            requested_peak_bytes: a.requested_peak_bytes.max(b.requested_peak_bytes),
            inactive_split_peak_bytes: a.inactive_split_peak_bytes.max(b.inactive_split_peak_bytes),
            device_allocs: a.device_allocs.max(b.device_allocs),
            device_frees: a.device_frees.max(b.device_frees),
            alloc_retries: a.alloc_retries.max(b.alloc_retries),
        })
    }
}

/// One device of a [`SimulationReport`].
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DeviceReport {
    /// CUDA device index.
    pub device: u32,
    /// Highest reserved bytes (`reserved_bytes.all.peak`).
    pub reserved_peak_bytes: u64,
    /// Highest allocated bytes (`allocated_bytes.all.peak`).
    pub allocated_peak_bytes: u64,
    /// Reserved bytes at the end (or at the OOM).
    pub final_reserved_bytes: u64,
    /// Highest inactive-split bytes (`inactive_split_bytes.all.peak`).
    pub inactive_split_peak_bytes: u64,
    /// Where it ran out of memory, if it did.
    pub oom: Option<OomReport>,
    /// Allocated bytes at the end (or at the OOM).
    pub final_allocated_bytes: u64,
    /// Highest requested (unrounded) bytes.
    pub requested_peak_bytes: u64,
    /// Segments at the end (expandable: mapped ranges).
    pub final_segments: usize,
    /// cudaMalloc calls and page mappings (`num_device_alloc`).
    pub device_allocs: u64,
    /// cudaFree calls and page unmappings (`num_device_free`).
    pub device_frees: u64,
    /// Allocations retried after releasing the cache (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// Requests that did not fit (`num_ooms`).
    pub ooms: u64,
    /// Trace entries replayed.
    pub trace_entries_replayed: usize,
}

/// The `oom` object of a [`DeviceReport`].
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct OomReport {
    /// Time of the failing request (µs since the epoch).
    pub time_us: i64,
    /// Bytes the program asked for.
    pub requested_bytes: u64,
    /// The segment or mapping that did not fit.
    pub allocation_bytes: u64,
    /// Trace row of the request.
    pub trace_row: u32,
    /// Reserved bytes at that moment.
    pub reserved_bytes: u64,
    /// The recorded run failed at this request too.
    pub recorded: bool,
}

impl Simulation {
    /// The summary `vramscope simulate --json` prints.
    pub fn report(&self) -> SimulationReport {
        SimulationReport {
            alloc_conf: self.alloc_conf.clone(),
            devices: self.devices.iter().map(DeviceSimulation::report).collect(),
            settings: if self.recorded_settings { "recorded" } else { "given" },
            capacity_bytes: self.capacity,
            capacity_source: self.capacity.map(|_| {
                match (self.capacity_from_fraction, self.capacity_recorded, self.capacity_inferred) {
                    (true, _, _) => "per_process_memory_fraction",
                    (false, true, _) => "recorded",
                    (false, false, true) => "inferred",
                    (false, false, false) => "given",
                }
            }),
            not_modelled_settings: self.config.not_modelled.clone(),
        }
    }
}

impl DeviceSimulation {
    /// This device's summary.
    pub fn report(&self) -> DeviceReport {
        let s = &self.stats;
        DeviceReport {
            device: self.device,
            reserved_peak_bytes: s.reserved_bytes.peak,
            allocated_peak_bytes: s.allocated_bytes.peak,
            final_reserved_bytes: s.reserved_bytes.current,
            inactive_split_peak_bytes: s.inactive_split_bytes.peak,
            oom: self.oom.map(|o| OomReport {
                time_us: o.time_us,
                requested_bytes: o.requested_bytes,
                allocation_bytes: o.allocation_bytes,
                trace_row: o.row,
                reserved_bytes: o.reserved_bytes,
                recorded: o.recorded,
            }),
            final_allocated_bytes: s.allocated_bytes.current,
            requested_peak_bytes: s.requested_bytes.peak,
            final_segments: self.segments.len(),
            device_allocs: s.num_device_alloc,
            device_frees: s.num_device_free,
            alloc_retries: s.num_alloc_retries,
            ooms: s.num_ooms,
            trace_entries_replayed: self.rows_replayed,
        }
    }
}
