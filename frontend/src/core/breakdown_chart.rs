//! The breakdown's stacked chart, through a [`Painter`]: the categories'
//! live bytes (parameters, gradients, optimizer state, activations, other)
//! stacked over the trace's rows, on a byte axis, the cursor's row marked.

use vramscope_shared::analysis::breakdown::BreakdownSeries;

use crate::core::axes::{self, BYTE_AXIS_WIDTH, ROW_AXIS_HEIGHT, XAxis};
use crate::core::paint::{self, Painter, Point};
use crate::core::palette;

/// Height of the stacked chart.
pub const HEIGHT: f64 = 180.0;
/// Top of the plot (room for the top label).
pub const PLOT_TOP: f64 = 8.0;
/// Bottom of the plot: the row labels are under it.
pub const PLOT_BOTTOM: f64 = HEIGHT - ROW_AXIS_HEIGHT;

/// The plot's left edge and width on a canvas `width` wide.
pub fn plot_x(width: f64) -> (f64, f64) {
    (BYTE_AXIS_WIDTH, (width - BYTE_AXIS_WIDTH - 10.0).max(1.0))
}

/// The categories of `s` stacked over the trace on a canvas `width` wide,
/// the row `cursor` marked.
pub fn draw_stack(p: &mut impl Painter, s: &BreakdownSeries, width: f64, cursor: Option<u32>) {
    let n = s.rows.len();
    if n == 0 {
        return;
    }
    let columns: [&[u64]; 5] = [&s.parameters, &s.gradients, &s.optimizer_state, &s.activations, &s.other];
    let totals: Vec<u64> = (0..n).map(|i| columns.iter().map(|col| col[i]).sum()).collect();
    let top_bytes = totals.iter().copied().max().unwrap_or(1).max(1);
    let top = (top_bytes + top_bytes / 20) as f64;
    let last = f64::from(s.rows[n - 1].max(1));
    let (left, plot_w) = plot_x(width);
    // Axes first: the bands are drawn over the grid lines.
    axes::byte_axis(p, top as u64, (left, plot_w), (PLOT_TOP, PLOT_BOTTOM), 4);
    axes::x_axis(p, &XAxis::rows(s.rows[n - 1], (left, plot_w), PLOT_BOTTOM));
    let x = |i: usize| left + f64::from(s.rows[i]) / last * plot_w;
    let y = |b: u64| PLOT_BOTTOM - b as f64 / top * (PLOT_BOTTOM - PLOT_TOP);
    let mut below = vec![0u64; n];
    for (k, col) in columns.iter().enumerate() {
        let above: Vec<u64> = below.iter().zip(col.iter()).map(|(a, b)| a + b).collect();
        // Along the top of the band, then back along its bottom.
        let mut band: Vec<Point> = Vec::with_capacity(2 * n + 1);
        band.push((x(0), y(below[0])));
        band.extend(above.iter().enumerate().map(|(i, &v)| (x(i), y(v))));
        band.extend(below.iter().enumerate().rev().map(|(i, &v)| (x(i), y(v))));
        p.fill_path(palette::CATEGORIES[k], &band);
        below = above;
    }
    if let Some(r) = cursor {
        paint::vline(p, palette::CURSOR, left + f64::from(r) / last * plot_w, (PLOT_TOP, PLOT_BOTTOM), 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::Recorder;
    use vramscope_shared::views::findings::BreakdownParams;
    use vramscope_shared::views::view::{Breakdown, View};

    #[test]
    fn the_categories_stack_up_to_the_total_over_the_rows() {
        let a = vramscope_shared::testing::corpus("breakdown_all_after_step");
        let params = BreakdownParams { device: Some(0), at: None, px: Some(600) };
        let mut answer = Breakdown::answer(&a, &params).expect("breakdown");
        let s = answer.devices.pop().and_then(|d| d.series).expect("a series");
        let n = s.rows.len();
        assert!(n > 10);
        let mut p = Recorder::new(1.0);
        draw_stack(&mut p, &s, 900.0, Some(s.rows[n / 2]));
        let (left, plot_w) = plot_x(900.0);
        let bands: Vec<_> = palette::CATEGORIES.iter().flat_map(|&c| p.fills(c)).collect();
        assert_eq!(bands.len(), 5, "one band per category");
        // The last band's top is the total, the tallest 5 % under the top.
        let totals: Vec<u64> = (0..n)
            .map(|i| s.parameters[i] + s.gradients[i] + s.optimizer_state[i] + s.activations[i] + s.other[i])
            .collect();
        let peak = *totals.iter().max().expect("rows");
        let highest = bands[4][1..=n].iter().map(|pt| pt.1).fold(f64::INFINITY, f64::min);
        let expected = PLOT_BOTTOM - peak as f64 / (peak + peak / 20) as f64 * (PLOT_BOTTOM - PLOT_TOP);
        assert!((highest - expected).abs() < 1e-9, "{highest} vs {expected}");
        // Every band spans the plot, first row to last.
        for band in &bands {
            assert_eq!(band.len(), 2 * n + 1);
            assert_eq!(band[1].0, left);
            assert!((band[n].0 - (left + plot_w)).abs() < 1e-9);
        }
        assert_eq!(p.strokes(palette::CURSOR).len(), 1);
        assert!(p.texts().contains(&"row"));
    }
}
