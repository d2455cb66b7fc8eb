//! `vramscope stats`' summary as text: the snapshot's format, frames and
//! settings, each device's counters (reserved, allocated, free, waste,
//! OOMs, memory outside the allocator) and pinned host memory.

use std::io::Write;

use vramscope_shared::snapshot::Compression;
use vramscope_shared::{DeviceStats, Snapshot};

use super::bytes;

/// `part` as a share of `whole`, one decimal: "12.5%"; "0%" of nothing.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 { "0%".to_owned() } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

/// The summary of `snap` read from `path`: its format, then each device's
/// counters (`devices`, from [`Snapshot::stats`]), then pinned host memory
/// (`host`) and the reader's notes.
pub(crate) fn write_summary(
    out: &mut impl Write,
    path: &std::path::Path,
    snap: &Snapshot,
    devices: &[DeviceStats],
    host: Option<&DeviceStats>,
) -> std::io::Result<()> {
    let protocol = snap.protocol.map_or("0/1".to_owned(), |p| p.to_string());
    writeln!(
        out,
        "{}: PyTorch memory snapshot, format {}{}, pickle protocol {protocol}, {}",
        path.display(),
        snap.format.as_str(),
        if snap.format.as_str() == "2.5" { "+" } else { "" },
        match snap.compression {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip-compressed",
            Compression::Zstd => "zstd-compressed",
        }
    )?;
    writeln!(
        out,
        "{} distinct frames, {} distinct stacks, {} annotations",
        snap.frames.frame_count(),
        snap.frames.stack_count(),
        snap.annotations.len()
    )?;
    if let Some(conf) = snap.allocator_settings.as_ref().and_then(|s| s.alloc_conf.as_deref()) {
        writeln!(out, "PYTORCH_CUDA_ALLOC_CONF: {:?}", conf)?;
    }
    if let Some(capture) = &snap.capture {
        let mut job = Vec::new();
        if let Some(v) = &capture.torch_version {
            job.push(format!("torch {v}"));
        }
        if let Some(b) = &capture.backend {
            job.push(format!("backend {b}"));
        }
        if let (Some(var), Some(conf)) = (&capture.alloc_conf_var, &capture.alloc_conf) {
            job.push(format!("{var}={conf:?}"));
        }
        writeln!(out, "captured by vramscope agent: {}", if job.is_empty() { "-".to_owned() } else { job.join(", ") })?;
    }
    if devices.is_empty() {
        writeln!(out, "no device has segments or a trace")?;
    }
    for d in devices {
        writeln!(out)?;
        let wrapped = if d.trace_wrapped { " (trace starts mid-run: ring buffer wrapped)" } else { "" };
        let expandable = match d.expandable_segments {
            0 => String::new(),
            n => format!(" ({n} expandable)"),
        };
        writeln!(
            out,
            "device {}: {} segments{expandable}, {} trace entries{wrapped}",
            d.device, d.segments, d.trace_entries
        )?;
        let peak = |p: Option<u64>| match p {
            Some(p) if d.peak_is_window_only => format!("   peak {} (within the trace window)", bytes(p)),
            Some(p) => format!("   peak {}", bytes(p)),
            None => "   peak unknown (no trace)".to_owned(),
        };
        writeln!(out, "  reserved            {:>12}{}", bytes(d.reserved_bytes), peak(d.reserved_peak_bytes))?;
        writeln!(out, "  allocated           {:>12}", bytes(d.allocated_bytes))?;
        writeln!(out, "  active              {:>12}", bytes(d.active_bytes))?;
        writeln!(out, "  requested           {:>12}{}", bytes(d.requested_bytes), peak(d.requested_peak_bytes))?;
        writeln!(
            out,
            "  cached, not in use  {:>12}   ({} of reserved)",
            bytes(d.reserved_unallocated_bytes),
            percent(d.reserved_unallocated_bytes, d.reserved_bytes)
        )?;
        writeln!(out, "  inactive split      {:>12}", bytes(d.inactive_split_bytes))?;
        writeln!(
            out,
            "  largest free block  {:>12}   (of {} free in total)",
            bytes(d.largest_free_block_bytes),
            bytes(d.free_bytes)
        )?;
        writeln!(out, "  rounding waste      {:>12}", bytes(d.internal_waste_bytes))?;
        writeln!(out, "  OOMs                {:>12}", d.ooms)?;
        if let (Some(used), Some(outside)) = (d.process_used_bytes, d.outside_allocator_bytes) {
            writeln!(
                out,
                "  outside allocator   {:>12}   (NVML saw the process use {}: CUDA context, NCCL, cuBLAS, \
                 other libraries)",
                bytes(outside),
                bytes(used)
            )?;
        }
    }
    if let Some(h) = host {
        writeln!(out)?;
        writeln!(
            out,
            "pinned host memory: {} segments, {} trace entries (read after PyTorch's source; not yet checked \
             against a real capture)",
            h.segments, h.trace_entries
        )?;
        let peak = |p: Option<u64>| p.map_or_else(String::new, |p| format!("   peak {}", bytes(p)));
        writeln!(out, "  pinned              {:>12}{}", bytes(h.reserved_bytes), peak(h.reserved_peak_bytes))?;
        writeln!(out, "  allocated           {:>12}", bytes(h.allocated_bytes))?;
        writeln!(out, "  requested           {:>12}{}", bytes(h.requested_bytes), peak(h.requested_peak_bytes))?;
        writeln!(out, "  cached, not in use  {:>12}", bytes(h.reserved_unallocated_bytes))?;
    }
    for w in &snap.warnings {
        writeln!(out, "note: {w}")?;
    }
    Ok(())
}
