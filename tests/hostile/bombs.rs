//! Hostile pickles: a few opcodes repeated, which is all a bomb is.

use std::path::{Path, PathBuf};

/// PROTO 4: every bomb starts as a real snapshot does.
const PROTO4: &[u8] = &[0x80, 4];

/// `head`, then `unit` repeated `times` times, then `tail`.
pub(super) fn repeat(head: &[u8], unit: &[u8], times: usize, tail: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + unit.len() * times + tail.len());
    out.extend_from_slice(head);
    for _ in 0..times {
        out.extend_from_slice(unit);
    }
    out.extend_from_slice(tail);
    out
}

/// MARK after MARK: each was a stack entry nobody counted.
pub(super) fn marks(n: usize) -> Vec<u8> {
    repeat(PROTO4, b"(", n, b".")
}

/// MARK, POP_MARK pairs: no memory at all, only bytes to read.
pub(super) fn mark_pop_pairs(n: usize) -> Vec<u8> {
    repeat(PROTO4, b"(1", n, b"N.")
}

/// Empty lists left on the stack.
pub(super) fn lists(n: usize) -> Vec<u8> {
    repeat(PROTO4, b"]", n, b".")
}

/// Integers of 9 bytes (wider than the 60 inline bits), each popped.
pub(super) fn bigints(n: usize) -> Vec<u8> {
    repeat(PROTO4, &[0x8a, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, b'0'], n, b"N.")
}

/// Floats, each popped.
pub(super) fn floats(n: usize) -> Vec<u8> {
    repeat(PROTO4, &[b'G', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, b'0'], n, b"N.")
}

/// A small int memoized again and again (MEMOIZE), each popped.
pub(super) fn memo(n: usize) -> Vec<u8> {
    repeat(PROTO4, &[b'K', 1, 0x94, b'0'], n, b"N.")
}

/// One dict filled by `n` SETITEMS of one pair each.
pub(super) fn setitems(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + n * 9);
    out.extend_from_slice(PROTO4);
    out.push(b'}');
    for i in 0..n as u32 {
        out.push(b'(');
        out.push(b'J');
        out.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&[b'K', 1, b'u']);
    }
    out.push(b'.');
    out
}

/// FRAME opcodes claiming 2^62 bytes each, and nothing else.
pub(super) fn frames(n: usize) -> Vec<u8> {
    let mut unit = vec![0x95];
    unit.extend_from_slice(&(1u64 << 62).to_le_bytes());
    repeat(PROTO4, &unit, n, b"N.")
}

/// One opcode claiming a huge length: BINUNICODE8, BINBYTES8, LONG4.
pub(super) fn claimed_lengths() -> Vec<(&'static str, Vec<u8>)> {
    let mut unicode = vec![0x80, 4, 0x8d];
    unicode.extend_from_slice(&(1u64 << 40).to_le_bytes());
    unicode.extend_from_slice(b"abc");
    let mut bytes8 = vec![0x80, 4, 0x8e];
    bytes8.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let mut long4 = vec![0x80, 4, 0x8b];
    long4.extend_from_slice(&i32::MAX.to_le_bytes());
    let mut put = vec![0x80, 4, b'K', 1, b'r'];
    put.extend_from_slice(&0xffff_ff00u32.to_le_bytes());
    vec![("binunicode8", unicode), ("binbytes8", bytes8), ("long4", long4), ("long_binput", put)]
}

/// Write a bomb into this test binary's scratch folder.
pub(super) fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bombs");
    std::fs::create_dir_all(&dir).expect("bombs dir");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write bomb");
    path
}

/// BINUNICODE: `text` as a pickled string.
pub(super) fn unicode(text: &[u8]) -> Vec<u8> {
    let mut out = vec![b'X'];
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text);
    out
}

/// MEMOIZE, and BINGET of a slot below 256.
const MEMOIZE: u8 = 0x94;
fn binget(slot: u8) -> [u8; 2] {
    [b'h', slot]
}

/// A snapshot with no segment and no trace whose top-level dict also holds
/// `pairs` (keys and values, pushed in turn). Its memo starts empty.
pub(super) fn snapshot_with(pairs: &[u8]) -> Vec<u8> {
    let mut out = PROTO4.to_vec();
    out.extend_from_slice(b"}(");
    out.extend(unicode(b"segments"));
    out.push(b']');
    out.extend(unicode(b"device_traces"));
    out.push(b']');
    out.extend_from_slice(pairs);
    out.extend_from_slice(b"u.");
    out
}

/// `allocator_settings` nested `depth` dicts deep under one key of
/// `key_len` bytes (written once, then fetched from the memo), with a list
/// of `items` small integers at the bottom: each node's path once cost a
/// copy of every key above it.
pub(super) fn nested_settings(depth: usize, key_len: usize, items: usize) -> Vec<u8> {
    let mut pairs = unicode(b"allocator_settings");
    for level in 0..depth {
        pairs.push(b'}');
        if level == 0 {
            pairs.extend(unicode(&vec![b'k'; key_len]));
            pairs.push(MEMOIZE);
        } else {
            pairs.extend(binget(0));
        }
    }
    pairs.extend_from_slice(b"](");
    for _ in 0..items {
        pairs.extend_from_slice(&[b'K', 1]);
    }
    pairs.push(b'e');
    pairs.extend(std::iter::repeat_n(b's', depth));
    snapshot_with(&pairs)
}

/// `allocator_settings = {"x": [s] * n}` with `s` of `len` bytes written
/// once: a copy of `s` per item once converted.
pub(super) fn shared_setting_strings(len: usize, n: usize) -> Vec<u8> {
    let mut pairs = unicode(b"allocator_settings");
    pairs.push(b'}');
    pairs.extend(unicode(b"x"));
    pairs.extend_from_slice(b"](");
    pairs.extend(unicode(&vec![b's'; len]));
    pairs.push(MEMOIZE);
    for _ in 1..n {
        pairs.extend(binget(0));
    }
    pairs.extend_from_slice(b"es");
    snapshot_with(&pairs)
}

/// One unknown top-level key of `len` bytes set `n` times (a dict that
/// Python never writes, but a pickle can).
pub(super) fn repeated_top_level_key(len: usize, n: usize) -> Vec<u8> {
    let mut pairs = unicode(&vec![b'u'; len]);
    pairs.push(MEMOIZE);
    pairs.push(b'N');
    for _ in 1..n {
        pairs.extend(binget(0));
        pairs.push(b'N');
    }
    snapshot_with(&pairs)
}

/// `n` annotations that are one dict, whose name is `len` bytes: a copy of
/// the name per annotation once converted.
pub(super) fn shared_annotations(len: usize, n: usize) -> Vec<u8> {
    let mut pairs = unicode(b"external_annotations");
    pairs.extend_from_slice(b"](}(");
    for (key, value) in [(&b"stage"[..], &b"START"[..]), (b"name", &vec![b'n'; len])] {
        pairs.extend(unicode(key));
        pairs.extend(unicode(value));
    }
    pairs.extend(unicode(b"time_us"));
    pairs.extend_from_slice(&[b'K', 1]);
    pairs.extend_from_slice(&[b'u', MEMOIZE]);
    for _ in 1..n {
        pairs.extend(binget(0));
    }
    pairs.push(b'e');
    snapshot_with(&pairs)
}

/// `segments` whose list holds one segment dict `segments` times, whose
/// `blocks` hold one block dict `blocks` times: a few hundred kB that
/// convert into `segments × blocks` blocks.
pub(super) fn shared_blocks(segments: usize, blocks: usize) -> Vec<u8> {
    let mut out = PROTO4.to_vec();
    out.extend_from_slice(b"}(");
    out.extend(unicode(b"segments"));
    out.extend_from_slice(b"](}(");
    out.extend(unicode(b"address"));
    out.extend_from_slice(&[b'K', 0]);
    out.extend(unicode(b"total_size"));
    out.push(b'J');
    out.extend_from_slice(&(blocks as u32 * 512).to_le_bytes());
    out.extend(unicode(b"blocks"));
    out.extend_from_slice(b"](}(");
    out.extend(unicode(b"size"));
    out.extend_from_slice(&[b'M', 0, 2]);
    out.extend(unicode(b"state"));
    out.extend(unicode(b"inactive"));
    out.extend_from_slice(&[b'u', MEMOIZE]);
    for _ in 1..blocks {
        out.extend(binget(0));
    }
    out.extend_from_slice(b"eu");
    out.push(MEMOIZE);
    for _ in 1..segments {
        out.extend(binget(1));
    }
    out.push(b'e');
    out.extend(unicode(b"device_traces"));
    out.extend_from_slice(b"]u.");
    out
}
