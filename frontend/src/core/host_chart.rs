//! Pinned host memory's chart, through a [`Painter`]: pinned and requested
//! bytes over the host trace's rows, as steps, and the scale's top.

use vramscope_shared::views::host::HostAnswer;

use crate::core::format;
use crate::core::paint::{Font, Painter, Point};
use crate::core::palette;

/// Height of the chart.
pub const HEIGHT: f64 = 150.0;

/// Pinned and requested bytes of `a` over the host trace's rows, on a
/// canvas `width` wide.
pub fn draw(p: &mut impl Painter, a: &HostAnswer, width: f64) {
    let n = a.rows.len();
    if n == 0 {
        return;
    }
    let top = a.reserved.iter().chain(&a.requested).copied().max().unwrap_or(1).max(1) as f64;
    let last = f64::from(a.rows[n - 1].max(1));
    let x = |i: usize| f64::from(a.rows[i]) / last * width;
    let y = |b: u64| HEIGHT - 2.0 - b as f64 / top * (HEIGHT - 18.0);
    for (values, colour) in [(&a.reserved, palette::RESERVED), (&a.requested, palette::ALLOCATED)] {
        let mut steps: Vec<Point> = Vec::with_capacity(2 * n);
        steps.push((x(0), y(values[0])));
        for i in 1..n {
            steps.push((x(i), y(values[i - 1])));
            steps.push((x(i), y(values[i])));
        }
        p.stroke_path(colour, 2.0, &steps);
    }
    p.text(Font::label(palette::LABEL), &format::bytes(top as u64), 4.0, 12.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::Recorder;

    /// No corpus capture records pinned host memory (PyTorch 2.14's
    /// `record_host`): the timeline is written out, beside a real device's
    /// figures.
    fn answer() -> HostAnswer {
        let mut stats = vramscope_shared::testing::corpus("oom_leak").snapshot.stats();
        HostAnswer {
            stats: stats.devices.remove(0),
            rows: vec![0, 10, 20],
            time_us: vec![],
            reserved: vec![2 << 20, 4 << 20, 4 << 20],
            requested: vec![1 << 20, 3 << 20, 0],
        }
    }

    #[test]
    fn pinned_and_requested_bytes_are_steps_scaled_to_the_larger() {
        let mut p = Recorder::new(1.0);
        draw(&mut p, &answer(), 400.0);
        let y = |mib: f64| HEIGHT - 2.0 - mib / 4.0 * (HEIGHT - 18.0);
        assert_eq!(
            p.strokes(palette::RESERVED),
            [&[(0.0, y(2.0)), (200.0, y(2.0)), (200.0, y(4.0)), (400.0, y(4.0)), (400.0, y(4.0))][..]]
        );
        assert_eq!(
            p.strokes(palette::ALLOCATED),
            [&[(0.0, y(1.0)), (200.0, y(1.0)), (200.0, y(3.0)), (400.0, y(3.0)), (400.0, y(0.0))][..]]
        );
        assert_eq!(p.texts(), ["4.00 MiB"]);
        let mut nothing = Recorder::new(1.0);
        draw(&mut nothing, &HostAnswer { rows: vec![], reserved: vec![], requested: vec![], ..answer() }, 400.0);
        assert!(nothing.ops.is_empty());
    }
}
