//! The visible window of a timeline's x axis and how zooming and panning
//! move it, and the byte range of its y axis when zoomed on memory. Kept
//! apart from the components so the arithmetic (which runs on microsecond
//! timestamps near 2^51) is tested natively.

/// The narrowest window, in x units (rows or microseconds): the API's finest
/// bucket is one unit, so a few units already show single events.
pub const MIN_WIDTH: i64 = 8;

/// A half-open window `[start, end)` of the x axis, like the API's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First x shown.
    pub start: i64,
    /// First x past the window.
    pub end: i64,
}

impl Window {
    /// The window `[start, end)`; `end` is raised to `start + 1` if needed,
    /// so a window is never empty.
    pub fn new(start: i64, end: i64) -> Window {
        Window { start, end: end.max(start.saturating_add(1)) }
    }

    /// `end - start`, at least 1.
    pub fn width(self) -> i64 {
        self.end.saturating_sub(self.start).max(1)
    }

    /// Zoom by `factor` (below 1 zooms in) around the point `anchor` of the
    /// window (0 at `start`, 1 at `end`), which stays where it is on screen.
    /// The result lies inside `extent` and is at least [`MIN_WIDTH`] wide
    /// (or as wide as `extent` when that is narrower).
    pub fn zoom(self, factor: f64, anchor: f64, extent: Window) -> Window {
        let anchor = if anchor.is_finite() { anchor.clamp(0.0, 1.0) } else { 0.5 };
        let factor = if factor.is_finite() && factor > 0.0 { factor } else { 1.0 };
        let old = self.width() as f64;
        let min = MIN_WIDTH.min(extent.width()) as f64;
        let new = (old * factor).clamp(min, extent.width() as f64);
        let pivot = self.start as f64 + anchor * old;
        let start = (pivot - anchor * new).round() as i64;
        Window::new(start, start.saturating_add(new.round() as i64)).clamp_into(extent)
    }

    /// Shift by `fraction` of the width (positive moves later), staying
    /// inside `extent`.
    pub fn pan(self, fraction: f64, extent: Window) -> Window {
        let fraction = if fraction.is_finite() { fraction } else { 0.0 };
        let shift = (self.width() as f64 * fraction).round() as i64;
        self.shifted(shift, extent)
    }

    /// Shift by `dx` x units, staying inside `extent`.
    pub fn shifted(self, dx: i64, extent: Window) -> Window {
        Window::new(self.start.saturating_add(dx), self.end.saturating_add(dx)).clamp_into(extent)
    }

    /// The same width moved inside `extent` (or `extent` itself when the
    /// window is wider).
    pub fn clamp_into(self, extent: Window) -> Window {
        let width = self.width();
        if width >= extent.width() {
            return extent;
        }
        let start = self.start.clamp(extent.start, extent.end - width);
        Window::new(start, start + width)
    }

    /// Where `x` falls in the window: 0 at `start`, 1 at `end`.
    pub fn fraction_of(self, x: f64) -> f64 {
        (x - self.start as f64) / self.width() as f64
    }
}

/// How many columns a panel asks for over a plot `width` pixels wide: one
/// every `px_per_column` pixels, between 10 and `max`.
pub fn columns(width: f64, px_per_column: f64, max: u32) -> u32 {
    ((width / px_per_column) as u32).clamp(10, max)
}

/// The narrowest byte range of a memory-axis zoom: at the plot's ~400
/// pixel rows the API's threshold (half a row) is then 1 byte, so every
/// allocation, however small, is listed.
pub const MIN_BYTE_SPAN: u64 = 512;

/// The y axis zoomed on memory: bytes `[lo, hi)` from the bottom of the plot
/// to its top.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// Bytes at the bottom of the plot.
    pub lo: u64,
    /// Bytes at the top of the plot, above `lo`.
    pub hi: u64,
}

impl ByteRange {
    /// Bytes shown, at least 1.
    pub fn span(self) -> u64 {
        self.hi.saturating_sub(self.lo).max(1)
    }

    /// Zoom by `factor` (below 1 zooms in) around `anchor` (0 at the
    /// bottom, 1 at the top), which stays where it is on screen. The result
    /// lies in `[0, top)`, spans at least [`MIN_BYTE_SPAN`] (or `top` when
    /// that is less), and is `None` once it covers `[0, top)`: the axis is
    /// back to following the data.
    pub fn zoom(self, factor: f64, anchor: f64, top: u64) -> Option<ByteRange> {
        let anchor = if anchor.is_finite() { anchor.clamp(0.0, 1.0) } else { 0.5 };
        let factor = if factor.is_finite() && factor > 0.0 { factor } else { 1.0 };
        let top = top.max(1);
        let old = self.span() as f64;
        let new = (old * factor).clamp(MIN_BYTE_SPAN.min(top) as f64, top as f64);
        let pivot = self.lo as f64 + anchor * old;
        let span = new.round() as u64;
        let lo = (pivot - anchor * new).round().clamp(0.0, (top - span.min(top)) as f64) as u64;
        let zoomed = ByteRange { lo, hi: lo + span };
        (zoomed != ByteRange { lo: 0, hi: top }).then_some(zoomed)
    }

    /// About `target` round ticks inside the range: multiples of a power of
    /// two, so labels stay short at any offset.
    pub fn ticks(self, target: u32) -> Vec<u64> {
        let rough = (self.span() / u64::from(target.max(1))).max(1);
        let step = rough.checked_next_power_of_two().unwrap_or(1 << 63);
        let first = self.lo.div_ceil(step).saturating_mul(step);
        (0..=u64::from(target) * 2 + 1)
            .map_while(|k| first.checked_add(k.checked_mul(step)?))
            .take_while(|&y| y <= self.hi)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_ask_for_a_column_every_few_pixels_within_bounds() {
        assert_eq!(columns(900.0, 3.0, 600), 300);
        assert_eq!(columns(900.0, 4.0, 400), 225);
        assert_eq!(columns(0.0, 4.0, 400), 10);
        assert_eq!(columns(10_000.0, 3.0, 600), 600);
        // A negative width (no layout yet) saturates to none: the minimum.
        assert_eq!(columns(-5.0, 3.0, 600), 10);
    }

    #[test]
    fn zoom_keeps_the_anchor_and_stays_inside() {
        let extent = Window::new(0, 1000);
        let w = extent.zoom(0.5, 0.5, extent);
        assert_eq!(w, Window::new(250, 750));
        // The point under the mouse stays put.
        let w2 = w.zoom(0.5, 0.2, extent);
        assert_eq!(w2, Window::new(300, 550));
        assert!((w2.fraction_of(350.0) - 0.2).abs() < 1e-9);
        // Out again: never past the extent.
        assert_eq!(w2.zoom(100.0, 0.9, extent), extent);
        // In: never narrower than MIN_WIDTH.
        assert_eq!(w2.zoom(1e-9, 0.5, extent).width(), MIN_WIDTH);
        // A tiny extent is its own limit.
        let tiny = Window::new(5, 8);
        assert_eq!(tiny.zoom(0.1, 0.5, tiny), tiny);
        // Nonsense input changes nothing.
        assert_eq!(w.zoom(f64::NAN, f64::NAN, extent), w);
    }

    #[test]
    fn pan_stops_at_the_edges_and_works_on_timestamps() {
        let extent = Window::new(0, 1000);
        let w = Window::new(100, 200);
        assert_eq!(w.pan(0.5, extent), Window::new(150, 250));
        assert_eq!(w.pan(-5.0, extent), Window::new(0, 100));
        assert_eq!(w.pan(50.0, extent), Window::new(900, 1000));
        // Microseconds since the epoch: exact at this magnitude.
        let t0 = 1_764_000_000_000_000;
        let extent = Window::new(t0, t0 + 10_000_000);
        let w = extent.zoom(0.001, 0.0, extent);
        assert_eq!(w, Window::new(t0, t0 + 10_000));
        assert_eq!(w.shifted(1, extent), Window::new(t0 + 1, t0 + 10_001));
        assert_eq!(Window::new(7, 3), Window::new(7, 8));
    }

    #[test]
    fn memory_zoom_keeps_the_anchor_and_returns_to_following_the_data() {
        let top = 1 << 30;
        let whole = ByteRange { lo: 0, hi: top };
        let half = whole.zoom(0.5, 0.5, top).expect("zoomed");
        assert_eq!(half, ByteRange { lo: top / 4, hi: top / 4 * 3 });
        // The byte under the mouse stays put.
        let z = half.zoom(0.5, 0.2, top).expect("zoomed");
        assert_eq!(z.span(), top / 4);
        assert_eq!(z.lo + z.span() / 5, half.lo + half.span() / 5);
        // Never narrower than MIN_BYTE_SPAN, never below 0 or above the top.
        let deepest = z.zoom(1e-12, 0.0, top).expect("zoomed");
        assert_eq!((deepest.lo, deepest.span()), (z.lo, MIN_BYTE_SPAN));
        assert_eq!(ByteRange { lo: 0, hi: 4096 }.zoom(0.5, 0.0, top), Some(ByteRange { lo: 0, hi: 2048 }));
        assert_eq!(ByteRange { lo: top - 100, hi: top }.zoom(4.0, 1.0, top).map(|r| r.hi), Some(top));
        // Out to the whole axis: no zoom left.
        assert_eq!(z.zoom(1e9, 0.5, top), None);
        assert_eq!(z.zoom(f64::NAN, f64::NAN, top), Some(z));
    }

    #[test]
    fn memory_ticks_are_round_and_inside() {
        let r = ByteRange { lo: (1 << 30) + 100, hi: (1 << 30) + 4196 };
        let ticks = r.ticks(4);
        assert!(ticks.len() >= 3, "{ticks:?}");
        assert!(ticks.iter().all(|&t| t >= r.lo && t <= r.hi && t % 1024 == 0), "{ticks:?}");
    }
}
