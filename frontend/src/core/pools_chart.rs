//! The memory pools' chart, through a [`Painter`]: one band per (pool,
//! stream) over the whole trace, reserved behind allocated, each band on
//! its own scale from 0 to its reserved peak, the rows under them and the
//! cursor's row marked.

use vramscope_shared::views::pools::{BandPoint, PoolsAnswer};

use crate::core::axes::{self, BYTE_AXIS_WIDTH, ROW_AXIS_HEIGHT, XAxis};
use crate::core::format;
use crate::core::paint::{self, Align, Font, Painter, Point};
use crate::core::palette::{self, Colour};

/// Height of one band.
pub const BAND: f64 = 46.0;
/// Space above each band for its label.
pub const LABEL: f64 = 14.0;

/// Picks one figure of a band's point.
type Pick = fn(&BandPoint) -> u64;

/// The bands' left edge and width on a canvas `width` wide (their byte
/// labels are left of it).
pub fn plot_x(width: f64) -> (f64, f64) {
    (BYTE_AXIS_WIDTH, (width - BYTE_AXIS_WIDTH - 10.0).max(1.0))
}

/// The canvas's height for the bands of `a`.
pub fn height(a: &PoolsAnswer) -> f64 {
    a.bands.len() as f64 * (BAND + LABEL) + 4.0 + ROW_AXIS_HEIGHT
}

/// One band per (pool, stream) of `a` on a canvas `width` wide, reserved
/// behind allocated, each scaled to its own reserved peak; the row axis
/// under them and the row `cursor` marked.
pub fn draw_bands(p: &mut impl Painter, a: &PoolsAnswer, width: f64, cursor: Option<u32>) {
    let last = f64::from(a.rows.saturating_sub(1).max(1));
    let (left, width) = plot_x(width);
    let label = Font::label(palette::LABEL);
    for (k, band) in a.bands.iter().enumerate() {
        let top = k as f64 * (BAND + LABEL);
        let base = top + LABEL + BAND;
        let title = format!(
            "{} · stream {} · peak {}",
            format::pool(band.pool),
            format::hex(band.stream),
            format::bytes(band.reserved_peak)
        );
        p.text(label, &title, left, top + 11.0);
        p.fill_rect(palette::MINIMAP_BACKGROUND, (left, top + LABEL, width, BAND));
        // Each band on its own scale, 0 to its peak: the labels say so.
        let right = label.aligned(Align::Right);
        p.text(right, &format::bytes(band.reserved_peak), left - 4.0, top + LABEL + 10.0);
        p.text(right, "0", left - 4.0, base);
        paint::vline(p, palette::AXIS, left - 1.0, (top + LABEL, base), 1.0);
        let scale = band.reserved_peak.max(1) as f64;
        let y = |b: u64| base - b as f64 / scale * (BAND - 2.0);
        let picks: [(Pick, Colour); 2] = [(|p| p.reserved, palette::RESERVED), (|p| p.allocated, palette::ALLOCATED)];
        for (value, colour) in picks {
            if band.series.is_empty() {
                continue;
            }
            let mut area: Vec<Point> = vec![(left, base)];
            let mut x_prev = left;
            for pt in &band.series {
                let x = left + f64::from(pt.row) / last * width;
                area.push((x_prev, y(value(pt))));
                area.push((x, y(value(pt))));
                x_prev = x;
            }
            area.push((x_prev, base));
            p.fill_path(colour, &area);
        }
    }
    let h = a.bands.len() as f64 * (BAND + LABEL) + 2.0;
    axes::x_axis(p, &XAxis::rows(a.rows.saturating_sub(1), (left, width), h));
    if let Some(r) = cursor {
        paint::vline(p, palette::CURSOR, left + f64::from(r) / last * width, (0.0, h), 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::Recorder;
    use vramscope_shared::views::pools::PoolsParams;
    use vramscope_shared::views::view::{Pools, View};

    #[test]
    fn a_band_per_pool_and_stream_each_to_its_own_peak() {
        let a = vramscope_shared::testing::corpus("graph_shared_pool");
        let pools =
            Pools::answer(&a, &PoolsParams { device: Some(0), px: Some(500), ..Default::default() }).expect("pools");
        assert!(pools.bands.len() >= 2, "the default pool and the graphs' shared pool");
        let mut p = Recorder::new(1.0);
        draw_bands(&mut p, &pools, 900.0, Some(pools.rows / 2));
        let texts = p.texts();
        for (k, band) in pools.bands.iter().enumerate() {
            let title = format!(
                "{} · stream {} · peak {}",
                format::pool(band.pool),
                format::hex(band.stream),
                format::bytes(band.reserved_peak)
            );
            assert_eq!(texts[3 * k], title);
            assert_eq!(texts[3 * k + 1], format::bytes(band.reserved_peak));
            assert_eq!(texts[3 * k + 2], "0");
        }
        let (reserved, allocated) = (p.fills(palette::RESERVED), p.fills(palette::ALLOCATED));
        assert_eq!(reserved.len(), pools.bands.len());
        assert_eq!(allocated.len(), pools.bands.len());
        // Each band's area stays inside its band, from its base up.
        for (k, area) in reserved.iter().enumerate() {
            let top = k as f64 * (BAND + LABEL) + LABEL;
            // (The peak, at most, reaches 2 px below the band's top.)
            assert!(
                area.iter().all(|&(x, y)| (62.0..=890.0).contains(&x) && y >= top + 2.0 - 1e-9 && y <= top + BAND),
                "{area:?}"
            );
            assert_eq!(area.first(), Some(&(62.0, top + BAND)));
        }
        let cursor = p.strokes(palette::CURSOR);
        assert_eq!(cursor.len(), 1);
        assert_eq!(p.rects(palette::MINIMAP_BACKGROUND).len(), pools.bands.len());
        assert!(texts.contains(&"row"));
    }
}
