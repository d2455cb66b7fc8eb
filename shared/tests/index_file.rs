//! The persisted index: a snapshot opened from its index file answers
//! every view exactly as the parsed snapshot does, and a broken, truncated
//! or foreign file is refused with a stable kind, never trusted.

mod common;

use bytes::Bytes;
use vramscope_shared::index_file::{FORMAT_VERSION, IndexFileError};
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::indexed::persist::open_index;
use vramscope_shared::indexed::persist::write_index;
use vramscope_shared::views::route;

const FIXTURES: [&str; 8] = [
    "compiled",
    "mlp_train_all",
    "oom_leak",
    "ring_overflow",
    "state_only",
    "streams",
    "graph_release",
    "graph_shared_pool",
];

fn parsed(name: &str) -> IndexedSnapshot {
    IndexedSnapshot::build(common::read(&common::fixture_corpus().join(format!("{name}.pickle"))))
}

/// The SHA-256 the tests' index files are written for (the server passes
/// the file's).
const SHA: &str = "5e1f00000000000000000000000000000000000000000000000000000000cafe";

fn index_bytes(a: &IndexedSnapshot) -> Vec<u8> {
    write_index(a, SHA, Vec::new()).expect("index writes")
}

/// Every route the dashboard asks, on the first device, at a few rows.
fn routes(a: &IndexedSnapshot) -> Vec<(String, String)> {
    let rows = a.snapshot.devices.first().map_or(0, |d| d.trace.len());
    let mut out: Vec<(String, String)> = [
        ("timeline", "px=700"),
        ("timeline", "px=300&axis=event"),
        ("timeline", "px=2000&axis=event&start=10&end=400&y_span=1000000&py=300"),
        ("blocks", ""),
        ("stats", ""),
        ("state", ""),
        ("segments", "px=500"),
        ("fragmentation", ""),
        ("pools", "px=50"),
        ("annotations", ""),
        ("search", "q=forward"),
        ("leaks", ""),
        ("explain", ""),
        ("stacks/1", ""),
        ("stacks/0", ""),
    ]
    .iter()
    .map(|(r, q)| ((*r).to_owned(), (*q).to_owned()))
    .collect();
    for row in [0, rows / 3, rows / 2, rows.saturating_sub(1)] {
        out.push(("blocks".into(), format!("at={row}")));
        out.push(("state".into(), format!("at={row}")));
        out.push(("entry".into(), format!("row={row}")));
        out.push(("pools".into(), format!("at={row}")));
    }
    out
}

#[test]
fn a_snapshot_opened_from_its_index_answers_every_view_as_the_parsed_one() {
    for name in FIXTURES {
        let a = parsed(name);
        let bytes = index_bytes(&a);
        let b = open_index(Bytes::from(bytes), SHA).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(b.is_from_index() && !a.is_from_index());
        let mut compared = 0;
        for (r, q) in routes(&a) {
            let want = route::answer(&a, &r, &q);
            let got = route::answer(&b, &r, &q);
            assert_eq!(got, want, "{name}: /{r}?{q}");
            compared += usize::from(want.is_ok());
        }
        assert!(compared >= 5, "{name}: only {compared} routes answered");
        // Written again from the opened one, the file is the same bytes.
        assert_eq!(index_bytes(&b), index_bytes(&a), "{name}: a second write differs");
    }
}

#[test]
fn an_opened_index_holds_its_columns_off_the_heap() {
    let a = parsed("ring_overflow");
    let b = open_index(Bytes::from(index_bytes(&a)), SHA).expect("opens");
    assert!(b.approx_bytes() < a.approx_bytes() / 2, "{} vs {}", b.approx_bytes(), a.approx_bytes());
}

#[test]
fn every_flipped_byte_region_is_refused_never_trusted() {
    let a = parsed("oom_leak");
    let good = index_bytes(&a);
    // A byte in every 997-byte stride, prelude, columns, header and trailer.
    for at in (0..good.len()).step_by(997).chain([8, good.len() - 40, good.len() - 1]) {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        match open_index(Bytes::from(bad), SHA) {
            Err(e) => {
                assert!(["index_not_an_index", "index_version", "index_corrupt"].contains(&e.kind()), "byte {at}: {e}")
            }
            // Padding between columns is not covered by a checksum: the
            // views must be unchanged then.
            Ok(b) => {
                for (r, q) in routes(&a) {
                    assert_eq!(route::answer(&b, &r, &q), route::answer(&a, &r, &q), "byte {at}: /{r}?{q}");
                }
            }
        }
    }
}

#[test]
fn truncated_foreign_and_other_version_files_are_refused_with_their_kind() {
    let good = index_bytes(&parsed("streams"));
    for cut in [0, 10, 64, good.len() / 2, good.len() - 1] {
        let e = open_index(Bytes::copy_from_slice(&good[..cut]), SHA).expect_err("a truncated file is refused");
        assert!(matches!(e, IndexFileError::NotAnIndex { .. } | IndexFileError::Corrupt { .. }), "cut {cut}: {e}");
    }
    let mut other = good.clone();
    other[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let e = open_index(Bytes::from(other), SHA).expect_err("another version is refused");
    assert_eq!(e.kind(), "index_version");
    assert!(e.to_string().contains(&format!("this build reads {FORMAT_VERSION}")), "{e}");
    let pickle = std::fs::read(common::fixture_corpus().join("streams.pickle")).expect("fixture");
    assert_eq!(open_index(Bytes::from(pickle), SHA).err().map(|e| e.kind()), Some("index_not_an_index"));
}

#[test]
fn a_header_that_names_rows_past_the_trace_is_refused() {
    // A well-formed file (checksums right) whose header lies: the writer
    // of a hostile file can recompute checksums, so ids are checked too.
    let a = parsed("oom_leak");
    let good = index_bytes(&a);
    let trailer = good.len() - 32;
    let at = u64::from_le_bytes(good[trailer..trailer + 8].try_into().expect("8 bytes")) as usize;
    let header = std::str::from_utf8(&good[at..trailer]).expect("JSON");
    let rows = a.snapshot.devices[0].trace.len();
    let lying = header.replacen(&format!("\"rows\":{rows}"), &format!("\"rows\":{}", rows * 2), 1);
    assert_ne!(lying, header);
    let mut bad = good[..at].to_vec();
    bad.extend_from_slice(lying.as_bytes());
    bad.extend_from_slice(&(at as u64).to_le_bytes());
    bad.extend_from_slice(&(lying.len() as u64).to_le_bytes());
    bad.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(lying.as_bytes()).to_le_bytes());
    bad.extend_from_slice(b"VSEND\0\0\0");
    let e = open_index(Bytes::from(bad), SHA).expect_err("a lying header is refused");
    assert_eq!(e.kind(), "index_corrupt", "{e}");
}

#[test]
fn regression_an_index_of_another_snapshot_file_is_refused() {
    // A good index, opened for another file's SHA-256 (copied over that
    // file's index): refused with its kind, both hashes named.
    let good = index_bytes(&parsed("streams"));
    let other = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let e = open_index(Bytes::from(good.clone()), other).expect_err("another snapshot's index is refused");
    assert_eq!(e.kind(), "index_other_snapshot", "{e}");
    assert!(e.to_string().contains(SHA) && e.to_string().contains(other), "{e}");
    // The hash is compared whatever its case.
    assert!(open_index(Bytes::from(good), &SHA.to_ascii_uppercase()).is_ok());
}

/// `good` with its header replaced by `header`, framed and checksummed as
/// the writer would (a hostile writer can recompute checksums).
fn reframed(good: &[u8], header: &str) -> Vec<u8> {
    let trailer = good.len() - 32;
    let at = u64::from_le_bytes(good[trailer..trailer + 8].try_into().expect("8 bytes")) as usize;
    let mut bad = good[..at].to_vec();
    bad.extend_from_slice(header.as_bytes());
    bad.extend_from_slice(&(at as u64).to_le_bytes());
    bad.extend_from_slice(&(header.len() as u64).to_le_bytes());
    bad.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(header.as_bytes()).to_le_bytes());
    bad.extend_from_slice(b"VSEND\0\0\0");
    bad
}

/// Every number of `value`, by its path.
fn numbers(value: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        serde_json::Value::Number(_) => out.push(path.clone()),
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(i.to_string());
                numbers(v, path, out);
                path.pop();
            }
        }
        serde_json::Value::Object(fields) => {
            for (k, v) in fields {
                path.push(k.clone());
                numbers(v, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at_path<'a>(value: &'a mut serde_json::Value, path: &[String]) -> &'a mut serde_json::Value {
    path.iter().fold(value, |v, k| match v {
        serde_json::Value::Array(items) => &mut items[k.parse::<usize>().expect("index")],
        other => &mut other[k.as_str()],
    })
}

#[test]
fn regression_a_forged_header_with_sizes_of_2_63_is_refused() {
    // A hostile writer sets a size or address of the header to 2^63 and
    // recomputes the checksum: every segment and block size or address so
    // forged is refused with its kind (what is left, a stream id or a
    // setting, bounds nothing the views allocate or sum).
    for name in ["oom_leak", "streams"] {
        let good = index_bytes(&parsed(name));
        let trailer = good.len() - 32;
        let at = u64::from_le_bytes(good[trailer..trailer + 8].try_into().expect("8 bytes")) as usize;
        let header: serde_json::Value = serde_json::from_slice(&good[at..trailer]).expect("JSON");
        let mut paths = Vec::new();
        numbers(&header, &mut Vec::new(), &mut paths);
        let sizes: Vec<&Vec<String>> = paths
            .iter()
            .filter(|p| p.contains(&"segments".to_owned()))
            .filter(|p| p.last().is_some_and(|k| k.ends_with("size") || k == "address"))
            .collect();
        assert!(sizes.len() > 100, "{name}: only {} sizes", sizes.len());
        let mut accepted = Vec::new();
        for path in sizes {
            let mut forged = header.clone();
            *at_path(&mut forged, path) = serde_json::json!(1u64 << 63);
            match open_index(Bytes::from(reframed(&good, &forged.to_string())), SHA) {
                Err(e) => assert_eq!(e.kind(), "index_corrupt", "{name} {path:?}: {e}"),
                Ok(_) => accepted.push(path.join(".")),
            }
        }
        assert!(accepted.is_empty(), "{name}: forged sizes accepted: {accepted:?}");
    }
}

#[test]
fn every_real_captures_segments_pass_the_index_header_check() {
    // The check above refuses a header whose segments contradict
    // themselves; no real capture's do (else its index would be rebuilt
    // at every open): the fixtures' and the corpus's.
    let mut checked = 0;
    for dir in [common::fixture_corpus(), common::large_corpus()] {
        for entry in std::fs::read_dir(&dir).expect("corpus folder") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|x| x != "pickle") {
                continue;
            }
            let snapshot = common::read(&path);
            for d in snapshot.devices.iter().chain(snapshot.host.iter()) {
                for (i, segment) in d.segments.iter().enumerate() {
                    assert_eq!(segment.inconsistency(), None, "{} device {} segment {i}", path.display(), d.device);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} segments");
}
