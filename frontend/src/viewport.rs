//! The visible window of a timeline's x axis and how zooming and panning
//! move it. Kept apart from the components so the arithmetic (which runs on
//! microsecond timestamps near 2^51) is tested natively.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
