//! The minimap's brush: the whole trace drawn small, with the visible window
//! as a box that can be dragged. Converts between the minimap's pixels and
//! the x axis, natively tested.

use vramscope_shared::timeline::Bucket;

use crate::core::viewport::Window;

/// The minimap's curves over the whole trace's `buckets`, placed in the
/// plot area `(left, width)` showing `extent` on a minimap `height` pixels
/// tall: the reserved and the allocated maxima as steps (two points a
/// bucket), scaled so that the highest reserved or active maximum reaches
/// 4 pixels from the top.
pub fn curves(buckets: &[Bucket], extent: Window, (left, width): (f64, f64), height: f64) -> [Vec<(f64, f64)>; 2] {
    let top = buckets.iter().map(|b| b.reserved.max.max(b.active.max)).max().unwrap_or(1).max(1) as f64;
    let y = |b: u64| height - 2.0 - b as f64 / top * (height - 6.0);
    let x = |x: i64| left + extent.fraction_of(x as f64) * width;
    let steps = |value: fn(&Bucket) -> u64| {
        buckets.iter().flat_map(|b| [(x(b.x0), y(value(b))), (x(b.x1), y(value(b)))]).collect::<Vec<_>>()
    };
    [steps(|b| b.reserved.max), steps(|b| b.allocated.max)]
}

/// Where the brush sits on a minimap `width` pixels wide showing `extent`:
/// `(left, right)` in pixels, at least 3 pixels apart so it stays grabbable.
pub fn brush_px(view: Window, extent: Window, width: f64) -> (f64, f64) {
    let w = width.max(1.0);
    let left = (extent.fraction_of(view.start as f64) * w).clamp(0.0, w);
    let right = (extent.fraction_of(view.end as f64) * w).clamp(0.0, w);
    if right - left >= 3.0 {
        (left, right)
    } else {
        let mid = (left + right) / 2.0;
        ((mid - 1.5).max(0.0), (mid + 1.5).min(w))
    }
}

/// The view after dragging the brush by `dx` pixels from `from`.
pub fn dragged(from: Window, extent: Window, width: f64, dx: f64) -> Window {
    let shift = (dx / width.max(1.0) * extent.width() as f64).round() as i64;
    from.shifted(shift, extent)
}

/// The view of the same width centred on the minimap's pixel `x`.
pub fn centred_at(view: Window, extent: Window, width: f64, x: f64) -> Window {
    let centre = extent.start as f64 + (x / width.max(1.0)).clamp(0.0, 1.0) * extent.width() as f64;
    let start = (centre - view.width() as f64 / 2.0).round() as i64;
    Window::new(start, start + view.width()).clamp_into(extent)
}

/// Whether the minimap's pixel `x` is on the brush (with a little slack).
pub fn on_brush(view: Window, extent: Window, width: f64, x: f64) -> bool {
    let (l, r) = brush_px(view, extent, width);
    x >= l - 2.0 && x <= r + 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brush_follows_the_view_and_drags_within_the_extent() {
        let extent = Window::new(0, 1000);
        let view = Window::new(250, 500);
        assert_eq!(brush_px(view, extent, 400.0), (100.0, 200.0));
        assert!(on_brush(view, extent, 400.0, 150.0) && !on_brush(view, extent, 400.0, 300.0));
        // 40 pixels of 400 are 100 x units.
        assert_eq!(dragged(view, extent, 400.0, 40.0), Window::new(350, 600));
        // Never past the ends.
        assert_eq!(dragged(view, extent, 400.0, 4000.0), Window::new(750, 1000));
        assert_eq!(dragged(view, extent, 400.0, -4000.0), Window::new(0, 250));
        assert_eq!(centred_at(view, extent, 400.0, 200.0), Window::new(375, 625));
        assert_eq!(centred_at(view, extent, 400.0, 0.0), Window::new(0, 250));
        // A tiny window still gets a brush one can grab.
        let (l, r) = brush_px(Window::new(500, 501), extent, 400.0);
        assert!((r - l - 3.0).abs() < 1e-9 && l > 197.0, "{l} {r}");
        // Microseconds since the epoch.
        let t0 = 1_796_216_233_536_725;
        let e = Window::new(t0, t0 + 8_000_000);
        assert_eq!(
            dragged(Window::new(t0, t0 + 1_000_000), e, 800.0, 100.0),
            Window::new(t0 + 1_000_000, t0 + 2_000_000)
        );
    }

    #[test]
    fn the_curves_step_over_the_buckets_scaled_to_the_highest() {
        use vramscope_shared::timeline::Range3;
        let range = |max| Range3 { min: 0, max, last: max };
        let bucket = |x0, allocated, reserved| Bucket {
            x0,
            x1: x0 + 50,
            allocated: range(allocated),
            reserved: range(reserved),
            active: range(allocated),
            events: 1,
        };
        let buckets = [bucket(0, 50, 100), bucket(50, 25, 50)];
        let [reserved, allocated] = curves(&buckets, Window::new(0, 100), (10.0, 200.0), 44.0);
        // 100 bytes reach 4 pixels from the top; nothing sits 2 above the bottom.
        assert_eq!(reserved, [(10.0, 4.0), (110.0, 4.0), (110.0, 23.0), (210.0, 23.0)]);
        assert_eq!(allocated, [(10.0, 23.0), (110.0, 23.0), (110.0, 32.5), (210.0, 32.5)]);
        assert_eq!(curves(&[], Window::new(0, 100), (10.0, 200.0), 44.0), [vec![], vec![]]);
    }
}
