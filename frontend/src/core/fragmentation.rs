//! What the fragmentation panel says and draws, natively tested: the scale
//! of its curves and the curves themselves (through a [`Painter`]), the
//! instant where the most free bytes were stuck in split segments, and the
//! recorded allocator settings in words.

use vramscope_shared::views::fragmentation::{FragmentationAnswer, SettingsView};
use vramscope_shared::views::state::Figures;

use crate::core::axes;
use crate::core::format;
use crate::core::paint::{self, Font, Painter, Point};
use crate::core::palette::{self, Colour};
use crate::core::panel::Aligned;
use crate::core::viewport::Window;

/// Height of the chart.
pub const HEIGHT: f64 = 190.0;

/// Picks one figure of a column.
type Pick = fn(&Figures) -> u64;

/// The bytes the top of the chart stands for: the largest reserved figure
/// of the window (at least 1).
pub fn top(answer: &FragmentationAnswer) -> f64 {
    answer.columns.iter().map(|c| c.figures.reserved).max().unwrap_or(1).max(1) as f64
}

/// The window's worst instant, when any free bytes were stuck in split
/// segments: what to say of it, and its row (a button moves the cursor
/// there).
pub fn worst(answer: &FragmentationAnswer) -> Option<(String, Option<u32>)> {
    let w = answer.worst?;
    let f = w.figures;
    (f.inactive_split > 0).then(|| {
        let text = format!(
            "Most free bytes stuck in split segments: {} of {} reserved ({} free in all, largest free block {}). ",
            format::bytes(f.inactive_split),
            format::bytes(f.reserved),
            format::bytes(f.inactive),
            format::bytes(f.largest_free),
        );
        (text, w.column.row)
    })
}

/// The recorded allocator settings as the panel lists them.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `PYTORCH_CUDA_ALLOC_CONF`, or that it was not set.
    pub conf: String,
    /// `expandable_segments`: "on" or "off".
    pub expandable: &'static str,
    /// `max_split_size`.
    pub split: String,
    /// `garbage_collection_threshold`.
    pub gc: String,
}

impl Settings {
    /// The settings of `s`, in words (`None`: the snapshot recorded none).
    pub fn of(s: &SettingsView) -> Option<Settings> {
        if !s.recorded {
            return None;
        }
        Some(Settings {
            conf: s.alloc_conf.clone().unwrap_or_else(|| "not set (defaults)".to_owned()),
            expandable: if s.expandable_segments { "on" } else { "off" },
            split: s.max_split_size.map_or("unlimited".to_owned(), format::bytes),
            gc: if s.garbage_collection_threshold > 0.0 {
                format!("{}", s.garbage_collection_threshold)
            } else {
                "off".to_owned()
            },
        })
    }
}

/// The four curves of `d` (reserved, allocated, inactive split, rounding
/// waste) placed at `view` in the plot area `(left, width)`, scaled so that
/// `top` bytes reach the top: a step per column.
pub fn draw_curves(p: &mut impl Painter, d: &FragmentationAnswer, view: Window, (left, width): (f64, f64), top: f64) {
    let y = |b: u64| HEIGHT - 4.0 - b as f64 / top * (HEIGHT - 24.0);
    p.clip((left, 0.0, width, HEIGHT));
    let series: [(Colour, Pick); 4] = [
        (palette::RESERVED, |f| f.reserved),
        (palette::ALLOCATED, |f| f.allocated),
        (palette::PENDING, |f| f.inactive_split),
        (palette::WASTE, |f| f.waste),
    ];
    for (colour, value) in series {
        let mut points: Vec<Point> = Vec::with_capacity(2 * d.columns.len());
        for c in &d.columns {
            let yy = y(value(&c.figures));
            points.push((axes::x_px(view, left, width, c.column.x0 as f64), yy));
            points.push((axes::x_px(view, left, width, c.column.x1 as f64), yy));
        }
        p.stroke_path(colour, 2.0, &points);
    }
    p.unclip();
}

/// Over the curves: the cursor at `cursor` (when in the window) and the
/// scale, `top` bytes to 0.
pub fn draw_overlay(p: &mut impl Painter, at: &Aligned, cursor: Option<i64>, top: f64) {
    let Aligned { view: v, left, width, .. } = *at;
    if let Some(x) = at.visible(cursor) {
        paint::vline(p, palette::CURSOR, axes::x_px(v, left, width, x as f64), (0.0, HEIGHT), 1.0);
    }
    p.text(Font::label(palette::LABEL), &format::bytes(top as u64), 4.0, 24.0);
    p.text(Font::label(palette::LABEL), "0", 4.0, HEIGHT - 4.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_shared::views::fragmentation::FragmentationColumn;
    use vramscope_shared::views::segments::Column;

    fn column(row: u32, reserved: u64, inactive_split: u64) -> FragmentationColumn {
        let figures =
            Figures { reserved, inactive_split, inactive: inactive_split, largest_free: 512, ..Figures::default() };
        FragmentationColumn { column: Column { x0: i64::from(row), x1: i64::from(row) + 1, row: Some(row) }, figures }
    }

    fn answer(columns: Vec<FragmentationColumn>, worst: Option<FragmentationColumn>) -> FragmentationAnswer {
        FragmentationAnswer {
            device: 0,
            axis: vramscope_shared::timeline::Axis::Event,
            start: 0,
            end: 2,
            columns,
            worst,
            settings: SettingsView::default(),
            exact: true,
        }
    }

    #[test]
    fn the_chart_scales_to_the_largest_reservation_and_names_the_worst_instant() {
        let a = answer(vec![column(0, 2048, 0), column(1, 4096, 1024)], Some(column(1, 4096, 1024)));
        assert_eq!(top(&a), 4096.0);
        assert_eq!(top(&answer(vec![], None)), 1.0);
        let (text, row) = worst(&a).expect("bytes were stuck");
        assert_eq!(
            text,
            "Most free bytes stuck in split segments: 1.00 KiB of 4.00 KiB reserved (1.00 KiB free in all, largest free block 512 B). "
        );
        assert_eq!(row, Some(1));
        // Nothing stuck: nothing to show.
        assert!(worst(&answer(vec![], Some(column(1, 4096, 0)))).is_none());
    }

    #[test]
    fn settings_are_said_in_words_or_not_at_all() {
        assert_eq!(Settings::of(&SettingsView::default()), None);
        let s = SettingsView {
            recorded: true,
            max_split_size: Some(1 << 20),
            garbage_collection_threshold: 0.6,
            expandable_segments: true,
            ..SettingsView::default()
        };
        let said = Settings::of(&s).expect("recorded");
        assert_eq!(
            said,
            Settings {
                conf: "not set (defaults)".to_owned(),
                expandable: "on",
                split: "1.00 MiB".to_owned(),
                gc: "0.6".to_owned()
            }
        );
        let off =
            Settings::of(&SettingsView { recorded: true, alloc_conf: Some("x".to_owned()), ..SettingsView::default() });
        assert_eq!(
            off.map(|s| (s.conf, s.split, s.gc)),
            Some(("x".to_owned(), "unlimited".to_owned(), "off".to_owned()))
        );
    }

    #[test]
    fn the_curves_of_oom_leak_step_over_its_columns_scaled_to_the_reservation() {
        use crate::core::paint::{Op, Recorder};
        use vramscope_shared::views::fragmentation::FragmentationParams;
        use vramscope_shared::views::view::{Fragmentation, View};
        let a = vramscope_shared::testing::corpus("oom_leak");
        let params = FragmentationParams {
            axis: Some(vramscope_shared::timeline::Axis::Event),
            columns: Some(100),
            ..Default::default()
        };
        let d = Fragmentation::answer(&a, &params).expect("fragmentation");
        let view = Window::new(d.start, d.end);
        let top = top(&d);
        let mut p = Recorder::new(1.0);
        draw_curves(&mut p, &d, view, (62.0, 800.0), top);
        assert_eq!(p.ops.first(), Some(&Op::Clip((62.0, 0.0, 800.0, HEIGHT))));
        assert_eq!(p.ops.last(), Some(&Op::Unclip));
        let n = d.columns.len();
        for colour in [palette::RESERVED, palette::ALLOCATED, palette::PENDING, palette::WASTE] {
            let curve = p.strokes(colour);
            assert_eq!(curve.len(), 1);
            assert_eq!(curve[0].len(), 2 * n, "two points a column");
            assert!(
                curve[0]
                    .iter()
                    .all(|&(x, y)| (62.0 - 1e-9..=862.0 + 1e-9).contains(&x) && (20.0..=HEIGHT - 4.0).contains(&y))
            );
        }
        // The largest reservation reaches the top, 20 px down.
        let highest = p.strokes(palette::RESERVED)[0].iter().map(|pt| pt.1).fold(f64::INFINITY, f64::min);
        assert!((highest - 20.0).abs() < 1e-9, "{highest}");
        let at = Aligned { view, left: 62.0, width: 800.0, css_w: 900.0 };
        let mut p = Recorder::new(1.0);
        draw_overlay(&mut p, &at, Some(d.start), top);
        assert_eq!(p.strokes(palette::CURSOR), [&[(62.5, 0.0), (62.5, HEIGHT)][..]]);
        assert_eq!(p.texts(), [format::bytes(top as u64).as_str(), "0"]);
    }
}
