//! A device's trace as columns: one vector per field, one row per entry.
//!
//! Why columns: a trace is millions of small records read field by field
//! (a timeline sums `size` by `action`; a search scans `stack`). Columns keep
//! each entry at ~41 bytes, against hundreds as Rust structs of Python values.

use serde::Serialize;

use super::frames::{StackId, StrId};

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

    /// PyTorch's name for the action (`"other"` for unknown ones).
    pub fn name(self) -> &'static str {
        Action::KNOWN.iter().find(|(_, a)| *a == self).map_or("other", |(n, _)| n)
    }

    fn from_code(code: u16) -> Action {
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

/// A trace stored as columns.
#[derive(Debug, Default, Clone)]
pub struct TraceColumns {
    pub(crate) action: Vec<u16>,
    pub(crate) addr: Vec<u64>,
    pub(crate) size: Vec<u64>,
    pub(crate) stream: Vec<u32>,
    pub(crate) time_us: Vec<i64>,
    pub(crate) stack: Vec<StackId>,
    pub(crate) compile_context: Vec<StrId>,
    pub(crate) user_metadata: Vec<StrId>,
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

    /// Copy the rows `rows` (in that order) into a new trace.
    pub(crate) fn gather(&self, rows: &[u32]) -> TraceColumns {
        let mut out = TraceColumns { streams: self.streams.clone(), has_time: self.has_time, ..Default::default() };
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
            if let Some(v) = self.device_free(r) {
                out.device_free.push((n, v));
            }
            if let Some(v) = self.pool_id(r) {
                out.pool_id.push((n, v));
            }
            if let Some(v) = self.other_action_name(r) {
                out.other_actions.push((n, v));
            }
        }
        out
    }

    /// Split off rows `at..` into a new trace (moves, no per-row copy of the front part).
    pub(crate) fn split_off(&mut self, at: usize) -> TraceColumns {
        fn split_sparse<T>(v: &mut Vec<(u32, T)>, at: u32) -> Vec<(u32, T)> {
            let idx = v.partition_point(|(r, _)| *r < at);
            v.split_off(idx).into_iter().map(|(r, t)| (r - at, t)).collect()
        }
        let at32 = at as u32;
        TraceColumns {
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
