//! An [`IndexedSnapshot`] snapshot to and from an index file: the snapshot's
//! tables and trace columns, its intervals and its timelines. The layout
//! checkpoints are not written: they are built by the first state or
//! segment query of a device (see ARCHITECTURE.md for the measured costs).

use std::io::Write;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::index_file::{IndexFileError, Reader, Writer, check};
use crate::indexed::IndexedSnapshot;
use crate::intervals::{DeviceIndexHeader, SnapshotIntervals};
use crate::snapshot::frames::{TablesHeader, load_tables, save_tables};
use crate::snapshot::trace::TraceHeader;
use crate::snapshot::{
    AllocatorSettings, Annotation, CaptureContext, Compression, DeviceSnapshot, FormatVersion, PyValue, Segment,
    Snapshot, TraceColumns,
};
use crate::timeline::{DeviceTimelineHeader, TimelineIndex};

#[derive(Serialize, Deserialize)]
struct Header {
    /// SHA-256 (hex) of the snapshot file this index was built from: an
    /// index copied over another snapshot's is refused, not served.
    snapshot_sha256: String,
    format: FormatVersion,
    protocol: Option<u8>,
    compression: Compression,
    tables: TablesHeader,
    devices: Vec<DeviceHeader>,
    allocator_settings: Option<Settings>,
    annotations: Vec<Annotation>,
    /// Absent from files written before it existed: read as none.
    #[serde(default)]
    capture: Option<CaptureContext>,
    /// Pinned host memory; absent from older files: read as none.
    #[serde(default)]
    host: Option<DeviceHeader>,
    warnings: Vec<String>,
    intervals: Vec<DeviceIndexHeader>,
    timelines: Vec<DeviceTimelineHeader>,
}

#[derive(Serialize, Deserialize)]
struct DeviceHeader {
    device: u32,
    has_trace: bool,
    segments: Vec<Segment>,
    trace: TraceHeader,
}

/// `AllocatorSettings` with its raw values tagged: `PyValue` serializes
/// untagged for the API, which cannot tell a dict from a list of pairs
/// when read back.
#[derive(Serialize, Deserialize)]
struct Settings {
    alloc_conf: Option<String>,
    max_split_size: Option<u64>,
    expandable_segments: bool,
    /// `f64::to_bits`: JSON has no NaN.
    garbage_collection_threshold: u64,
    roundup_power2_divisions: Vec<(u64, u64)>,
    raw: Vec<(String, Tagged)>,
}

#[derive(Serialize, Deserialize)]
enum Tagged {
    None,
    Bool(bool),
    /// Decimal: JSON numbers stop at 64 bits.
    Int(String),
    /// `f64::to_bits`.
    Float(u64),
    Str(String),
    List(Vec<Tagged>),
    Dict(Vec<(String, Tagged)>),
}

impl Tagged {
    fn of(v: &PyValue) -> Tagged {
        match v {
            PyValue::None => Tagged::None,
            PyValue::Bool(b) => Tagged::Bool(*b),
            PyValue::Int(i) => Tagged::Int(i.to_string()),
            PyValue::Float(f) => Tagged::Float(f.to_bits()),
            PyValue::Str(s) => Tagged::Str(s.clone()),
            PyValue::List(l) => Tagged::List(l.iter().map(Tagged::of).collect()),
            PyValue::Dict(d) => Tagged::Dict(d.iter().map(|(k, v)| (k.clone(), Tagged::of(v))).collect()),
        }
    }

    fn value(self) -> Result<PyValue, IndexFileError> {
        Ok(match self {
            Tagged::None => PyValue::None,
            Tagged::Bool(b) => PyValue::Bool(b),
            Tagged::Int(i) => PyValue::Int(i.parse().map_err(|_| IndexFileError::Header(format!("int {i:?}")))?),
            Tagged::Float(bits) => PyValue::Float(f64::from_bits(bits)),
            Tagged::Str(s) => PyValue::Str(s),
            Tagged::List(l) => PyValue::List(l.into_iter().map(Tagged::value).collect::<Result<_, _>>()?),
            Tagged::Dict(d) => {
                PyValue::Dict(d.into_iter().map(|(k, v)| Ok((k, v.value()?))).collect::<Result<_, IndexFileError>>()?)
            }
        })
    }
}

impl Settings {
    fn of(s: &AllocatorSettings) -> Settings {
        Settings {
            alloc_conf: s.alloc_conf.clone(),
            max_split_size: s.max_split_size,
            expandable_segments: s.expandable_segments,
            garbage_collection_threshold: s.garbage_collection_threshold.to_bits(),
            roundup_power2_divisions: s.roundup_power2_divisions.clone(),
            raw: s.raw.iter().map(|(k, v)| (k.clone(), Tagged::of(v))).collect(),
        }
    }

    fn settings(self) -> Result<AllocatorSettings, IndexFileError> {
        Ok(AllocatorSettings {
            alloc_conf: self.alloc_conf,
            max_split_size: self.max_split_size,
            expandable_segments: self.expandable_segments,
            garbage_collection_threshold: f64::from_bits(self.garbage_collection_threshold),
            roundup_power2_divisions: self.roundup_power2_divisions,
            raw: self.raw.into_iter().map(|(k, v)| Ok((k, v.value()?))).collect::<Result<_, IndexFileError>>()?,
        })
    }
}

/// Write `analyzed`, parsed from the file whose SHA-256 is
/// `snapshot_sha256` (hex), as an index file to `out` (front to back, in
/// one pass, holding no second copy of any column). Returns `out`.
pub fn write_index<W: Write>(analyzed: &IndexedSnapshot, snapshot_sha256: &str, out: W) -> Result<W, IndexFileError> {
    let s = &analyzed.snapshot;
    let mut w = Writer::new(out)?;
    let tables = save_tables(&s.strings, &s.frames, &mut w)?;
    let mut devices = Vec::with_capacity(s.devices.len());
    for d in &s.devices {
        let trace = d.trace.save(&mut w)?;
        devices.push(DeviceHeader { device: d.device, has_trace: d.has_trace, segments: d.segments.clone(), trace });
    }
    let host = match &s.host {
        Some(h) => Some(DeviceHeader {
            device: h.device,
            has_trace: h.has_trace,
            segments: h.segments.clone(),
            trace: h.trace.save(&mut w)?,
        }),
        None => None,
    };
    let intervals = analyzed.index.save(&mut w)?;
    let timelines = analyzed.timeline.save(&mut w)?;
    let header = Header {
        snapshot_sha256: snapshot_sha256.to_ascii_lowercase(),
        format: s.format,
        protocol: s.protocol,
        compression: s.compression,
        tables,
        devices,
        allocator_settings: s.allocator_settings.as_ref().map(Settings::of),
        annotations: s.annotations.clone(),
        capture: s.capture.clone(),
        host,
        warnings: s.warnings.clone(),
        intervals,
        timelines,
    };
    Ok(w.finish(&header)?)
}

/// Open an index file held in (or mapped into) `bytes`, which must have
/// been written for the snapshot file whose SHA-256 is `snapshot_sha256`
/// (hex; else [`IndexFileError::OtherSnapshot`]). The trace and timeline
/// columns view `bytes` in place; the rest is rebuilt. Every checksum,
/// offset and id the views follow is checked first.
pub fn open_index(bytes: Bytes, snapshot_sha256: &str) -> Result<IndexedSnapshot, IndexFileError> {
    let (r, header) = Reader::open::<Header>(bytes)?;
    if !header.snapshot_sha256.eq_ignore_ascii_case(snapshot_sha256) {
        return Err(IndexFileError::OtherSnapshot {
            found: header.snapshot_sha256.chars().take(64).collect(),
            expected: snapshot_sha256.chars().take(64).collect(),
        });
    }
    let (strings, frames) = load_tables(&r, &header.tables)?;
    let mut devices = Vec::with_capacity(header.devices.len());
    for d in &header.devices {
        let trace = TraceColumns::load(&r, &d.trace, strings.len(), frames.stack_count())?;
        devices.push(DeviceSnapshot { device: d.device, has_trace: d.has_trace, segments: Vec::new(), trace });
    }
    for (device, h) in devices.iter_mut().zip(header.devices) {
        device.segments = h.segments;
    }
    check(devices.windows(2).all(|w| w[0].device < w[1].device), || "devices out of order".to_owned())?;
    // Sizes and addresses are numbers of the header, which whoever can
    // write the file can forge with its checksum: a segment whose sizes
    // contradict each other (2^63 bytes, a block outside it) is refused;
    // every real capture's segments agree.
    let host_segments = header.host.as_ref().map(|h| (h.device, h.segments.as_slice()));
    let all = devices.iter().map(|d| (d.device, d.segments.as_slice())).chain(host_segments);
    for (device, segments) in all {
        for (i, segment) in segments.iter().enumerate() {
            if let Some(why) = segment.inconsistency() {
                return Err(IndexFileError::Header(format!("device {device}, segment {i}: {why}")));
            }
        }
    }
    let host = match &header.host {
        Some(h) => Some(DeviceSnapshot {
            device: h.device,
            has_trace: h.has_trace,
            segments: h.segments.clone(),
            trace: TraceColumns::load(&r, &h.trace, strings.len(), frames.stack_count())?,
        }),
        None => None,
    };
    let index = SnapshotIntervals::load(&r, &header.intervals)?;
    for d in &index.devices {
        let rows = devices.iter().find(|x| x.device == d.device).map_or(0, |x| x.trace.len());
        let in_trace = |row: Option<u32>| row.is_none_or(|r| (r as usize) < rows);
        check(
            d.allocations.iter().all(|a| {
                in_trace(a.alloc_row.get())
                    && in_trace(a.free_requested_row.get())
                    && in_trace(a.free_completed_row.get())
            }) && d.segments.iter().all(|s| in_trace(s.start_row) && in_trace(s.end_row)),
            || format!("device {}: an interval's row past the trace", d.device),
        )?;
    }
    let timeline = TimelineIndex::load(&r, &header.timelines, |device| {
        devices.iter().find(|d| d.device == device).map(|d| &d.trace)
    })?;
    let snapshot = Snapshot {
        format: header.format,
        protocol: header.protocol,
        compression: header.compression,
        strings,
        frames,
        devices,
        allocator_settings: header.allocator_settings.map(Settings::settings).transpose()?,
        annotations: header.annotations,
        capture: header.capture,
        host,
        warnings: header.warnings,
    };
    Ok(IndexedSnapshot::from_parts(snapshot, index, timeline, true))
}
