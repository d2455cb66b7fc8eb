//! Segments and their blocks (with the blocks' `history` of the 1.13 and
//! 2.0 formats), from `segments` and `host_segments`.

use super::Reader;
use super::value::{as_bool, as_pair, as_str, as_u64, dict_items, get, list_items, wrong};
use super::words::{
    ACTIVE_ALLOCATED, ACTIVE_PENDING_FREE, ACTIVE_SIZE, ADDR, ADDRESS, ALLOCATED_SIZE, BLOCKS, DEVICE, FRAMES, HISTORY,
    INACTIVE, IS_EXPANDABLE, LARGE, REAL_SIZE, REQUESTED_SIZE, SEGMENT_POOL_ID, SEGMENT_TYPE, SIZE, SMALL, STATE,
    STREAM, TOTAL_SIZE,
};
use crate::error::ReadError;
use crate::pickle::{Heap, V, Value};
use crate::snapshot::frames::{EMPTY_STACK, StrId};
use crate::snapshot::model::{Block, BlockState, HistoryEntry, Segment, SegmentType};

impl Reader {
    /// One segment dict; returns (device, segment, whether blocks used `history`).
    pub(super) fn segment(
        &mut self,
        heap: &mut Heap,
        v: Value,
        list: &'static str,
        i: usize,
    ) -> Result<(u32, Segment, bool), ReadError> {
        let base = || format!("{list}[{i}]");
        let items = dict_items(heap, v, &base)?;
        let path_of = |f: &'static str| move || format!("{list}[{i}].{f}");
        let req = |key: StrId, f: &'static str| {
            get(&items, key).ok_or_else(|| ReadError::WrongType {
                path: format!("{list}[{i}].{f}"),
                expected: "a value (required field missing)",
                found: "nothing".into(),
            })
        };
        let opt_u64 = |heap: &Heap, key: StrId, f: &'static str| -> Result<Option<u64>, ReadError> {
            get(&items, key).map(|v| as_u64(heap, v, &path_of(f))).transpose()
        };
        let address = as_u64(heap, req(ADDRESS, "address")?, &path_of("address"))?;
        let total_size = as_u64(heap, req(TOTAL_SIZE, "total_size")?, &path_of("total_size"))?;
        let device = match get(&items, DEVICE) {
            Some(d) => u32::try_from(as_u64(heap, d, &path_of("device"))?)
                .map_err(|_| wrong(heap, &path_of("device"), "a device index", d))?,
            None => 0,
        };
        let stream = opt_u64(heap, STREAM, "stream")?.unwrap_or(0);
        let segment_type = match get(&items, SEGMENT_TYPE).map(|v| v.get()) {
            Some(V::Str(LARGE)) => SegmentType::Large,
            Some(V::Str(SMALL)) => SegmentType::Small,
            _ => SegmentType::Unknown,
        };
        let pool_id = match get(&items, SEGMENT_POOL_ID) {
            Some(p) => as_pair(heap, p, &path_of("segment_pool_id"))?,
            None => (0, 0),
        };
        let is_expandable = match get(&items, IS_EXPANDABLE) {
            Some(b) => as_bool(heap, b, &path_of("is_expandable"))?,
            None => false,
        };
        let stack = match get(&items, FRAMES) {
            Some(f) => self.stack_of(heap, f, &path_of("frames"))?,
            None => EMPTY_STACK,
        };
        let block_values = list_items(heap, req(BLOCKS, "blocks")?, &path_of("blocks"))?;
        // The blocks are charged to the budget: a blocks list shared by many
        // segments through the memo is one list in the pickle but a copy per
        // segment here.
        let cost = (block_values.len() * std::mem::size_of::<Block>()) as u64;
        heap.charge(cost, || format!("{list}[{i}].blocks"), self.stop.offset)?;
        let mut blocks = Vec::with_capacity(block_values.len());
        let mut next_address = address;
        let mut saw_history = false;
        for (j, b) in block_values.into_iter().enumerate() {
            if j % 4096 == 4095 {
                self.stop.check()?;
            }
            let (block, history) = self.block(heap, b, list, i, j, next_address)?;
            saw_history |= history;
            next_address = block.address.saturating_add(block.size);
            blocks.push(block);
        }
        let sum =
            |f: fn(&Block) -> bool, size: fn(&Block) -> u64| blocks.iter().filter(|b| f(b)).map(size).sum::<u64>();
        let allocated_size = match opt_u64(heap, ALLOCATED_SIZE, "allocated_size")? {
            Some(v) => v,
            None => sum(|b| b.state == BlockState::ActiveAllocated, |b| b.size),
        };
        let active_size = match opt_u64(heap, ACTIVE_SIZE, "active_size")? {
            Some(v) => v,
            None => sum(|b| b.state.is_active(), |b| b.size),
        };
        let requested_size = match opt_u64(heap, REQUESTED_SIZE, "requested_size")? {
            Some(v) => v,
            None => sum(|b| b.state.is_active(), |b| b.requested_size),
        };
        let segment = Segment {
            address,
            total_size,
            allocated_size,
            active_size,
            requested_size,
            stream,
            segment_type,
            pool_id,
            is_expandable,
            stack,
            blocks,
        };
        Ok((device, segment, saw_history))
    }

    /// Block `j` of `{list}[i]`; `implied_address` is where it starts when
    /// it has no `address` (1.13). Returns the block and whether it used
    /// `history` that way.
    fn block(
        &mut self,
        heap: &mut Heap,
        v: Value,
        list: &'static str,
        i: usize,
        j: usize,
        implied_address: u64,
    ) -> Result<(Block, bool), ReadError> {
        let base = || format!("{list}[{i}].blocks[{j}]");
        let items = dict_items(heap, v, &base)?;
        let path_of = |f: &'static str| move || format!("{list}[{i}].blocks[{j}].{f}");
        let size_v = get(&items, SIZE).ok_or_else(|| ReadError::WrongType {
            path: format!("{list}[{i}].blocks[{j}].size"),
            expected: "a value (required field missing)",
            found: "nothing".into(),
        })?;
        let size = as_u64(heap, size_v, &path_of("size"))?;
        let address = match get(&items, ADDRESS) {
            Some(a) => as_u64(heap, a, &path_of("address"))?,
            None => implied_address,
        };
        let requested_size = match get(&items, REQUESTED_SIZE) {
            Some(r) => as_u64(heap, r, &path_of("requested_size"))?,
            None => size,
        };
        let state = match get(&items, STATE) {
            Some(s) => match as_str(heap, s, &path_of("state"))? {
                ACTIVE_ALLOCATED => BlockState::ActiveAllocated,
                ACTIVE_PENDING_FREE => BlockState::ActivePendingFree,
                INACTIVE => BlockState::Inactive,
                _ => BlockState::Unknown,
            },
            None => BlockState::Unknown,
        };
        let mut stack = match get(&items, FRAMES) {
            Some(f) => self.stack_of(heap, f, &path_of("frames"))?,
            None => EMPTY_STACK,
        };
        let mut history = Vec::new();
        let saw_history = get(&items, HISTORY).is_some() && get(&items, ADDRESS).is_none();
        if let Some(h) = get(&items, HISTORY) {
            let entries = list_items(heap, h, &path_of("history"))?;
            let cost = (entries.len() * std::mem::size_of::<HistoryEntry>()) as u64;
            heap.charge(cost, || format!("{list}[{i}].blocks[{j}].history"), self.stop.offset)?;
            for (k, e) in entries.into_iter().enumerate() {
                let hpath = move |f: &'static str| move || format!("{list}[{i}].blocks[{j}].history[{k}].{f}");
                let fields = dict_items(heap, e, &|| format!("{list}[{i}].blocks[{j}].history[{k}]"))?;
                let addr = match get(&fields, ADDR) {
                    Some(a) => as_u64(heap, a, &hpath("addr"))?,
                    None => address,
                };
                let real_size = match get(&fields, REAL_SIZE) {
                    Some(r) => as_u64(heap, r, &hpath("real_size"))?,
                    None => size,
                };
                let hstack = match get(&fields, FRAMES) {
                    Some(f) => self.stack_of(heap, f, &hpath("frames"))?,
                    None => EMPTY_STACK,
                };
                history.push(HistoryEntry { addr, real_size, stack: hstack });
            }
            // 1.13/2.0 blocks keep their allocation's stack in the history,
            // newest entry first.
            if stack == EMPTY_STACK
                && let Some(newest) = history.first()
            {
                stack = newest.stack;
            }
        }
        Ok((Block { address, size, requested_size, state, stack, history }, saw_history))
    }
}
