//! Search a device's allocations by address (`0x7f…`: the allocations whose
//! bytes hold it), by size (`2097152`, `2 MiB`: requested size exactly) or
//! by frame text (any frame's function or file containing it, ignoring
//! case). The answer counts every match and lists the first ones in trace
//! order, so the page can say "37 matches" and highlight them.

use serde::{Deserialize, Serialize};

use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;

/// Which allocations a query keeps.
type Filter = Box<dyn Fn(&crate::intervals::Allocation) -> bool>;

/// Most matches listed unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 500;
/// Most matches listed whatever `limit` says: an answer stays a page, not
/// the whole trace (a viewer asking for 10^9 matches got every one).
pub const MAX_LIMIT: usize = 5000;

/// Query of the search view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct SearchParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// What to look for.
    pub q: Option<String>,
    /// Most matches listed (default [`DEFAULT_LIMIT`], at most [`MAX_LIMIT`]).
    pub limit: Option<usize>,
}

/// How the query was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchKind {
    /// A hexadecimal address.
    Address,
    /// A size in bytes (with an optional unit).
    Size,
    /// Text in a stack frame.
    Frame,
}

/// One matching allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchMatch {
    /// Address.
    pub addr: u64,
    /// Requested bytes.
    pub size: u64,
    /// Interned stack.
    pub stack: u32,
    /// Row of its `alloc`, if the trace saw it.
    pub alloc_row: Option<u32>,
    /// Row its free completed, if it did.
    pub free_row: Option<u32>,
    /// Time of its `alloc`, where the trace has times.
    pub alloc_time_us: Option<i64>,
}

/// The matches of a query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchAnswer {
    /// Device.
    pub device: u32,
    /// How the query was read.
    pub kind: SearchKind,
    /// The value looked for: the address or size as a number, or the text.
    pub needle: String,
    /// Every matching allocation.
    pub total: usize,
    /// The first ones, in trace order.
    pub matches: Vec<SearchMatch>,
}

/// A size like `2097152`, `512 B`, `2 MiB`, `1.5 GB`.
fn parse_size(q: &str) -> Option<u64> {
    let q = q.trim().replace(['_', ','], "");
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (number, unit) = q.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    if number.is_empty() {
        return None;
    }
    if unit.is_empty() {
        return number.parse().ok();
    }
    let v: f64 = number.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * scale).round() as u64)
}

/// Allocations of a device matching `q`.
pub fn search(a: &IndexedSnapshot, p: &SearchParams) -> Result<SearchAnswer, ViewError> {
    let device = a.device_or_first(p.device)?;
    let index = a.device_index(device)?;
    let trace = &a.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?.trace;
    let q = p.q.as_deref().unwrap_or("").trim();
    if q.is_empty() {
        return Err(ViewError::BadRequest("empty search: give q (an address, a size, or frame text)".to_owned()));
    }
    let hex = q.strip_prefix("0x").or_else(|| q.strip_prefix("0X"));
    let (kind, needle, keep): (SearchKind, String, Filter) = if let Some(h) = hex {
        let addr = u64::from_str_radix(h, 16)
            .map_err(|_| ViewError::BadRequest(format!("search {q:?}: not a hexadecimal address")))?;
        (
            SearchKind::Address,
            addr.to_string(),
            Box::new(move |x| x.addr <= addr && addr < x.addr.saturating_add(x.size.max(1))),
        )
    } else if let Some(size) = parse_size(q) {
        (SearchKind::Size, size.to_string(), Box::new(move |x| x.size == size))
    } else {
        let text = q.to_lowercase();
        let frames = &a.snapshot.frames;
        let strings = &a.snapshot.strings;
        let frame_hits: Vec<bool> = (0..frames.frame_count())
            .map(|f| {
                frames.frame(f as _).is_some_and(|fr| {
                    strings.get(fr.name).to_lowercase().contains(&text)
                        || strings.get(fr.filename).to_lowercase().contains(&text)
                })
            })
            .collect();
        let stack_hits: Vec<bool> = (0..frames.stack_count())
            .map(|s| frames.stack(s as u32).iter().any(|&f| frame_hits.get(f as usize).copied().unwrap_or(false)))
            .collect();
        (SearchKind::Frame, q.to_owned(), Box::new(move |x| stack_hits.get(x.stack as usize).copied().unwrap_or(false)))
    };
    let mut found: Vec<&crate::intervals::Allocation> = index.allocations.iter().filter(|x| keep(x)).collect();
    found.sort_by_key(|x| (x.alloc_row.get().map_or(-1, i64::from), x.addr));
    let total = found.len();
    let times = trace.has_time().then(|| trace.times_us());
    let matches = found
        .into_iter()
        .take(p.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT))
        .map(|x| SearchMatch {
            addr: x.addr,
            size: x.size,
            stack: x.stack,
            alloc_row: x.alloc_row.get(),
            free_row: x.free_completed_row.get(),
            alloc_time_us: x.alloc_row.get().and_then(|r| times.and_then(|t| t.get(r as usize).copied())),
        })
        .collect();
    Ok(SearchAnswer { device, kind, needle, total, matches })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::corpus;

    fn find(a: &IndexedSnapshot, q: &str) -> SearchAnswer {
        search(a, &SearchParams { q: Some(q.to_owned()), ..Default::default() }).expect(q)
    }

    #[test]
    fn reads_sizes_with_units() {
        assert_eq!(parse_size("2097152"), Some(2_097_152));
        assert_eq!(parse_size("2 MiB"), Some(2_097_152));
        assert_eq!(parse_size("1.5kb"), Some(1500));
        assert_eq!(parse_size("1,024"), Some(1024));
        assert_eq!(parse_size("train.py"), None);
        assert_eq!(parse_size("MiB"), None);
    }

    #[test]
    fn finds_by_address_size_and_frame_text() {
        let a = corpus("oom_leak");
        let index = a.device_index(0).expect("device 0");
        let some = index.allocations.iter().find(|x| x.alloc_row.is_some() && x.size > 4096).expect("an allocation");
        // An address inside the block finds it; its size finds it too, and
        // every size match has that size.
        let inside = find(&a, &format!("0x{:x}", some.addr + 100));
        assert_eq!(inside.kind, SearchKind::Address);
        assert!(inside.matches.iter().any(|m| m.addr == some.addr && m.alloc_row == some.alloc_row.get()));
        assert!(inside.matches.iter().all(|m| m.addr <= some.addr + 100 && some.addr + 100 < m.addr + m.size));
        let same_size = find(&a, &some.size.to_string());
        assert_eq!(same_size.total, index.allocations.iter().filter(|x| x.size == some.size).count());
        assert!(same_size.total >= 1);
        // Frame text: this run's training script.
        let script = find(&a, "TRAIN.PY");
        assert_eq!(script.kind, SearchKind::Frame);
        assert!(script.total > 0 && script.total <= index.allocations.len());
        assert!(script.matches.windows(2).all(|w| w[0].alloc_row <= w[1].alloc_row));
        assert_eq!(find(&a, "no frame is called this").total, 0);
        let limited = search(&a, &SearchParams { q: Some("train.py".into()), limit: Some(3), ..Default::default() })
            .expect("limited");
        assert_eq!((limited.matches.len(), limited.total), (3.min(script.total), script.total));
        assert!(matches!(search(&a, &SearchParams::default()), Err(ViewError::BadRequest(_))));
        assert!(matches!(
            search(&a, &SearchParams { q: Some("0xzz".into()), ..Default::default() }),
            Err(ViewError::BadRequest(_))
        ));
    }
}
