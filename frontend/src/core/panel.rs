//! A canvas panel's sizes and guards, natively tested: how wide its canvas
//! is drawn, and whether a panel lined up with the timeline's plot area
//! (segments, fragmentation, minimap, track) has anything to draw at yet.
//! The panels themselves (`explorer/panel.rs`) read the page through these.

use crate::core::viewport::Window;

/// The narrowest a panel's canvas is drawn, in CSS pixels.
pub const MIN_WIDTH: f64 = 320.0;

/// The width a canvas is drawn at in a container `client_width` CSS pixels
/// wide: the container's, at least `min`.
pub fn css_width(client_width: i32, min: f64) -> f64 {
    f64::from(client_width).max(min)
}

/// Where a canvas lined up with the timeline's plot area draws: the visible
/// window, the plot area (left and width in CSS pixels) and the canvas's
/// width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Aligned {
    /// The visible window.
    pub view: Window,
    /// The plot area's left edge.
    pub left: f64,
    /// The plot area's width.
    pub width: f64,
    /// The canvas's width (its container's, at least [`MIN_WIDTH`]).
    pub css_w: f64,
}

impl Aligned {
    /// Where to draw the window `view` in the plot area `(left, width)` on
    /// a canvas in a container `client_width` wide; `None` while there is
    /// nothing to draw at: no window yet, or a plot area of no width (the
    /// timeline not laid out yet).
    pub fn new(view: Option<Window>, (left, width): (f64, f64), client_width: i32) -> Option<Aligned> {
        let view = view?;
        (width > 0.0).then(|| Aligned { view, left, width, css_w: css_width(client_width, MIN_WIDTH) })
    }

    /// The plot area, `(left, width)`.
    pub fn plot(&self) -> (f64, f64) {
        (self.left, self.width)
    }

    /// The cursor at `x`, when it is inside the visible window (a cursor
    /// outside it is not drawn).
    pub fn visible(&self, x: Option<i64>) -> Option<i64> {
        x.filter(|&x| self.shows(x))
    }

    /// Whether `x` is inside the visible window (half open).
    pub fn shows(&self, x: i64) -> bool {
        x >= self.view.start && x < self.view.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canvas_is_as_wide_as_its_container_but_never_narrower_than_the_floor() {
        assert_eq!(css_width(900, MIN_WIDTH), 900.0);
        assert_eq!(css_width(100, MIN_WIDTH), 320.0);
        assert_eq!(css_width(0, 480.0), 480.0);
        assert_eq!(css_width(-5, MIN_WIDTH), 320.0);
    }

    #[test]
    fn nothing_is_drawn_without_a_window_or_before_the_plot_area_has_a_width() {
        let v = Window::new(10, 20);
        assert_eq!(Aligned::new(None, (62.0, 800.0), 900), None);
        assert_eq!(Aligned::new(Some(v), (0.0, 0.0), 900), None);
        assert_eq!(Aligned::new(Some(v), (62.0, -1.0), 900), None);
        let a = Aligned::new(Some(v), (62.0, 800.0), 100).expect("a window and a plot area");
        assert_eq!(a, Aligned { view: v, left: 62.0, width: 800.0, css_w: 320.0 });
        assert_eq!(a.plot(), (62.0, 800.0));
    }

    #[test]
    fn the_cursor_shows_only_inside_the_half_open_window() {
        let a = Aligned::new(Some(Window::new(10, 20)), (0.0, 100.0), 500).expect("drawable");
        assert_eq!(a.visible(Some(10)), Some(10));
        assert_eq!(a.visible(Some(19)), Some(19));
        assert_eq!(a.visible(Some(20)), None);
        assert_eq!(a.visible(Some(9)), None);
        assert_eq!(a.visible(None), None);
        assert!(a.shows(10) && !a.shows(20));
    }
}
