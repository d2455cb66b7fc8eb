//! A run's program: the requests the job made of the allocator, in order,
//! with each free tied to the allocation it frees. What the allocator did on
//! its own (segments, addresses) is left out: the model re-derives it at the
//! predicted size.

use rustc_hash::FxHashMap;
use xxhash_rust::xxh3::Xxh3;

use crate::snapshot::{Action, DeviceSnapshot, Snapshot, StackId};

/// What one event of a program does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `alloc` of allocation `n`.
    Alloc,
    /// `free_requested` of allocation `n`.
    FreeRequested,
    /// `free_completed` of allocation `n`.
    FreeCompleted,
    /// A run of `segment_free`/`segment_unmap` entries: `empty_cache()`.
    EmptyCache,
}

/// One event of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) op: Op,
    /// The allocation (index into [`Program::allocations`]); 0 for
    /// [`Op::EmptyCache`].
    pub(crate) allocation: u32,
}

/// One allocation of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProgramAllocation {
    /// Requested bytes.
    pub(crate) size: u64,
    /// Raw `cudaStream_t`.
    pub(crate) stream: u64,
    /// Its stack in the run's file.
    pub(crate) stack: StackId,
    /// Its stack's frames, hashed as text (stack ids are per file).
    pub(crate) key: u64,
    /// Trace row of the `alloc` in the run's file.
    pub(crate) row: u32,
}

/// The requests of one device's trace.
#[derive(Clone, Debug, Default)]
pub(crate) struct Program {
    pub(crate) events: Vec<Event>,
    pub(crate) allocations: Vec<ProgramAllocation>,
    /// `oom` entries: requests that failed in the recorded run (left out).
    pub(crate) recorded_ooms: usize,
    /// Frees of an address with no live allocation (a trace that lost
    /// entries); left out.
    pub(crate) unmatched_frees: usize,
    /// Some allocation went to a CUDA graph's private pool.
    pub(crate) private_pools: bool,
}

impl Program {
    /// The program of `device`, whose trace must start from an empty
    /// allocator (the caller checks).
    pub(crate) fn of(snapshot: &Snapshot, device: &DeviceSnapshot) -> Program {
        let trace = &device.trace;
        let streams = trace.streams();
        let mut keys = StackKeys::new(snapshot);
        let mut live: FxHashMap<u64, u32> = FxHashMap::default();
        let mut p = Program {
            events: Vec::with_capacity(trace.len()),
            private_pools: device.segments.iter().any(|s| s.pool_id != (0, 0)),
            ..Program::default()
        };
        let mut in_release = false;
        for i in 0..trace.len() {
            let action = trace.action(i);
            let addr = trace.addrs()[i];
            let releasing = matches!(action, Action::SegmentFree | Action::SegmentUnmap);
            match action {
                Action::Alloc => {
                    let n = p.allocations.len() as u32;
                    let stack = trace.stacks()[i];
                    p.allocations.push(ProgramAllocation {
                        size: trace.sizes()[i],
                        stream: streams.get(trace.stream[i] as usize).copied().unwrap_or(0),
                        stack,
                        key: keys.key(stack),
                        row: i as u32,
                    });
                    // An address still live: the trace lost its free.
                    live.insert(addr, n);
                    p.events.push(Event { op: Op::Alloc, allocation: n });
                }
                Action::FreeRequested => match live.get(&addr) {
                    Some(&n) => p.events.push(Event { op: Op::FreeRequested, allocation: n }),
                    None => p.unmatched_frees += 1,
                },
                Action::FreeCompleted => match live.remove(&addr) {
                    Some(n) => p.events.push(Event { op: Op::FreeCompleted, allocation: n }),
                    None => p.unmatched_frees += 1,
                },
                Action::SegmentFree | Action::SegmentUnmap if !in_release => {
                    p.events.push(Event { op: Op::EmptyCache, allocation: 0 });
                }
                Action::Oom => p.recorded_ooms += 1,
                _ => {}
            }
            // A run of releases is one `empty_cache()`; `segment_alloc`s
            // between them do not end it.
            if !matches!(action, Action::SegmentAlloc | Action::SegmentMap | Action::Snapshot | Action::Other) {
                in_release = releasing;
            }
        }
        p
    }

    /// For each allocation, whether it was freed before the program asked
    /// for anything else: the scratch of one library call (a convolution's
    /// workspace). An allocation that other allocations were made beside
    /// (cuDNN's RNN reserve space, kept for the backward) holds state.
    pub(crate) fn freed_before_the_next_allocation(&self) -> Vec<bool> {
        let mut alone = vec![false; self.allocations.len()];
        let mut last: Option<u32> = None;
        for e in &self.events {
            match e.op {
                Op::Alloc => last = Some(e.allocation),
                Op::FreeRequested | Op::FreeCompleted if last == Some(e.allocation) => {
                    alone[e.allocation as usize] = true;
                }
                _ => {}
            }
        }
        alone
    }
}

/// Stacks hashed by their frames' text, each stack once.
struct StackKeys<'a> {
    snapshot: &'a Snapshot,
    keys: FxHashMap<StackId, u64>,
}

impl<'a> StackKeys<'a> {
    fn new(snapshot: &'a Snapshot) -> StackKeys<'a> {
        StackKeys { snapshot, keys: FxHashMap::default() }
    }

    fn key(&mut self, stack: StackId) -> u64 {
        let snapshot = self.snapshot;
        *self.keys.entry(stack).or_insert_with(|| {
            let mut h = Xxh3::new();
            for frame in snapshot.frames.stack(stack).iter().filter_map(|&f| snapshot.frames.frame(f)) {
                h.update(snapshot.strings.get(frame.filename).as_bytes());
                h.update(&[0]);
                h.update(&frame.line.to_le_bytes());
                h.update(snapshot.strings.get(frame.name).as_bytes());
                h.update(&[0]);
            }
            h.digest()
        })
    }
}
