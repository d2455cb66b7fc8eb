//! A device's trace as columns: one vector per field, one row per entry.
//!
//! Why columns: a trace is millions of small records read field by field
//! (a timeline sums `size` by `action`; a search scans `stack`). Columns keep
//! each entry at ~41 bytes, against hundreds as Rust structs of Python values.

use serde::Serialize;

use super::frames::{StackId, StrId};
use crate::column::Column;
use crate::index_file::{ColumnRef, IndexFileError, Reader, Writer, check};

/// What a trace entry records. Unknown (future) action names are kept as
/// [`Action::Other`] with their name in [`TraceColumns::other_action_name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A block handed to the program; `size` is the requested (unrounded) size.
    Alloc,
    /// The program freed a block; it may wait for stream events.
    FreeRequested,
    /// The block is back in the allocator's free pool.
    FreeCompleted,
    /// cudaMalloc of a new segment.
    SegmentAlloc,
    /// cudaFree of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// A snapshot was taken (`size` = active bytes).
    Snapshot,
    /// An allocation failed; `device_free` holds cudaMemGetInfo's free bytes.
    Oom,
    /// An action this reader does not know.
    Other,
}

impl Action {
    /// All actions with a fixed name, in code order.
    pub const KNOWN: [(&'static str, Action); 9] = [
        ("alloc", Action::Alloc),
        ("free_requested", Action::FreeRequested),
        ("free_completed", Action::FreeCompleted),
        ("segment_alloc", Action::SegmentAlloc),
        ("segment_free", Action::SegmentFree),
        ("segment_map", Action::SegmentMap),
        ("segment_unmap", Action::SegmentUnmap),
        ("snapshot", Action::Snapshot),
        ("oom", Action::Oom),
    ];

    /// The sign of the action's effect on reserved bytes (segments mapped
    /// or freed) and on requested bytes (blocks allocated, frees
    /// completed): the two running totals `stats`, the host view and the
    /// OOM post-mortem replay.
    pub fn byte_effect(self) -> (i8, i8) {
        match self {
            Action::SegmentAlloc | Action::SegmentMap => (1, 0),
            Action::SegmentFree | Action::SegmentUnmap => (-1, 0),
            Action::Alloc => (0, 1),
            Action::FreeCompleted => (0, -1),
            _ => (0, 0),
        }
    }

    /// PyTorch's name for the action (`"other"` for unknown ones).
    pub fn name(self) -> &'static str {
        Action::KNOWN.iter().find(|(_, a)| *a == self).map_or("other", |(n, _)| n)
    }

    pub(crate) fn from_code(code: u16) -> Action {
        Action::KNOWN.get(code as usize).map_or(Action::Other, |(_, a)| *a)
    }
}

/// The fields of one trace entry, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// The action.
    pub action: Action,
    /// Block or segment address (0 for `oom` and `snapshot`).
    pub addr: u64,
    /// Bytes (requested size for alloc/free; rounded request for `oom`).
    pub size: u64,
    /// Index into [`TraceColumns::streams`].
    pub stream: u32,
    /// Microseconds since the epoch (0 when the file has no times).
    pub time_us: i64,
    /// Stack of the entry.
    pub stack: StackId,
    /// `compile_context` string id (the empty string when absent).
    pub compile_context: StrId,
    /// `user_metadata` string id (the empty string when absent).
    pub user_metadata: StrId,
}

/// A trace stored as columns. Built by the reader (from a `TraceBuilder`),
/// or viewed in place in a persisted index file.
#[derive(Debug, Default, Clone)]
pub struct TraceColumns {
    pub(crate) action: Column<u16>,
    pub(crate) addr: Column<u64>,
    pub(crate) size: Column<u64>,
    pub(crate) stream: Column<u32>,
    pub(crate) time_us: Column<i64>,
    pub(crate) stack: Column<StackId>,
    pub(crate) compile_context: Column<StrId>,
    pub(crate) user_metadata: Column<StrId>,
    /// Sparse: (row, free bytes on the device) for `oom` entries.
    pub(crate) device_free: Vec<(u32, u64)>,
    /// Sparse: (row, pool id) for entries that carry `pool_id`.
    pub(crate) pool_id: Vec<(u32, (i64, i64))>,
    /// Sparse: (row, action name) for actions this reader does not know.
    pub(crate) other_actions: Vec<(u32, StrId)>,
    /// Distinct raw `cudaStream_t` values, indexed by the `stream` column.
    pub(crate) streams: Vec<u64>,
    /// Whether any entry had `time_us`.
    pub(crate) has_time: bool,
}

/// A trace being read: the same columns as growable vectors.
#[derive(Debug, Default, Clone)]
pub(crate) struct TraceBuilder {
    pub(crate) action: Vec<u16>,
    pub(crate) addr: Vec<u64>,
    pub(crate) size: Vec<u64>,
    pub(crate) stream: Vec<u32>,
    pub(crate) time_us: Vec<i64>,
    pub(crate) stack: Vec<StackId>,
    pub(crate) compile_context: Vec<StrId>,
    pub(crate) user_metadata: Vec<StrId>,
    pub(crate) device_free: Vec<(u32, u64)>,
    pub(crate) pool_id: Vec<(u32, (i64, i64))>,
    pub(crate) other_actions: Vec<(u32, StrId)>,
    pub(crate) streams: Vec<u64>,
    pub(crate) has_time: bool,
}

impl From<TraceBuilder> for TraceColumns {
    fn from(b: TraceBuilder) -> TraceColumns {
        TraceColumns {
            action: b.action.into(),
            addr: b.addr.into(),
            size: b.size.into(),
            stream: b.stream.into(),
            time_us: b.time_us.into(),
            stack: b.stack.into(),
            compile_context: b.compile_context.into(),
            user_metadata: b.user_metadata.into(),
            device_free: b.device_free,
            pool_id: b.pool_id,
            other_actions: b.other_actions,
            streams: b.streams,
            has_time: b.has_time,
        }
    }
}

impl TraceColumns {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.action.len()
    }

    /// Whether the trace is empty.
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// The action of row `i`.
    #[inline]
    pub fn action(&self, i: usize) -> Action {
        Action::from_code(self.action[i])
    }

    /// The address column.
    pub fn addrs(&self) -> &[u64] {
        &self.addr
    }

    /// The size column.
    pub fn sizes(&self) -> &[u64] {
        &self.size
    }

    /// The time column (all zero when the file has no times).
    pub fn times_us(&self) -> &[i64] {
        &self.time_us
    }

    /// The stack column.
    pub fn stacks(&self) -> &[StackId] {
        &self.stack
    }

    /// Whether the entries carry `time_us` (PyTorch 2.2+).
    pub fn has_time(&self) -> bool {
        self.has_time
    }

    /// Distinct raw stream values; the `stream` field indexes this.
    pub fn streams(&self) -> &[u64] {
        &self.streams
    }

    /// Row `i` unpacked.
    pub fn entry(&self, i: usize) -> TraceEntry {
        TraceEntry {
            action: self.action(i),
            addr: self.addr[i],
            size: self.size[i],
            stream: self.stream[i],
            time_us: self.time_us[i],
            stack: self.stack[i],
            compile_context: self.compile_context[i],
            user_metadata: self.user_metadata[i],
        }
    }

    /// The action name of an [`Action::Other`] row.
    pub fn other_action_name(&self, row: u32) -> Option<StrId> {
        sparse_get(&self.other_actions, row)
    }

    /// `device_free` of an `oom` row.
    pub fn device_free(&self, row: u32) -> Option<u64> {
        sparse_get(&self.device_free, row)
    }

    /// `pool_id` of a row, where recorded.
    pub fn pool_id(&self, row: u32) -> Option<(i64, i64)> {
        sparse_get(&self.pool_id, row)
    }

    /// Number of rows with this action.
    pub fn count(&self, action: Action) -> usize {
        (0..self.len()).filter(|&i| self.action(i) == action).count()
    }
}

impl TraceColumns {
    /// A growable copy of the trace (tests cut and splice traces so).
    #[cfg(test)]
    pub(crate) fn to_builder(&self) -> TraceBuilder {
        TraceBuilder {
            action: self.action.to_vec(),
            addr: self.addr.to_vec(),
            size: self.size.to_vec(),
            stream: self.stream.to_vec(),
            time_us: self.time_us.to_vec(),
            stack: self.stack.to_vec(),
            compile_context: self.compile_context.to_vec(),
            user_metadata: self.user_metadata.to_vec(),
            device_free: self.device_free.clone(),
            pool_id: self.pool_id.clone(),
            other_actions: self.other_actions.clone(),
            streams: self.streams.clone(),
            has_time: self.has_time,
        }
    }
}

impl TraceBuilder {
    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.action.len()
    }

    /// Copy the rows `rows` (in that order) into a new trace.
    pub(crate) fn gather(&self, rows: &[u32]) -> TraceBuilder {
        let mut out = TraceBuilder { streams: self.streams.clone(), has_time: self.has_time, ..Default::default() };
        for (new_row, &r) in rows.iter().enumerate() {
            let i = r as usize;
            out.action.push(self.action[i]);
            out.addr.push(self.addr[i]);
            out.size.push(self.size[i]);
            out.stream.push(self.stream[i]);
            out.time_us.push(self.time_us[i]);
            out.stack.push(self.stack[i]);
            out.compile_context.push(self.compile_context[i]);
            out.user_metadata.push(self.user_metadata[i]);
            let n = new_row as u32;
            if let Some(v) = sparse_get(&self.device_free, r) {
                out.device_free.push((n, v));
            }
            if let Some(v) = sparse_get(&self.pool_id, r) {
                out.pool_id.push((n, v));
            }
            if let Some(v) = sparse_get(&self.other_actions, r) {
                out.other_actions.push((n, v));
            }
        }
        out
    }

    /// Split off rows `at..` into a new trace (moves, no per-row copy of the front part).
    pub(crate) fn split_off(&mut self, at: usize) -> TraceBuilder {
        fn split_sparse<T>(v: &mut Vec<(u32, T)>, at: u32) -> Vec<(u32, T)> {
            let idx = v.partition_point(|(r, _)| *r < at);
            v.split_off(idx).into_iter().map(|(r, t)| (r - at, t)).collect()
        }
        let at32 = at as u32;
        TraceBuilder {
            action: self.action.split_off(at),
            addr: self.addr.split_off(at),
            size: self.size.split_off(at),
            stream: self.stream.split_off(at),
            time_us: self.time_us.split_off(at),
            stack: self.stack.split_off(at),
            compile_context: self.compile_context.split_off(at),
            user_metadata: self.user_metadata.split_off(at),
            device_free: split_sparse(&mut self.device_free, at32),
            pool_id: split_sparse(&mut self.pool_id, at32),
            other_actions: split_sparse(&mut self.other_actions, at32),
            streams: self.streams.clone(),
            has_time: self.has_time,
        }
    }
}

fn sparse_get<T: Copy>(v: &[(u32, T)], row: u32) -> Option<T> {
    v.binary_search_by_key(&row, |(r, _)| *r).ok().map(|i| v[i].1)
}

/// Where a trace's columns lie in an index file.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct TraceHeader {
    rows: usize,
    action: ColumnRef,
    addr: ColumnRef,
    size: ColumnRef,
    stream: ColumnRef,
    time_us: ColumnRef,
    stack: ColumnRef,
    compile_context: ColumnRef,
    user_metadata: ColumnRef,
    device_free_rows: ColumnRef,
    device_free: ColumnRef,
    pool_id_rows: ColumnRef,
    pool_id: ColumnRef,
    other_action_rows: ColumnRef,
    other_actions: ColumnRef,
    streams: ColumnRef,
    has_time: bool,
}

impl TraceColumns {
    /// Write the columns to an index file.
    pub(crate) fn save<W: std::io::Write>(&self, w: &mut Writer<W>) -> std::io::Result<TraceHeader> {
        fn rows<T>(v: &[(u32, T)]) -> Vec<u32> {
            v.iter().map(|(r, _)| *r).collect()
        }
        let pools: Vec<[i64; 2]> = self.pool_id.iter().map(|(_, (a, b))| [*a, *b]).collect();
        Ok(TraceHeader {
            rows: self.len(),
            action: w.column(&self.action)?,
            addr: w.column(&self.addr)?,
            size: w.column(&self.size)?,
            stream: w.column(&self.stream)?,
            time_us: w.column(&self.time_us)?,
            stack: w.column(&self.stack)?,
            compile_context: w.column(&self.compile_context)?,
            user_metadata: w.column(&self.user_metadata)?,
            device_free_rows: w.column(&rows(&self.device_free))?,
            device_free: w.column(&self.device_free.iter().map(|(_, v)| *v).collect::<Vec<u64>>())?,
            pool_id_rows: w.column(&rows(&self.pool_id))?,
            pool_id: w.column(&pools)?,
            other_action_rows: w.column(&rows(&self.other_actions))?,
            other_actions: w.column(&self.other_actions.iter().map(|(_, v)| *v).collect::<Vec<u32>>())?,
            streams: w.column(&self.streams)?,
            has_time: self.has_time,
        })
    }

    /// View the columns of an index file. Ids into the string, stack and
    /// stream tables are checked against their sizes.
    pub(crate) fn load(r: &Reader, h: &TraceHeader, strings: usize, stacks: usize) -> Result<Self, IndexFileError> {
        fn sparse<T: bytemuck::Pod, U>(
            r: &Reader,
            rows: &ColumnRef,
            values: &ColumnRef,
            f: impl Fn(T) -> U,
        ) -> Result<Vec<(u32, U)>, IndexFileError> {
            let rows = r.column::<u32>(rows)?;
            let values = r.column_of::<T>(values, rows.len())?;
            check(rows.windows(2).all(|w| w[0] < w[1]), || "sparse rows out of order".to_owned())?;
            Ok(rows.iter().zip(values.iter()).map(|(&row, &v)| (row, f(v))).collect())
        }
        let n = h.rows;
        let t = TraceColumns {
            action: r.column_of(&h.action, n)?,
            addr: r.column_of(&h.addr, n)?,
            size: r.column_of(&h.size, n)?,
            stream: r.column_of(&h.stream, n)?,
            time_us: r.column_of(&h.time_us, n)?,
            stack: r.column_of(&h.stack, n)?,
            compile_context: r.column_of(&h.compile_context, n)?,
            user_metadata: r.column_of(&h.user_metadata, n)?,
            device_free: sparse(r, &h.device_free_rows, &h.device_free, |v: u64| v)?,
            pool_id: sparse(r, &h.pool_id_rows, &h.pool_id, |v: [i64; 2]| (v[0], v[1]))?,
            other_actions: sparse(r, &h.other_action_rows, &h.other_actions, |v: u32| v)?,
            streams: r.column::<u64>(&h.streams)?.to_vec(),
            has_time: h.has_time,
        };
        let below = |col: &[u32], n: usize| col.iter().all(|&v| (v as usize) < n);
        check(below(&t.stack, stacks), || "a trace stack id past the stack table".to_owned())?;
        check(below(&t.stream, t.streams.len().max(1)), || "a trace stream past the stream table".to_owned())?;
        check(below(&t.compile_context, strings.max(1)) && below(&t.user_metadata, strings.max(1)), || {
            "a trace string id past the string table".to_owned()
        })?;
        check(t.other_actions.iter().all(|&(_, s)| (s as usize) < strings.max(1)), || {
            "an action name past the string table".to_owned()
        })?;
        Ok(t)
    }
}
