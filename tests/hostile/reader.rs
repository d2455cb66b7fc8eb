//! The reader under bombs: `vramscope stats --memory-budget` in a child
//! process, whose peak RSS is read by a `python3` parent through
//! `getrusage(RUSAGE_CHILDREN)` (this test process runs many children, so it
//! cannot read one child's peak itself). Each bomb must fail with the
//! right error, under its budget plus a fixed margin (the binary, its
//! buffers), and within 10 times the time a real file of as many bytes to
//! read takes, plus two seconds.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::bombs;
use crate::common;

/// The budget every bomb is read with.
const BUDGET: u64 = 32 << 20;
/// What the process holds besides the budget: the binary, its allocator's
/// slack, the input buffers.
const MARGIN: u64 = 48 << 20;

/// What one child did.
struct Run {
    code: i32,
    stderr: String,
    peak_rss: u64,
    wall: Duration,
}

fn stats(path: &Path, budget: u64) -> Run {
    const WRAPPER: &str = "import resource, subprocess, sys\n\
        p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n\
        sys.stderr.buffer.write(p.stderr)\n\
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n";
    let started = Instant::now();
    let out = Command::new("python3")
        .args(["-c", WRAPPER, env!("CARGO_BIN_EXE_vramscope"), "stats", "--json", "--memory-budget"])
        .arg(budget.to_string())
        .arg(path)
        .output()
        .expect("python3 runs the child");
    let wall = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut fields = stdout.split_whitespace();
    let kib: u64 = fields.next().and_then(|f| f.parse().ok()).expect("peak RSS line");
    let code: i32 = fields.next().and_then(|f| f.parse().ok()).expect("exit code");
    Run { code, stderr: String::from_utf8_lossy(&out.stderr).into_owned(), peak_rss: kib * 1024, wall }
}

/// Seconds per byte of reading a real file (`ring_overflow.pickle`, the
/// same way, in this test binary's build), measured once.
fn real_pace() -> f64 {
    static PACE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *PACE.get_or_init(|| {
        let real = common::fixture_corpus().join("ring_overflow.pickle");
        let size = std::fs::metadata(&real).expect("fixture").len() as f64;
        let run = stats(&real, BUDGET);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.wall.as_secs_f64() / size
    })
}

/// Read `bytes` as `name` and check the refusal, the memory it took, and
/// its time: within 10 times what a real file of its size takes (scaled
/// from `ring_overflow.pickle`), plus two seconds for the noise of a
/// shared machine (this binary runs its tests in parallel).
fn refused(name: &str, bytes: &[u8], says: &str) -> Run {
    refused_reading(name, bytes, says, bytes.len() as u64)
}

/// [`refused`] for a file whose reader may go through `readable` bytes of
/// pickle (more than the file's size when it is compressed).
fn refused_reading(name: &str, bytes: &[u8], says: &str, readable: u64) -> Run {
    let path = bombs::write(name, bytes);
    let run = stats(&path, BUDGET);
    let bound = Duration::from_secs_f64(10.0 * real_pace() * readable as f64 + 2.0);
    assert!(run.wall < bound, "{name} ({readable} bytes to read) took {:?}, over {bound:?}", run.wall);
    assert_eq!(run.code, 2, "{name}: exit code 2 for bad input ({})", run.stderr);
    assert!(run.stderr.contains(says), "{name}: expected {says:?} in {:?}", run.stderr);
    assert!(
        run.peak_rss < BUDGET + MARGIN,
        "{name}: peak RSS {} MiB, over the budget of {} MiB plus {} MiB",
        run.peak_rss >> 20,
        BUDGET >> 20,
        MARGIN >> 20
    );
    run
}

#[test]
fn regression_mark_bomb_stays_under_the_budget() {
    // 48 MB of MARKs held 7.8 times their size, uncounted.
    refused("marks.pickle", &bombs::marks(48 << 20), "memory budget exceeded");
}

#[test]
fn lists_bigints_floats_and_memo_stay_under_the_budget() {
    refused("lists.pickle", &bombs::lists(8 << 20), "memory budget exceeded");
    refused("bigints.pickle", &bombs::bigints(4 << 20), "memory budget exceeded");
    refused("floats.pickle", &bombs::floats(5 << 20), "memory budget exceeded");
    refused("memo.pickle", &bombs::memo(12 << 20), "memory budget exceeded");
}

#[test]
fn claimed_lengths_are_refused_before_anything_is_read() {
    for (name, bytes) in bombs::claimed_lengths() {
        refused(&format!("claim_{name}.pickle"), &bytes, "memory budget exceeded");
    }
}

#[test]
fn regression_gzip_and_zstd_bombs_hit_the_expansion_limit() {
    // MARK/POP_MARK pairs take no memory: only the expansion limit stops
    // 96 MB of them hidden in a few KB.
    let plain = bombs::mark_pop_pairs(48 << 20);
    for tool in ["gzip", "zstd"] {
        let packed = crate::common::compress(tool, &plain);
        assert!(packed.len() < plain.len() / 200, "{tool}: {} bytes is no bomb", packed.len());
        // What the reader may decompress before the limit: the first
        // 16 MiB, then 200 bytes per compressed byte.
        let readable = (16 << 20) + 200 * packed.len() as u64;
        refused_reading(&format!("pairs.pickle.{tool}"), &packed, "refused as a decompression bomb", readable);
    }
}

#[test]
fn regression_setitems_and_frame_spam_take_time_in_proportion_to_their_size() {
    // One dict of 130,000 items in one-pair SETITEMS: each one scanned
    // every key so far (8 s of CPU for 200,000 items). `refused` bounds the
    // time by a real file's pace.
    let size = std::fs::metadata(common::fixture_corpus().join("ring_overflow.pickle")).expect("fixture").len();
    refused("setitems.pickle", &bombs::setitems(size as usize / 9), "not a PyTorch memory snapshot");
    refused("frames.pickle", &bombs::frames(size as usize / 9), "not a PyTorch memory snapshot");
}

#[test]
fn regression_quadratic_dict_keys_after_reading() {
    // `allocator_settings` as one flat dict of 400,000 keys (800,000 nodes,
    // under the node cap): converting it looked each key up among the keys
    // so far (200,000 keys took 144 s of CPU). Now it takes about the time
    // of a real file of its size, to be refused: settings past 1 MiB once
    // converted are over the reader's bound for them (issue 44), named.
    let path = bombs::write("wide_settings.pickle", b"");
    let script = "import pickle, sys\n\
        snap = {'segments': [], 'device_traces': [[]], 'allocator_settings': {'k%d' % i: i for i in range(400000)}}\n\
        pickle.dump(snap, open(sys.argv[1], 'wb'), protocol=4)\n";
    let status = Command::new("python3").args(["-c", script]).arg(&path).status().expect("python3");
    assert!(status.success());
    let size = std::fs::metadata(&path).expect("written").len();
    let run = stats(&path, 1 << 30);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("memory budget exceeded") && run.stderr.contains("allocator_settings"),
        "{}",
        run.stderr
    );
    let bound = Duration::from_secs_f64(10.0 * real_pace() * size as f64 + 2.0);
    assert!(run.wall < bound, "{size} bytes took {:?}, over {bound:?}", run.wall);
}
