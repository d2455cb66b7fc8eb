//! The top level: the root (a dict of the 2.x formats, or the bare list
//! of segments of 1.13) read key by key into a [`Snapshot`], its format
//! generation told from the keys it has, and the trace rows split into the
//! devices (and the host) beside their segments.

use rustc_hash::FxHashMap;

use super::Reader;
use super::annotations::external_annotations;
use super::settings::{allocator_settings, capture_context};
use super::traces::DeviceRows;
use super::value::{get, list_items};
use super::words::{
    ALLOCATOR_SETTINGS, DEVICE_TRACES, EXTERNAL_ANNOTATIONS, HOST_SEGMENTS, HOST_TRACES, SEGMENTS, VRAMSCOPE_CAPTURE,
};
use crate::error::ReadError;
use crate::pickle::{Heap, ObjKind, V, Value};
use crate::snapshot::frames::Strings;
use crate::snapshot::model::{Compression, DeviceSnapshot, FormatVersion, Segment, Snapshot};
use crate::snapshot::trace::{TraceBuilder, TraceColumns};

impl Reader {
    /// Convert the parsed root into the model.
    pub(super) fn build(mut self, heap: &mut Heap, root: Value) -> Result<Snapshot, ReadError> {
        let root = heap.resolve(root);
        let (segments_value, top) = match root.get() {
            V::Obj(id) => match &heap.obj(id).kind {
                ObjKind::List(_) | ObjKind::Rows { .. } => (root, None),
                ObjKind::Dict(items) => {
                    let items = items.clone();
                    let Some(segments) = get(&items, SEGMENTS) else {
                        let keys: Vec<String> = items.iter().take(8).map(|(k, _)| heap.describe(*k)).collect();
                        return Err(ReadError::NotASnapshot(format!(
                            "the top-level dict has no 'segments' key (its keys: {})",
                            keys.join(", ")
                        )));
                    };
                    (segments, Some(items))
                }
                _ => return Err(not_a_snapshot(heap, root)),
            },
            _ => return Err(not_a_snapshot(heap, root)),
        };

        let stop = self.stop.clone();
        let mut saw_history = false;
        let segment_items = list_items(heap, segments_value, &|| "segments".to_owned())?;
        let mut by_device: Vec<(u32, Segment)> = Vec::with_capacity(segment_items.len());
        for (i, seg) in segment_items.into_iter().enumerate() {
            stop.check()?;
            let (device, segment, history) = self.segment(heap, seg, "segments", i)?;
            saw_history |= history;
            by_device.push((device, segment));
        }

        let mut device_rows: Vec<DeviceRows> = Vec::new();
        let mut settings = None;
        let mut annotations = Vec::new();
        let mut capture = None;
        let mut host_segments: Option<Vec<Segment>> = None;
        let mut host_rows: Option<DeviceRows> = None;
        let mut format = if top.is_none() { FormatVersion::V1_13 } else { FormatVersion::V2_1 };
        if let Some(top) = &top {
            if let Some(traces) = get(top, DEVICE_TRACES) {
                device_rows = self.device_traces(heap, traces)?;
            }
            if let Some(s) = get(top, ALLOCATOR_SETTINGS) {
                settings = Some(allocator_settings(heap, s, &stop)?);
                format = FormatVersion::V2_3;
            }
            if let Some(a) = get(top, EXTERNAL_ANNOTATIONS) {
                annotations = external_annotations(heap, a, &stop)?;
                format = FormatVersion::V2_5;
            }
            if let Some(c) = get(top, VRAMSCOPE_CAPTURE) {
                let mut said = Vec::new();
                capture = capture_context(heap, c, &stop, &mut said)?;
                said.into_iter().for_each(|w| self.warn(w));
            }
            if let Some(h) = get(top, HOST_SEGMENTS) {
                let items = list_items(heap, h, &|| "host_segments".to_owned())?;
                let mut segments = Vec::with_capacity(items.len());
                for (i, seg) in items.into_iter().enumerate() {
                    stop.check()?;
                    segments.push(self.segment(heap, seg, "host_segments", i)?.1);
                }
                host_segments = Some(segments);
            }
            if let Some(t) = get(top, HOST_TRACES) {
                host_rows = Some(self.host_traces(heap, t)?);
            }
            // Once per key: a file repeating one key a million times made a
            // million warnings (a gigabyte of them, stored in its index).
            let mut unknown = rustc_hash::FxHashSet::default();
            for (i, (k, _)) in top.iter().enumerate() {
                if i.is_multiple_of(4096) {
                    stop.check()?;
                }
                if let V::Str(key) = k.get()
                    && !matches!(
                        key,
                        SEGMENTS
                            | DEVICE_TRACES
                            | ALLOCATOR_SETTINGS
                            | EXTERNAL_ANNOTATIONS
                            | VRAMSCOPE_CAPTURE
                            | HOST_SEGMENTS
                            | HOST_TRACES
                    )
                    && unknown.insert(key)
                {
                    self.warn(format!("unknown top-level key {:?} ignored", heap.str(key)));
                }
            }
        }
        if saw_history && format <= FormatVersion::V2_1 && top.is_some() {
            format = FormatVersion::V2_0;
        }

        let has_host_trace = host_rows.is_some();
        let (devices, host_trace) = self.assemble_devices(by_device, device_rows, host_rows);
        let host = (host_segments.is_some() || has_host_trace).then(|| {
            let mut segments = host_segments.unwrap_or_default();
            segments.sort_by_key(|s| s.address);
            DeviceSnapshot { device: 0, segments, trace: host_trace.unwrap_or_default(), has_trace: has_host_trace }
        });
        let warnings = self.take_warnings();
        Ok(Snapshot {
            format,
            protocol: None,
            compression: Compression::None,
            strings: Strings::new(heap.take_strings()),
            frames: self.frames,
            devices,
            allocator_settings: settings,
            annotations,
            capture,
            host,
            warnings,
        })
    }

    /// The devices, and the host's trace when `host_rows` is given.
    fn assemble_devices(
        &mut self,
        segments: Vec<(u32, Segment)>,
        mut rows: Vec<DeviceRows>,
        host_rows: Option<DeviceRows>,
    ) -> (Vec<DeviceSnapshot>, Option<TraceColumns>) {
        let mut ids: Vec<u32> = segments.iter().map(|(d, _)| *d).collect();
        ids.extend(rows.iter().enumerate().filter(|(_, r)| r.len() > 0).map(|(d, _)| d as u32));
        ids.sort_unstable();
        ids.dedup();
        // The host's rows follow the devices' in the column store (its keys
        // come last in PyTorch's dict): split off like one more device.
        let has_host = host_rows.is_some();
        rows.extend(host_rows);

        // Fast path: device lists hold consecutive, ascending rows covering
        // the whole column store (always so for real files): split, no copy.
        let mut expected = 0u32;
        let contiguous = rows.iter().all(|r| match r {
            DeviceRows::Range(range) => {
                let ok = range.start == expected || range.is_empty();
                expected += range.len() as u32;
                ok
            }
            DeviceRows::Scattered(list) => list.is_empty(),
        }) && expected as usize == self.trace.len();
        let mut traces: Vec<TraceBuilder> = if contiguous {
            let mut parts = Vec::with_capacity(rows.len());
            for r in rows.iter().rev() {
                let at = self.trace.len() - r.len();
                parts.push(if at == 0 { std::mem::take(&mut self.trace) } else { self.trace.split_off(at) });
            }
            parts.reverse();
            parts
        } else {
            rows.iter()
                .map(|r| match r {
                    DeviceRows::Range(range) => self.trace.gather(&range.clone().collect::<Vec<_>>()),
                    DeviceRows::Scattered(list) => self.trace.gather(list),
                })
                .collect()
        };
        self.trace = TraceBuilder::default();
        let mut traces: Vec<TraceColumns> = traces.drain(..).map(TraceColumns::from).collect();
        let host_trace = if has_host { traces.pop() } else { None };

        let mut by_device: FxHashMap<u32, Vec<Segment>> = FxHashMap::default();
        for (d, s) in segments {
            by_device.entry(d).or_default().push(s);
        }
        let devices = ids
            .into_iter()
            .map(|device| {
                let mut segments = by_device.remove(&device).unwrap_or_default();
                segments.sort_by_key(|s| s.address);
                let has_trace = (device as usize) < traces.len();
                let trace = traces.get_mut(device as usize).map(std::mem::take).unwrap_or_default();
                DeviceSnapshot { device, segments, trace, has_trace }
            })
            .collect();
        (devices, host_trace)
    }
}

/// The error for a root that is neither a dict nor a list.
fn not_a_snapshot(heap: &Heap, root: Value) -> ReadError {
    ReadError::NotASnapshot(format!(
        "the pickle holds {}, not a dict with 'segments' or a list of segments",
        heap.describe(root)
    ))
}
