//! Structure-aware fuzzing of the snapshot reader. A pickle bomb is a few
//! well-formed opcodes repeated many times, which byte-level mutation rarely
//! builds; so the input is read as an opcode program instead:
//!
//! - byte 0: flags. Bit 0: gzip the pickle. Bit 1: wrap the program in a
//!   snapshot skeleton (`{"segments": [], "device_traces": [[<program>]]}`),
//!   so that what the program leaves on the stack becomes trace entries.
//! - then records of 3 bytes `(opcode choice, repeat count, argument)`: each
//!   emits one well-formed opcode (or a short fixed group, such as a whole
//!   trace entry), with an argument of the right width taken from the
//!   argument byte, repeated `1..=2^(count % 17)` times.
//!
//! The pickle starts with PROTO 4, ends with STOP and is at most 8 MiB. The
//! reader must return (a snapshot or an error), never panic, hang or pass
//! its 64 MiB budget by much.
#![no_main]

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use libfuzzer_sys::fuzz_target;
use vramscope_shared::intervals::SnapshotIntervals;
use vramscope_shared::{ReadOptions, read_snapshot};

/// Largest generated pickle (before compression).
const MAX_PICKLE: usize = 8 << 20;
/// Room kept for the skeleton's closing opcodes and STOP.
const RESERVE: usize = 16;

/// Keys and values a snapshot uses, for the string opcodes.
const KEYS: &[&str] = &[
    "action",
    "segments",
    "device_traces",
    "frames",
    "addr",
    "size",
    "stream",
    "time_us",
    "blocks",
    "state",
    "total_size",
    "allocator_settings",
    "filename",
    "line",
    "name",
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
    "device",
    "address",
    "allocated_size",
    "active_size",
    "requested_size",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "history",
    "real_size",
    "compile_context",
    "user_metadata",
    "pool_id",
    "device_free",
    "external_annotations",
    "stage",
    "active_allocated",
    "active_pending_free",
    "inactive",
    "large",
    "small",
    "",
    "x",
    "\u{e9}\u{1f600}",
];

/// Trace actions, for the whole-entry group.
const ACTIONS: &[&str] = &[
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
];

/// The number of opcode choices (see `emit`).
const CHOICES: u8 = 46;

/// Builds the pickle; tracks how many memo slots have been written so that
/// memo reads are in range most of the time.
struct Gen {
    out: Vec<u8>,
    memo_len: u32,
    full: bool,
}

fn short_str(piece: &mut Vec<u8>, s: &str) {
    piece.push(0x8c);
    piece.push(s.len() as u8);
    piece.extend_from_slice(s.as_bytes());
}

fn key(arg: u8) -> &'static str {
    KEYS[arg as usize % KEYS.len()]
}

impl Gen {
    /// A memo slot to read: in range unless the argument is 0xF0 or more.
    fn get_slot(&self, arg: u8) -> u32 {
        if arg >= 0xf0 || self.memo_len == 0 { u32::from(arg) } else { u32::from(arg) % self.memo_len }
    }

    /// Append `piece` `reps` times, fewer if the pickle would pass its cap.
    fn repeat(&mut self, piece: &[u8], reps: usize) {
        if piece.is_empty() {
            return;
        }
        let room = MAX_PICKLE.saturating_sub(self.out.len() + RESERVE) / piece.len();
        if room < reps {
            self.full = true;
        }
        for _ in 0..reps.min(room) {
            self.out.extend_from_slice(piece);
        }
    }

    /// Emit one record: opcode choice `op`, `reps` repetitions, argument `arg`.
    fn emit(&mut self, op: u8, reps: usize, arg: u8) {
        let mut p = Vec::with_capacity(64);
        match op % CHOICES {
            0 => p.push(b'('),
            1 => p.push(b'0'),
            2 => p.push(b'1'),
            3 => p.push(b'2'),
            4 => {
                // BININT: small, negative and wide values.
                let v: i32 = match arg % 4 {
                    0 => i32::from(arg),
                    1 => -i32::from(arg),
                    2 => i32::from(arg) << 20,
                    _ => i32::MIN + i32::from(arg),
                };
                p.push(b'J');
                p.extend_from_slice(&v.to_le_bytes());
            }
            5 => p.extend_from_slice(&[b'K', arg]),
            6 => {
                p.push(b'M');
                p.extend_from_slice(&(u16::from(arg) * 257).to_le_bytes());
            }
            7 => {
                // LONG1 of 0..=16 bytes: addresses, negatives, 128-bit values.
                let n = arg % 17;
                p.extend_from_slice(&[0x8a, n]);
                p.extend((0..n).map(|i| arg.wrapping_mul(31).wrapping_add(i)));
            }
            8 => {
                // LONG4 of up to 40 bytes (wider than 128 bits).
                let n = u32::from(arg % 41);
                p.push(0x8b);
                p.extend_from_slice(&n.to_le_bytes());
                p.extend((0..n).map(|i| arg ^ i as u8));
            }
            9 => p.push(b'N'),
            10 => p.push(0x88),
            11 => p.push(0x89),
            12 => {
                let f: f64 = match arg % 6 {
                    0 => 0.0,
                    1 => 1.5,
                    2 => -1.0,
                    3 => f64::NAN,
                    4 => f64::INFINITY,
                    _ => 1e300,
                };
                p.push(b'G');
                p.extend_from_slice(&f.to_be_bytes());
            }
            13 => short_str(&mut p, key(arg)),
            14 => {
                let s = key(arg);
                p.push(b'X');
                p.extend_from_slice(&(s.len() as u32).to_le_bytes());
                p.extend_from_slice(s.as_bytes());
            }
            15 => {
                let s = key(arg);
                p.push(0x8d);
                p.extend_from_slice(&(s.len() as u64).to_le_bytes());
                p.extend_from_slice(s.as_bytes());
            }
            16 => {
                let n = arg % 32;
                p.extend_from_slice(&[b'C', n]);
                p.extend((0..n).map(|i| arg.wrapping_add(i)));
            }
            17 => {
                let n = u32::from(arg % 64);
                p.push(b'B');
                p.extend_from_slice(&n.to_le_bytes());
                p.extend((0..n).map(|i| arg.wrapping_add(i as u8)));
            }
            18 => {
                let n = u64::from(arg % 64);
                p.push(0x8e);
                p.extend_from_slice(&n.to_le_bytes());
                p.extend((0..n).map(|i| arg.wrapping_add(i as u8)));
            }
            19 => p.push(b']'),
            20 => p.push(b')'),
            21 => p.push(b'}'),
            22 => p.push(0x8f),
            23 => p.push(b'l'),
            24 => p.push(b't'),
            25 => p.push(0x85),
            26 => p.push(0x86),
            27 => p.push(0x87),
            28 => p.push(b'd'),
            29 => p.push(b'a'),
            30 => p.push(b'e'),
            31 => p.push(b's'),
            32 => p.push(b'u'),
            33 => p.push(0x90),
            34 => p.push(0x91),
            35 => {
                p.push(0x94);
                self.memo_len = self.memo_len.saturating_add(reps as u32);
            }
            36 => {
                // BINPUT: the next slot or one already written, repeated as is.
                let slot = if arg >= 0xf0 { u32::from(arg) } else { u32::from(arg) % self.memo_len.saturating_add(1) };
                p.extend_from_slice(&[b'q', slot as u8]);
                self.memo_len = self.memo_len.max(slot.saturating_add(1));
            }
            37 => {
                // LONG_BINPUT: sequential slots, as a pickler writes them.
                for _ in 0..reps.min(MAX_PICKLE / 5) {
                    if self.out.len() + 5 + RESERVE > MAX_PICKLE {
                        self.full = true;
                        break;
                    }
                    let slot = if arg >= 0xf0 { self.memo_len.wrapping_add(u32::from(arg)) } else { self.memo_len };
                    self.out.push(b'r');
                    self.out.extend_from_slice(&slot.to_le_bytes());
                    self.memo_len = self.memo_len.max(slot.saturating_add(1));
                }
                return;
            }
            38 => p.extend_from_slice(&[b'h', self.get_slot(arg) as u8]),
            39 => {
                let slot = if arg == 0xff { u32::MAX } else { self.get_slot(arg) };
                p.push(b'j');
                p.extend_from_slice(&slot.to_le_bytes());
            }
            40 => {
                // FRAME with a length hint that may be wrong.
                p.push(0x95);
                p.extend_from_slice(&(u64::from(arg) << (arg % 8 * 4)).to_le_bytes());
            }
            41 => p.extend_from_slice(&[0x80, 2 + arg % 4]),
            42 => {
                // A whole trace entry: {action, addr, size, stream, time_us, frames: []}.
                p.extend_from_slice(b"}(");
                short_str(&mut p, "action");
                short_str(&mut p, ACTIONS[arg as usize % ACTIONS.len()]);
                short_str(&mut p, "addr");
                p.push(0x8a);
                p.push(6);
                p.extend_from_slice(&(0x7f00_0000_0000u64 + u64::from(arg) * 512).to_le_bytes()[..6]);
                short_str(&mut p, "size");
                p.push(b'J');
                p.extend_from_slice(&(i32::from(arg) * 512).to_le_bytes());
                short_str(&mut p, "stream");
                p.extend_from_slice(&[b'K', arg % 3]);
                short_str(&mut p, "time_us");
                p.extend_from_slice(&[b'K', arg]);
                short_str(&mut p, "frames");
                p.extend_from_slice(b"]u");
            }
            43 => {
                // A stack frame: {filename, line, name}.
                p.extend_from_slice(b"}(");
                short_str(&mut p, "filename");
                short_str(&mut p, key(arg));
                short_str(&mut p, "line");
                p.extend_from_slice(&[b'K', arg]);
                short_str(&mut p, "name");
                short_str(&mut p, key(arg.wrapping_add(1)));
                p.push(b'u');
            }
            44 => {
                // A key and a memoised value pushed as a pair, for SETITEMS.
                short_str(&mut p, key(arg));
                p.extend_from_slice(&[b'K', arg, 0x94]);
                self.memo_len = self.memo_len.saturating_add(reps as u32);
            }
            _ => {
                // x = (x, x): repeated, a tree of 2^n nodes in n steps. Odd
                // arguments memoise each level, as a pickler would.
                if arg & 1 == 1 {
                    p.push(0x94);
                    self.memo_len = self.memo_len.saturating_add(reps as u32);
                }
                p.extend_from_slice(&[b'2', 0x86]);
            }
        }
        self.repeat(&p, reps);
    }
}

/// The pickle an input describes, and whether to gzip it.
fn generate(data: &[u8]) -> (Vec<u8>, bool) {
    let flags = data.first().copied().unwrap_or(0);
    let skeleton = flags & 2 != 0;
    let mut g = Gen { out: Vec::with_capacity(4096), memo_len: 0, full: false };
    g.out.extend_from_slice(&[0x80, 4]);
    if skeleton {
        // {"segments": [], "device_traces": [[ ... ]]}, open up to the entries.
        g.out.extend_from_slice(b"}(");
        short_str(&mut g.out, "segments");
        g.out.push(b']');
        short_str(&mut g.out, "device_traces");
        g.out.extend_from_slice(b"]](");
    }
    for record in data.get(1..).unwrap_or(&[]).chunks(3) {
        if g.full {
            break;
        }
        let op = record[0];
        let count = record.get(1).copied().unwrap_or(0);
        let arg = record.get(2).copied().unwrap_or(0);
        let reps = 1usize << (count % 17);
        g.emit(op, reps, arg);
    }
    if skeleton {
        // APPENDS the entries, APPEND the device's list, SETITEMS the root.
        g.out.extend_from_slice(b"eau");
    }
    g.out.push(b'.');
    (g.out, flags & 1 != 0)
}

fuzz_target!(|data: &[u8]| {
    let (pickle, gzip) = generate(data);
    let input = if gzip {
        let mut enc = GzEncoder::new(Vec::with_capacity(pickle.len() / 8 + 64), Compression::fast());
        enc.write_all(&pickle).expect("gzip into a Vec");
        enc.finish().expect("gzip into a Vec")
    } else {
        pickle
    };
    let options = ReadOptions::with_budget(64 << 20);
    if let Ok(snapshot) = read_snapshot(&input[..], &options) {
        let _ = snapshot.stats();
        let _ = SnapshotIntervals::build(&snapshot);
    }
});
