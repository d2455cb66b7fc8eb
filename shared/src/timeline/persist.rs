//! The timelines in an index file: where each device's columns lie, and
//! reading them back (checked, never trusted).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::allocations::{AllocItem, AllocationIndex, NONE};
use super::curves::{Curves, Rows, SUB};
use super::{DeviceTimeline, TimelineIndex};
use crate::column::Column;
use crate::index_file::{ColumnRef, IndexFileError, Reader, Writer, check};

/// Where a device's timeline lies in an index file.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DeviceTimelineHeader {
    device: u32,
    rows: usize,
    times: TimesHeader,
    curve_sub_starts: ColumnRef,
    curve_sub_ranges: ColumnRef,
    curve_levels: [Vec<ColumnRef>; 3],
    oom_rows: ColumnRef,
    trace_wrapped: bool,
    items: ColumnRef,
    tree: ColumnRef,
    stride: u64,
    checkpoint_starts: ColumnRef,
    checkpoint_ids: ColumnRef,
}

/// Where a timeline's x positions on the time axis come from.
#[derive(Debug, Serialize, Deserialize)]
enum TimesHeader {
    /// The trace has no times.
    None,
    /// The trace's own `time_us` (never going back).
    Trace,
    /// Their running maximum, written apart.
    Own(ColumnRef),
}

impl TimelineIndex {
    /// Write the timelines to an index file (times shared with the trace
    /// are not written twice).
    pub(crate) fn save<W: std::io::Write>(&self, w: &mut Writer<W>) -> std::io::Result<Vec<DeviceTimelineHeader>> {
        let mut out = Vec::new();
        for d in &self.devices {
            let times = match &d.times {
                None => TimesHeader::None,
                Some(_) if d.times_from_trace => TimesHeader::Trace,
                Some(t) => TimesHeader::Own(w.column(t)?),
            };
            let a = d.allocation_index();
            out.push(DeviceTimelineHeader {
                device: d.device,
                rows: d.rows,
                times,
                curve_sub_starts: w.column(&d.curves.sub_starts)?,
                curve_sub_ranges: w.column(&d.curves.sub_ranges)?,
                curve_levels: [
                    d.curves.levels[0].iter().map(|l| w.column(l)).collect::<std::io::Result<_>>()?,
                    d.curves.levels[1].iter().map(|l| w.column(l)).collect::<std::io::Result<_>>()?,
                    d.curves.levels[2].iter().map(|l| w.column(l)).collect::<std::io::Result<_>>()?,
                ],
                oom_rows: w.column(&d.oom_rows)?,
                trace_wrapped: d.trace_wrapped,
                items: w.column(&a.items)?,
                tree: w.column(&a.tree)?,
                stride: a.stride,
                checkpoint_starts: w.column(&a.checkpoint_starts)?,
                checkpoint_ids: w.column(&a.checkpoint_ids)?,
            });
        }
        Ok(out)
    }

    /// View the timelines of an index file, checking every id the
    /// queries follow. `trace(device)` is the device's trace.
    pub(crate) fn load<'t>(
        r: &Reader,
        headers: &[DeviceTimelineHeader],
        trace: impl Fn(u32) -> Option<&'t crate::snapshot::TraceColumns>,
    ) -> Result<TimelineIndex, IndexFileError> {
        let mut devices = Vec::with_capacity(headers.len());
        for h in headers {
            let rows = h.rows;
            let times = match &h.times {
                TimesHeader::None => None,
                TimesHeader::Trace => {
                    let t = trace(h.device).map(|t| t.time_us.clone()).filter(|t| t.len() == rows && t.is_sorted());
                    Some(
                        t.ok_or_else(|| IndexFileError::Header(format!("device {}: no sorted trace times", h.device)))?,
                    )
                }
                TimesHeader::Own(c) => Some(r.column_of(c, rows)?),
            };
            check(times.as_ref().is_none_or(|t| t.is_sorted()), || "timeline times out of order".to_owned())?;
            let columns = trace(h.device).filter(|t| t.len() == rows);
            let columns = columns
                .ok_or_else(|| IndexFileError::Header(format!("device {}: no trace of {rows} rows", h.device)))?;
            let lengths = Curves::level_lengths(rows);
            let mut levels: [Vec<Column<[u64; 2]>>; 3] = Default::default();
            for (c, refs) in h.curve_levels.iter().enumerate() {
                check(refs.len() == lengths.len(), || format!("{} min/max levels for {rows} rows", refs.len()))?;
                levels[c] = refs.iter().zip(&lengths).map(|(l, &n)| r.column_of(l, n)).collect::<Result<_, _>>()?;
            }
            let curves = Curves {
                sub_starts: r.column_of(&h.curve_sub_starts, rows.div_ceil(SUB) + 1)?,
                sub_ranges: r.column_of(&h.curve_sub_ranges, rows.div_ceil(SUB))?,
                levels,
            };
            let oom_rows: Column<u32> = r.column(&h.oom_rows)?;
            check(oom_rows.iter().all(|&o| (o as usize) < rows), || "an oom row past the trace".to_owned())?;
            let items: Column<AllocItem> = r.column(&h.items)?;
            let m = items.len();
            let end = rows as u64 + 1;
            check(
                items.iter().all(|it| {
                    it.lo <= it.hi
                        && u64::from(it.hi) <= end
                        && (it.free_requested == NONE || (it.free_requested as usize) < rows)
                }) && items.is_sorted_by_key(|it| it.lo),
                || "an allocation's rows past the trace".to_owned(),
            )?;
            let tree: Column<u32> = r.column_of(&h.tree, 2 * m)?;
            check(tree.iter().all(|&i| (i as usize) < m.max(1)), || "a tree node past the allocations".to_owned())?;
            check(h.stride >= 1, || "a checkpoint stride of 0".to_owned())?;
            let checkpoints = rows / usize::try_from(h.stride).unwrap_or(usize::MAX) + 1;
            let starts: Column<u32> = r.column_of(&h.checkpoint_starts, checkpoints + 1)?;
            let ids: Column<u32> = r.column(&h.checkpoint_ids)?;
            check(
                starts.first() == Some(&0)
                    && starts.is_sorted()
                    && starts.last().is_some_and(|&e| e as usize == ids.len())
                    && ids.iter().all(|&i| (i as usize) < m),
                || "checkpoint lists out of order".to_owned(),
            )?;
            devices.push(DeviceTimeline {
                device: h.device,
                rows,
                times_from_trace: matches!(h.times, TimesHeader::Trace),
                times,
                columns: Rows { action: columns.action.clone(), size: columns.size.clone() },
                curves,
                oom_rows,
                trace_wrapped: h.trace_wrapped,
                allocations: OnceLock::from(AllocationIndex {
                    items,
                    tree,
                    stride: h.stride,
                    checkpoint_starts: starts,
                    checkpoint_ids: ids,
                }),
                intervals: Column::default(),
            });
        }
        Ok(TimelineIndex { devices })
    }
}
