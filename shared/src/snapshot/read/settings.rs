//! How the run was configured: PyTorch's `allocator_settings`, and the
//! `vramscope_capture` context our capture module adds (versions, NVML's
//! view of each device).

use super::value::{MAX_SETTINGS_BYTES, Stop, py_value, wrong};
use crate::error::ReadError;
use crate::pickle::{Heap, Value};
use crate::snapshot::model::{AllocatorSettings, CaptureContext, CaptureDevice, Fraction, ProcessMemory, PyValue};

/// `allocator_settings`: the free-form dict, with the settings we use read
/// out of it.
pub(super) fn allocator_settings(heap: &Heap, v: Value, stop: &Stop) -> Result<AllocatorSettings, ReadError> {
    let PyValue::Dict(raw) = py_value(heap, v, "allocator_settings", MAX_SETTINGS_BYTES, stop)? else {
        return Err(wrong(heap, &|| "allocator_settings".to_owned(), "a dict", v));
    };
    let mut s = AllocatorSettings::default();
    for (key, value) in &raw {
        match (key.as_str(), value) {
            ("PYTORCH_CUDA_ALLOC_CONF", PyValue::Str(c)) => s.alloc_conf = Some(c.clone()),
            ("max_split_size", PyValue::Int(i)) => s.max_split_size = u64::try_from(*i).ok(),
            ("expandable_segments", PyValue::Bool(b)) => s.expandable_segments = *b,
            ("garbage_collection_threshold", PyValue::Float(f)) => s.garbage_collection_threshold = *f,
            ("garbage_collection_threshold", PyValue::Int(i)) => s.garbage_collection_threshold = *i as f64,
            ("roundup_power2_divisions", PyValue::Dict(d)) => {
                s.roundup_power2_divisions = d
                    .iter()
                    .filter_map(|(k, v)| match (k.parse::<u64>(), v) {
                        (Ok(mib), PyValue::Int(n)) => Some((mib, u64::try_from(*n).unwrap_or(0))),
                        _ => None,
                    })
                    .collect();
                s.roundup_power2_divisions.sort_unstable();
            }
            _ => {}
        }
    }
    s.raw = raw;
    Ok(s)
}

/// Most devices and processes per device kept from `vramscope_capture`:
/// far above any real host, and what bounds the statistics a file makes
/// the server store and serve.
const MAX_CAPTURE_DEVICES: usize = 64;
const MAX_CAPTURE_PROCESSES: usize = 256;
/// Longest text kept from it (versions, backend, settings).
const MAX_CAPTURE_TEXT: usize = 4096;
/// Most bytes it may take converted, before it is cut to the limits
/// above (past them, it is ignored with a warning).
const MAX_CAPTURE_BYTES: u64 = 64 << 20;

/// `vramscope_capture`, written by our capture module. Read leniently: a
/// value of another shape is a warning, never a failed read (the snapshot
/// itself is PyTorch's and stands without it). Lists past their limits are
/// cut, with a warning; a text past its limit is left out.
pub(super) fn capture_context(
    heap: &Heap,
    v: Value,
    stop: &Stop,
    warnings: &mut Vec<String>,
) -> Result<Option<CaptureContext>, ReadError> {
    let value = match py_value(heap, v, "vramscope_capture", MAX_CAPTURE_BYTES, stop) {
        Ok(value) => value,
        // A time limit stops the read; it is no flaw of the context.
        Err(e @ ReadError::Cancelled { .. }) => return Err(e),
        Err(e) => {
            warnings.push(format!("vramscope_capture ignored: {e}"));
            return Ok(None);
        }
    };
    let PyValue::Dict(fields) = value else {
        warnings.push("vramscope_capture ignored: not a dict".to_owned());
        return Ok(None);
    };
    let mut cut = false;
    let text = |v: &PyValue| match v {
        PyValue::Str(s) if s.len() <= MAX_CAPTURE_TEXT => Some(s.clone()),
        _ => None,
    };
    let bytes = |v: &PyValue| match v {
        PyValue::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    // A memory fraction: a finite number in (0, 1]; anything else is left out.
    let fraction = |v: &PyValue| match v {
        PyValue::Float(f) if f.is_finite() && *f > 0.0 && *f <= 1.0 => Some(*f),
        PyValue::Int(1) => Some(1.0),
        _ => None,
    };
    let field = |d: &[(String, PyValue)], name: &str| d.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut capture = CaptureContext {
        torch_version: field(&fields, "torch_version").as_ref().and_then(text),
        backend: field(&fields, "backend").as_ref().and_then(text),
        alloc_conf: field(&fields, "alloc_conf").as_ref().and_then(text),
        alloc_conf_var: field(&fields, "alloc_conf_var").as_ref().and_then(text),
        pid: field(&fields, "pid").as_ref().and_then(bytes).and_then(|p| u32::try_from(p).ok()),
        devices: Vec::new(),
    };
    if let Some(PyValue::List(devices)) = field(&fields, "devices") {
        cut |= devices.len() > MAX_CAPTURE_DEVICES;
        for d in devices.into_iter().take(MAX_CAPTURE_DEVICES) {
            let PyValue::Dict(d) = d else { continue };
            let Some(device) = field(&d, "device").as_ref().and_then(bytes).and_then(|i| u32::try_from(i).ok()) else {
                continue;
            };
            let other_processes = match field(&d, "other_processes") {
                Some(PyValue::List(list)) => {
                    cut |= list.len() > MAX_CAPTURE_PROCESSES;
                    list.iter()
                        .take(MAX_CAPTURE_PROCESSES)
                        .filter_map(|p| match p {
                            PyValue::Dict(p) => Some(ProcessMemory {
                                pid: field(p, "pid").as_ref().and_then(bytes).and_then(|i| u32::try_from(i).ok())?,
                                used_bytes: field(p, "used_bytes").as_ref().and_then(bytes),
                            }),
                            _ => None,
                        })
                        .collect()
                }
                _ => Vec::new(),
            };
            capture.devices.push(CaptureDevice {
                device,
                process_used_bytes: field(&d, "process_used_bytes").as_ref().and_then(bytes),
                device_used_bytes: field(&d, "device_used_bytes").as_ref().and_then(bytes),
                device_total_bytes: field(&d, "device_total_bytes").as_ref().and_then(bytes),
                cuda_total_bytes: field(&d, "cuda_total_bytes").as_ref().and_then(bytes),
                memory_fraction: field(&d, "memory_fraction").as_ref().and_then(fraction).map(Fraction),
                capacity_bytes: field(&d, "capacity_bytes").as_ref().and_then(bytes).filter(|&c| c > 0),
                other_processes,
            });
        }
    }
    if cut {
        warnings.push(format!(
            "vramscope_capture: kept the first {MAX_CAPTURE_DEVICES} devices and {MAX_CAPTURE_PROCESSES} processes \
             per device"
        ));
    }
    Ok(Some(capture))
}
