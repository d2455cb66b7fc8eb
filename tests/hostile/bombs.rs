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
