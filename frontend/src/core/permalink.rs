//! The view's state in the page's URL, so a link pasted in chat opens what
//! its sender saw: device, x axis, visible window, the memory zoom, the
//! instant under the cursor, the selected allocation, the panel shown and the search. The
//! page writes it with `history.replaceState` as the view changes and reads
//! it on load; bad or missing fields fall back to the defaults.

use serde::{Deserialize, Serialize};

use crate::core::model::Axis;
use crate::core::viewport::{ByteRange, Window};

/// Which panel shows below the timelines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tab {
    /// The allocator's state at the cursor.
    #[default]
    State,
    /// Fragmentation over the window, and the allocator settings.
    Fragmentation,
    /// Memory by category (parameters, gradients, optimizer state,
    /// activations) at the cursor and over the trace.
    Breakdown,
    /// One band per (memory pool, stream): CUDA graphs' private pools.
    Pools,
}

/// The selected allocation: its address and the row of its `alloc` (none
/// for an allocation made before the trace began).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selected {
    /// Address.
    pub addr: u64,
    /// Row of its `alloc`.
    pub alloc_row: Option<u32>,
}

/// Everything a link restores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageState {
    /// CUDA device.
    pub device: Option<u32>,
    /// x axis.
    pub axis: Option<Axis>,
    /// Visible window on that axis.
    pub window: Option<Window>,
    /// The byte band of the timeline's memory zoom.
    pub memory: Option<ByteRange>,
    /// The instant shown by the allocator-state panel: a trace row.
    pub cursor: Option<u32>,
    /// The allocation whose details show.
    pub selected: Option<Selected>,
    /// The panel below the timelines.
    pub tab: Tab,
    /// The search box's text.
    pub search: Option<String>,
}

/// The query string's fields, as written.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Fields {
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    axis: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mem: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    row: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tab: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    q: Option<String>,
}

/// Read a query string (with or without its `?`). Never fails: a field
/// that does not parse is left at its default.
pub fn parse(query: &str) -> PageState {
    let fields: Fields = serde_urlencoded::from_str(query.trim_start_matches('?')).unwrap_or_default();
    let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<i64>().ok());
    let axis = match fields.axis.as_deref() {
        Some("time") => Some(Axis::Time),
        Some("event") => Some(Axis::Event),
        _ => None,
    };
    let window = match (num(&fields.start), num(&fields.end)) {
        (Some(s), Some(e)) if e > s => Some(Window::new(s, e)),
        _ => None,
    };
    // `mem=1048576-2097152`: the bytes at the bottom and top of the plot.
    let memory = fields.mem.as_deref().and_then(|m| {
        let (lo, hi) = m.split_once('-')?;
        let (lo, hi) = (lo.parse().ok()?, hi.parse().ok()?);
        (hi > lo).then_some(ByteRange { lo, hi })
    });
    // `sel=0x7f00@123`: address, and the alloc's row when known.
    let selected = fields.sel.as_deref().and_then(|s| {
        let (addr, row) = s.split_once('@').map_or((s, None), |(a, r)| (a, Some(r)));
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok()?;
        Some(Selected { addr, alloc_row: row.and_then(|r| r.parse().ok()) })
    });
    PageState {
        device: fields.device.and_then(|d| d.parse().ok()),
        axis,
        window: window.filter(|_| axis.is_some()),
        memory,
        cursor: fields.row.and_then(|r| r.parse().ok()),
        selected,
        tab: match fields.tab.as_deref() {
            Some("fragmentation") => Tab::Fragmentation,
            Some("breakdown") => Tab::Breakdown,
            Some("pools") => Tab::Pools,
            _ => Tab::State,
        },
        search: fields.q.filter(|q| !q.trim().is_empty()),
    }
}

/// The query string for `state`, with its `?` (empty when all defaults).
pub fn query(state: &PageState) -> String {
    let fields = Fields {
        device: state.device.map(|d| d.to_string()),
        axis: state.axis.map(|a| match a {
            Axis::Time => "time".to_owned(),
            Axis::Event => "event".to_owned(),
        }),
        start: state.window.filter(|_| state.axis.is_some()).map(|w| w.start.to_string()),
        end: state.window.filter(|_| state.axis.is_some()).map(|w| w.end.to_string()),
        mem: state.memory.map(|m| format!("{}-{}", m.lo, m.hi)),
        row: state.cursor.map(|r| r.to_string()),
        sel: state.selected.map(|s| match s.alloc_row {
            Some(r) => format!("0x{:x}@{r}", s.addr),
            None => format!("0x{:x}", s.addr),
        }),
        tab: match state.tab {
            Tab::State => None,
            Tab::Fragmentation => Some("fragmentation".to_owned()),
            Tab::Breakdown => Some("breakdown".to_owned()),
            Tab::Pools => Some("pools".to_owned()),
        },
        q: state.search.clone().filter(|q| !q.trim().is_empty()),
    };
    match serde_urlencoded::to_string(&fields) {
        Ok(q) if !q.is_empty() => format!("?{q}"),
        _ => String::new(),
    }
}

/// The device a snapshot page shows first among `devices`: the link's
/// (`linked`) when the snapshot has it, else, as PyTorch's viewer, the one
/// with the longest trace (the lowest number among equals).
pub fn device_to_show(linked: Option<u32>, devices: &[vramscope_shared::DeviceStats]) -> Option<u32> {
    let first = devices.iter().max_by_key(|d| (d.trace_entries, std::cmp::Reverse(d.device)));
    let linked = linked.filter(|l| devices.iter().any(|d| d.device == *l));
    linked.or(first.map(|d| d.device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_survives_the_round_trip() {
        let state = PageState {
            device: Some(1),
            axis: Some(Axis::Time),
            window: Some(Window::new(1_796_216_233_536_725, 1_796_216_240_000_000)),
            memory: Some(ByteRange { lo: 1 << 20, hi: 3 << 20 }),
            cursor: Some(4211),
            selected: Some(Selected { addr: 0x7f3a_0000_0200, alloc_row: Some(4100) }),
            tab: Tab::Fragmentation,
            search: Some("train.py & co".to_owned()),
        };
        let q = query(&state);
        assert!(q.starts_with("?device=1&axis=time&start=1796216233536725&"), "{q}");
        assert!(q.contains("sel=0x7f3a00000200%404100"), "{q}");
        assert!(q.contains("&mem=1048576-3145728&"), "{q}");
        assert_eq!(parse(&q), state);
        assert_eq!(query(&PageState::default()), "");
        assert_eq!(parse(""), PageState::default());
    }

    #[test]
    fn bad_fields_fall_back_to_defaults() {
        let s = parse("?device=x&axis=sideways&start=9&end=3&row=-2&sel=zz&tab=nope&q=&mem=5-5");
        assert_eq!(s, PageState::default());
        // A window without its axis means nothing.
        assert_eq!(parse("start=1&end=5").window, None);
        let s = parse("axis=event&start=1&end=5&sel=0x200");
        assert_eq!(s.window, Some(Window::new(1, 5)));
        assert_eq!(s.selected, Some(Selected { addr: 0x200, alloc_row: None }));
        assert_eq!(parse("mem=7-x").memory, None);
        assert_eq!(parse("mem=0-512").memory, Some(ByteRange { lo: 0, hi: 512 }));
        // Garbage that is no query string at all.
        assert_eq!(parse("%%%&&=="), PageState::default());
    }

    #[test]
    fn the_page_shows_the_linked_device_or_the_longest_trace() {
        let stats = vramscope_shared::testing::corpus("streams").snapshot.stats();
        let mut devices = vec![stats.devices[0].clone(), stats.devices[0].clone(), stats.devices[0].clone()];
        devices[0].device = 0;
        devices[0].trace_entries = 10;
        devices[1].device = 1;
        devices[1].trace_entries = 50;
        devices[2].device = 2;
        devices[2].trace_entries = 50;
        assert_eq!(device_to_show(None, &devices), Some(1));
        assert_eq!(device_to_show(Some(0), &devices), Some(0));
        assert_eq!(device_to_show(Some(7), &devices), Some(1));
        assert_eq!(device_to_show(Some(7), &[]), None);
    }
}
