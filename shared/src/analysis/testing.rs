//! Small snapshots built in memory for the analysis unit tests.

use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

use crate::snapshot::{
    Action, Annotation, AnnotationStage, Block, BlockState, Compression, DeviceSnapshot, FormatVersion, Frame,
    FrameTable, Segment, SegmentType, Snapshot, StackId, Strings,
};

/// A device whose trace is these (action, address, size) rows on stream 0,
/// one every µs and with no stacks, and whose final state is `segments`.
pub(crate) fn rows_device(rows: &[(Action, u64, u64)], segments: Vec<Segment>) -> DeviceSnapshot {
    let mut trace = crate::snapshot::trace::TraceBuilder { streams: vec![0], ..Default::default() };
    for (i, &(action, addr, size)) in rows.iter().enumerate() {
        let code = Action::KNOWN.iter().position(|(_, a)| *a == action).expect("a known action");
        trace.action.push(code as u16);
        trace.addr.push(addr);
        trace.size.push(size);
        trace.stream.push(0);
        trace.time_us.push(1000 + i as i64);
        trace.stack.push(0);
        trace.compile_context.push(0);
        trace.user_metadata.push(0);
    }
    DeviceSnapshot { device: 0, segments, trace: trace.into(), has_trace: true }
}

/// One device: a trace built entry by entry (one every 10 µs) and the final segments.
pub(crate) struct Build {
    strings: IndexSet<Box<str>, FxBuildHasher>,
    frames: FrameTable,
    trace: crate::snapshot::trace::TraceBuilder,
    segments: Vec<Segment>,
    annotations: Vec<Annotation>,
}

impl Build {
    pub(crate) fn new() -> Build {
        let mut strings = IndexSet::default();
        strings.insert("".into());
        let trace = crate::snapshot::trace::TraceBuilder { streams: vec![0], has_time: true, ..Default::default() };
        Build { strings, frames: FrameTable::default(), trace, segments: Vec::new(), annotations: Vec::new() }
    }

    fn string(&mut self, s: &str) -> u32 {
        self.strings.insert_full(s.into()).0 as u32
    }

    /// Intern a stack, innermost frame first.
    pub(crate) fn stack(&mut self, frames: &[(&str, i64, &str)]) -> StackId {
        let ids: Vec<u32> = frames
            .iter()
            .map(|&(file, line, name)| {
                let frame = Frame { filename: self.string(file), line, name: self.string(name) };
                self.frames.intern_frame(frame)
            })
            .collect();
        self.frames.intern_stack(&ids)
    }

    /// The time of the next entry.
    pub(crate) fn now(&self) -> i64 {
        10 * self.trace.len() as i64
    }

    /// Append a trace entry.
    pub(crate) fn event(&mut self, action: Action, addr: u64, size: u64, stack: StackId) {
        let code = Action::KNOWN.iter().position(|(_, a)| *a == action).unwrap_or(0) as u16;
        let now = self.now();
        let t = &mut self.trace;
        t.action.push(code);
        t.addr.push(addr);
        t.size.push(size);
        t.stream.push(0);
        t.time_us.push(now);
        t.stack.push(stack);
        t.compile_context.push(0);
        t.user_metadata.push(0);
    }

    /// Append an `oom` entry.
    pub(crate) fn oom(&mut self, size: u64, device_free: u64) {
        let row = self.trace.len() as u32;
        self.event(Action::Oom, 0, size, 0);
        self.trace.device_free.push((row, device_free));
    }

    /// Append an annotation, timed between the last entry and the next.
    pub(crate) fn annotate(&mut self, stage: AnnotationStage, name: &str) {
        let time_us = self.now() - 5;
        self.annotations.push(Annotation { device: 0, stage, name: name.to_owned(), time_us });
    }

    /// Add a final segment tiled by `blocks`: (size, state, requested, stack).
    pub(crate) fn segment(&mut self, address: u64, small: bool, blocks: &[(u64, BlockState, u64, StackId)]) {
        let mut at = address;
        let blocks: Vec<Block> = blocks
            .iter()
            .map(|&(size, state, requested_size, stack)| {
                let b = Block { address: at, size, requested_size, state, stack, history: Vec::new() };
                at += size;
                b
            })
            .collect();
        let sum = |f: &dyn Fn(&Block) -> bool| blocks.iter().filter(|b| f(b)).map(|b| b.size).sum();
        self.segments.push(Segment {
            address,
            total_size: at - address,
            allocated_size: sum(&|b| b.state == BlockState::ActiveAllocated),
            active_size: sum(&|b| b.state.is_active()),
            requested_size: 0,
            stream: 0,
            segment_type: if small { SegmentType::Small } else { SegmentType::Large },
            pool_id: (0, 0),
            is_expandable: false,
            stack: 0,
            blocks,
        });
    }

    pub(crate) fn finish(self) -> Snapshot {
        Snapshot {
            host: None,
            format: FormatVersion::V2_5,
            protocol: Some(4),
            compression: Compression::None,
            strings: Strings::new(self.strings),
            frames: self.frames,
            devices: vec![DeviceSnapshot {
                device: 0,
                segments: self.segments,
                trace: self.trace.into(),
                has_trace: true,
            }],
            allocator_settings: None,
            capture: None,
            annotations: self.annotations,
            warnings: Vec::new(),
        }
    }
}
