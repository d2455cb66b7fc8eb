//! Where each visible allocation sits on the timeline, and which one is
//! under the mouse.
//!
//! # Stacking
//!
//! An allocation is a bar from its `alloc` to its `free_completed` (the API's
//! `start` and `end`), as tall as its size, on the same byte axis as the
//! curves. Bars are stacked first-fit in allocation order: each goes at the
//! lowest offset where it overlaps no bar already placed that is alive at
//! the same time. That is how the caching allocator itself reuses a freed
//! range, so the bars fill the area under the `active` curve the way memory
//! fills, and a long-lived allocation keeps one height for its whole life
//! (PyTorch's viewer instead slides everything above a freed block down,
//! which makes a bar change height at every free). Only the allocations the
//! API lists are stacked (the largest in the window); the curves, drawn
//! from every event, show the rest. The packing can leave gaps, so its top
//! may rise a little above the `active` curve; the y axis covers both.

use vramscope_shared::timeline::VisibleAllocation;

use crate::viewport::Window;

/// A visible allocation placed on the plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    /// Index of the allocation in the window's `allocations`.
    pub index: usize,
    /// x where it starts (allocated, or the extent's start for a ghost).
    pub x0: i64,
    /// x where it ends (freed, or the extent's end while alive).
    pub x1: i64,
    /// Bottom of the bar, in bytes.
    pub y0: u64,
    /// Top of the bar: `y0` plus the size.
    pub y1: u64,
}

/// Stack `allocations` first-fit in allocation order (see the module doc).
/// Returns one bar per allocation of nonzero size.
pub fn stack(allocations: &[VisibleAllocation]) -> Vec<Bar> {
    let mut order: Vec<usize> = (0..allocations.len()).filter(|&i| allocations[i].size > 0).collect();
    // Allocation order; ghosts (no alloc row) first, as they were there before.
    order.sort_by_key(|&i| {
        let a = &allocations[i];
        (a.start, a.alloc_row.map_or(-1, i64::from), std::cmp::Reverse(a.size))
    });
    let mut placed: Vec<Bar> = Vec::with_capacity(order.len());
    // Bars that may still overlap a later one: since bars arrive by start,
    // one that ended before the current start can never overlap again.
    let mut alive: Vec<Bar> = Vec::new();
    let mut below: Vec<(u64, u64)> = Vec::new();
    for i in order {
        let a = &allocations[i];
        let (x0, x1) = (a.start, a.end.max(a.start));
        alive.retain(|b| b.x1 >= x0);
        below.clear();
        below.extend(alive.iter().map(|b| (b.y0, b.y1)));
        below.sort_unstable();
        let mut y = 0u64;
        for &(lo, hi) in &below {
            if lo >= y.saturating_add(a.size) {
                break;
            }
            y = y.max(hi);
        }
        let bar = Bar { index: i, x0, x1, y0: y, y1: y.saturating_add(a.size) };
        alive.push(bar);
        placed.push(bar);
    }
    placed
}

/// Where the plot area is on the canvas and what it shows: the mapping
/// between data and pixels, for drawing and for the mouse.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Geometry {
    /// Left edge of the plot area, in canvas pixels.
    pub left: f64,
    /// Top edge of the plot area, in canvas pixels.
    pub top: f64,
    /// Width of the plot area, in pixels.
    pub width: f64,
    /// Height of the plot area, in pixels.
    pub height: f64,
    /// The x window shown.
    pub window: Window,
    /// The byte value at the bottom of the plot area: 0, or more when the
    /// y axis is zoomed on memory.
    pub y_min: u64,
    /// The byte value at the top of the plot area.
    pub y_max: u64,
}

impl Geometry {
    /// Canvas x of an x value.
    pub fn x_px(&self, x: f64) -> f64 {
        self.left + self.window.fraction_of(x) * self.width
    }

    /// The x value at canvas x `px`.
    pub fn x_at(&self, px: f64) -> f64 {
        self.window.start as f64 + (px - self.left) / self.width.max(1.0) * self.window.width() as f64
    }

    /// Canvas y of a byte value (outside the plot area for one outside
    /// `[y_min, y_max]`).
    pub fn y_px(&self, y: u64) -> f64 {
        let span = self.y_max.saturating_sub(self.y_min).max(1) as f64;
        self.top + self.height * (1.0 - (y as f64 - self.y_min as f64) / span)
    }

    /// Where canvas y `py` falls on the y axis: 0 at the bottom of the plot
    /// area, 1 at its top.
    pub fn y_fraction(&self, py: f64) -> f64 {
        1.0 - (py - self.top) / self.height.max(1.0)
    }

    /// Whether a canvas point lies in the plot area.
    pub fn contains(&self, px: f64, py: f64) -> bool {
        px >= self.left && px <= self.left + self.width && py >= self.top && py <= self.top + self.height
    }

    /// The rectangle `(x0, y0, x1, y1)` of a bar in canvas pixels, clipped
    /// to the plot area, at least `min` pixels wide and tall so that thin
    /// bars can still be drawn and pointed at; `None` when off screen, in x
    /// or outside the byte band shown (a memory zoom draws only the bars
    /// that meet its band, however many the window lists).
    pub fn bar_px(&self, bar: &Bar, min: f64) -> Option<(f64, f64, f64, f64)> {
        let outside_band = bar.y0 >= self.y_max || (bar.y1 <= self.y_min && self.y_min > 0);
        if bar.x1 < self.window.start || bar.x0 >= self.window.end || outside_band {
            return None;
        }
        let clip_x = |px: f64| px.clamp(self.left, self.left + self.width);
        let (mut x0, mut x1) = (clip_x(self.x_px(bar.x0 as f64)), clip_x(self.x_px(bar.x1 as f64)));
        let bottom = self.top + self.height;
        let (mut y0, mut y1) = (self.y_px(bar.y1).max(self.top), self.y_px(bar.y0).min(bottom));
        if x1 - x0 < min {
            let mid = (x0 + x1) / 2.0;
            (x0, x1) = (mid - min / 2.0, mid + min / 2.0);
        }
        if y1 - y0 < min {
            let mid = (y0 + y1) / 2.0;
            (y0, y1) = (mid - min / 2.0, mid + min / 2.0);
        }
        Some((x0, y0, x1, y1))
    }
}

/// The smallest bar under the canvas point `(px, py)`, as an index into
/// `bars`. Bars narrower than a few pixels count as three pixels wide.
pub fn hit(bars: &[Bar], geometry: &Geometry, px: f64, py: f64) -> Option<usize> {
    if !geometry.contains(px, py) {
        return None;
    }
    bars.iter()
        .enumerate()
        .filter_map(|(i, bar)| {
            let (x0, y0, x1, y1) = geometry.bar_px(bar, 3.0)?;
            (px >= x0 && px <= x1 && py >= y0 && py <= y1).then_some((i, (x1 - x0) * (y1 - y0)))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use vramscope_shared::intervals::SnapshotIntervals;
    use vramscope_shared::timeline::{Axis, TimelineIndex};

    use super::*;

    fn alloc(addr: u64, size: u64, start: i64, end: i64) -> VisibleAllocation {
        VisibleAllocation {
            addr,
            size,
            stack: 0,
            start,
            end,
            alloc_row: u32::try_from(start).ok(),
            free_requested_row: None,
            free_row: None,
        }
    }

    #[test]
    fn bars_stack_first_fit_and_reuse_freed_ranges() {
        // a and b overlap; c starts after a is freed and fits in a's place;
        // d starts while b and c are alive and goes on top.
        let allocations =
            [alloc(1, 100, 0, 10), alloc(2, 50, 5, 30), alloc(3, 80, 12, 40), alloc(4, 10, 20, 25), alloc(5, 0, 0, 1)];
        let bars = stack(&allocations);
        let y = |index: usize| bars.iter().find(|b| b.index == index).map(|b| (b.y0, b.y1));
        assert_eq!(bars.len(), 4, "zero-size allocations are not drawn");
        assert_eq!(y(0), Some((0, 100)));
        assert_eq!(y(1), Some((100, 150)));
        assert_eq!(y(2), Some((0, 80)));
        assert_eq!(y(3), Some((80, 90)), "fits in the gap below b");
        // No two bars alive at once share bytes.
        for a in &bars {
            for b in &bars {
                if a.index != b.index && a.x0 <= b.x1 && b.x0 <= a.x1 {
                    assert!(a.y1 <= b.y0 || b.y1 <= a.y0, "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn bars_stay_close_to_the_active_curve_on_real_traces() {
        // First-fit leaves gaps, so its top can pass the curve; on the
        // corpus it stays within a third of it on average (greedy by size,
        // tried instead, overshot by 2.5x on oom_leak).
        for name in ["oom_leak", "mlp_train_all", "ring_overflow", "streams", "compiled"] {
            let snapshot = vramscope_shared::testing::snapshot(name);
            let index = SnapshotIntervals::build(&snapshot);
            let timeline = TimelineIndex::build(&snapshot, &index);
            let (lo, hi) = timeline.extent(0, Axis::Event).expect("a trace");
            let w = timeline.query(0, Axis::Event, lo, hi, 1000, 2000).expect("window");
            let bars = stack(&w.allocations);
            let (mut over, mut total) = (0.0, 0.0);
            for b in &w.buckets {
                let top = bars.iter().filter(|x| x.x0 < b.x1 && x.x1 >= b.x0).map(|x| x.y1).max().unwrap_or(0);
                over += top.saturating_sub(b.active.max) as f64;
                total += b.active.max as f64;
            }
            assert!(over / total < 0.35, "{name}: bars overshoot the active curve by {:.2}", over / total);
        }
    }

    #[test]
    fn the_mouse_finds_the_bar_under_it() {
        let allocations = [alloc(1, 100, 0, 50), alloc(2, 1, 60, 61), alloc(3, 100, 50, 100)];
        let bars = stack(&allocations);
        let g = Geometry {
            left: 50.0,
            top: 10.0,
            width: 100.0,
            height: 200.0,
            window: Window::new(0, 100),
            y_min: 0,
            y_max: 200,
        };
        assert_eq!(g.x_px(50.0), 100.0);
        assert_eq!(g.x_at(100.0), 50.0);
        assert_eq!(g.y_px(100), 110.0);
        let index = |hit: Option<usize>| hit.map(|i| bars[i].index);
        assert_eq!(index(hit(&bars, &g, 60.0, 180.0)), Some(0));
        // c starts as a is freed: it sits on top of a, not in its place.
        assert_eq!(index(hit(&bars, &g, 140.0, 60.0)), Some(2));
        assert_eq!(index(hit(&bars, &g, 140.0, 180.0)), None);
        // One byte is far below a pixel, yet it can be pointed at, and it
        // wins over the large bar it sits on.
        let tiny = bars.iter().find(|b| b.index == 1).expect("placed");
        let (x0, y0, x1, y1) = g.bar_px(tiny, 3.0).expect("on screen");
        assert!(x1 - x0 >= 3.0 && y1 - y0 >= 3.0);
        assert_eq!(index(hit(&bars, &g, (x0 + x1) / 2.0, (y0 + y1) / 2.0)), Some(1));
        // Above every bar, or outside the plot: nothing.
        assert_eq!(hit(&bars, &g, 60.0, 20.0), None);
        assert_eq!(hit(&bars, &g, 10.0, 180.0), None);
        // A window that misses a bar leaves it off screen.
        let zoomed = Geometry { window: Window::new(70, 100), ..g };
        assert_eq!(zoomed.bar_px(&bars[0], 3.0), None);
        assert!(zoomed.bar_px(&bars[1], 3.0).is_some());
    }

    #[test]
    fn a_memory_zoom_maps_its_band_and_drops_the_bars_outside() {
        let allocations = [alloc(1, 100, 0, 50), alloc(2, 10, 0, 50), alloc(3, 1, 0, 50)];
        let bars = stack(&allocations);
        // Bars: [0, 100), [100, 110), [110, 111); the plot shows bytes [95, 111).
        let g = Geometry {
            left: 0.0,
            top: 0.0,
            width: 100.0,
            height: 160.0,
            window: Window::new(0, 100),
            y_min: 95,
            y_max: 111,
        };
        assert_eq!(g.y_px(111), 0.0);
        assert_eq!(g.y_px(95), 160.0);
        assert_eq!(g.y_fraction(40.0), 0.75);
        // The big bar is cut at the bottom edge; the one byte is a full row.
        let (_, y0, _, y1) = g.bar_px(&bars[0], 1.0).expect("meets the band");
        assert_eq!((y0, y1), (g.y_px(100), 160.0));
        let (_, y0, _, y1) = g.bar_px(&bars[2], 1.0).expect("meets the band");
        assert_eq!(y1 - y0, 10.0);
        assert_eq!(index_at(&bars, &g, 50.0, 5.0), Some(2));
        // Above the band or below it: not drawn.
        let above = Geometry { y_min: 0, y_max: 100, ..g };
        assert!(above.bar_px(&bars[1], 1.0).is_none());
        let below = Geometry { y_min: 105, ..g };
        assert!(below.bar_px(&bars[0], 1.0).is_none());
    }

    fn index_at(bars: &[Bar], g: &Geometry, x: f64, y: f64) -> Option<usize> {
        hit(bars, g, x, y).map(|i| bars[i].index)
    }
}
