//! One trace entry with every field the details panel shows: action,
//! address, size, stream, time, stack, `compile_context` and
//! `user_metadata` (PyTorch 2.4+), the free memory of an `oom`.

use serde::{Deserialize, Serialize};

use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::Action;

/// Query of the entry view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct EntryParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// Trace row.
    pub row: Option<u32>,
}

/// A trace entry, unpacked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryAnswer {
    /// Device.
    pub device: u32,
    /// Row.
    pub row: u32,
    /// Action, as PyTorch names it (`alloc`, `free_requested`, ...).
    pub action: String,
    /// Address.
    pub addr: u64,
    /// Bytes (requested, for alloc and free).
    pub size: u64,
    /// Raw `cudaStream_t`.
    pub stream: u64,
    /// Microseconds since the epoch; `None` when the trace has no times.
    pub time_us: Option<i64>,
    /// Interned stack.
    pub stack: u32,
    /// `torch.compile` context, when recorded.
    pub compile_context: Option<String>,
    /// User metadata (`torch.cuda.memory._set_memory_metadata`), when set.
    pub user_metadata: Option<String>,
    /// Free bytes on the device, for an `oom`.
    pub device_free: Option<u64>,
    /// The memory pool of the row's block or segment: `[0, 0]` the default
    /// pool, else a private pool (a CUDA graph's); see
    /// [`crate::pools`].
    pub pool: (i64, i64),
}

/// The fields of trace row `row`.
pub fn entry(a: &IndexedSnapshot, p: &EntryParams) -> Result<EntryAnswer, ViewError> {
    let device = a.device_or_first(p.device)?;
    let trace = &a.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?.trace;
    let row = p.row.ok_or_else(|| ViewError::BadRequest("give row: the trace row to show".to_owned()))?;
    if row as usize >= trace.len() {
        return Err(ViewError::BadRequest(format!("row {row} is past the trace's {} entries", trace.len())));
    }
    let e = trace.entry(row as usize);
    let strings = &a.snapshot.strings;
    let text = |id| Some(strings.get(id).to_owned()).filter(|s| !s.is_empty());
    let action = match e.action {
        Action::Other => trace.other_action_name(row).map_or("other", |s| strings.get(s)).to_owned(),
        known => known.name().to_owned(),
    };
    Ok(EntryAnswer {
        device,
        row,
        action,
        addr: e.addr,
        size: e.size,
        stream: trace.streams().get(e.stream as usize).copied().unwrap_or(0),
        time_us: trace.has_time().then_some(e.time_us),
        stack: e.stack,
        compile_context: text(e.compile_context),
        user_metadata: text(e.user_metadata),
        device_free: trace.device_free(row),
        pool: a.pool_map(device)?.pool(row),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::corpus;

    #[test]
    fn unpacks_a_row_and_refuses_rows_past_the_end() {
        let a = corpus("streams");
        let trace = &a.snapshot.device(0).expect("device 0").trace;
        let e = entry(&a, &EntryParams { row: Some(0), ..Default::default() }).expect("row 0");
        assert_eq!(e.action, trace.action(0).name());
        assert_eq!((e.addr, e.size), (trace.addrs()[0], trace.sizes()[0]));
        assert!(e.time_us.is_some(), "PyTorch 2.11 records times");
        // This run used a side stream: its entries name two streams.
        let streams: std::collections::HashSet<u64> = (0..trace.len() as u32)
            .map(|r| entry(&a, &EntryParams { row: Some(r), ..Default::default() }).expect("row").stream)
            .collect();
        assert!(streams.len() >= 2, "{streams:?}");
        let oom = corpus("oom_leak");
        let t = &oom.snapshot.device(0).expect("device 0").trace;
        let row = (0..t.len()).find(|&i| t.action(i) == Action::Oom).expect("an oom entry") as u32;
        let e = entry(&oom, &EntryParams { row: Some(row), ..Default::default() }).expect("oom row");
        assert_eq!(e.action, "oom");
        assert!(e.device_free.is_some());
        assert!(matches!(
            entry(&a, &EntryParams { row: Some(1 << 30), ..Default::default() }),
            Err(ViewError::BadRequest(_))
        ));
        assert!(matches!(entry(&a, &EntryParams::default()), Err(ViewError::BadRequest(_))));
    }

    #[test]
    fn says_which_pool_a_row_belongs_to() {
        let a = corpus("graph_manual");
        let trace = &a.snapshot.device(0).expect("device 0").trace;
        let pools: std::collections::BTreeSet<(i64, i64)> = (0..trace.len() as u32)
            .filter(|&r| trace.action(r as usize) == Action::Alloc)
            .map(|r| entry(&a, &EntryParams { row: Some(r), ..Default::default() }).expect("row").pool)
            .collect();
        assert_eq!(pools.into_iter().collect::<Vec<_>>(), vec![(0, 0), (1, 0)], "default and the graph's pool");
        let plain = corpus("streams");
        assert_eq!(entry(&plain, &EntryParams { row: Some(0), ..Default::default() }).expect("row").pool, (0, 0));
    }
}
