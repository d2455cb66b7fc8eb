//! Figures as the dashboard prints them: sizes in binary units, addresses in
//! hex, and the x axis as rows or as time since the trace's start.

use vramscope_shared::timeline::Axis;

/// Bytes as the dashboard prints them, in binary units with three
/// significant digits or so (figures of one width in tables and axes):
/// `512 B`, `1.50 KiB`, `270.6 MiB`, `3.94 GiB`. This module is the one
/// byte formatter of the project: this style and the command line's
/// ([`bytes_text`]), both through `humansize`, which picks the unit; only
/// the number of decimals (from the magnitude) is ours.
pub fn bytes(n: u64) -> String {
    let mut value = n as f64;
    while value >= 1024.0 {
        value /= 1024.0;
    }
    let places = if n < 1024 {
        0
    } else if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    humansize::format_size(n, humansize::BINARY.decimal_places(places).decimal_zeroes(places))
}

/// Bytes as the command line and its reports print them: binary units,
/// two decimals, none for a whole number (`6 GiB`, `640.89 MiB`).
pub fn bytes_text(n: u64) -> String {
    humansize::format_size(n, humansize::BINARY)
}

/// A memory pool by its id: `(0, 0)` is the default pool, anything else a
/// private pool (a CUDA graph's or a `MemPool`).
pub fn pool((a, b): (i64, i64)) -> String {
    if (a, b) == (0, 0) { "default pool".to_owned() } else { format!("private pool ({a}, {b})") }
}

/// An exact count with thousands separators: `1,234,567`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count and its noun, singular for one: `1 rank`, `0 ranks`,
/// `1,234 blocks`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", grouped(n), if n == 1 { one } else { many })
}

/// A device address as PyTorch's viewer shows it: lowercase hex with `0x`.
pub fn hex(addr: u64) -> String {
    format!("{addr:#x}")
}

/// A duration in microseconds, in the unit that suits it: `850 µs`,
/// `12.5 ms`, `3.20 s`, `2 min 05 s`.
pub fn duration_us(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let us = us.unsigned_abs();
    if us < 1_000 {
        format!("{sign}{us} µs")
    } else if us < 1_000_000 {
        format!("{sign}{:.1} ms", us as f64 / 1e3)
    } else if us < 60_000_000 {
        format!("{sign}{:.2} s", us as f64 / 1e6)
    } else {
        let s = us / 1_000_000;
        format!("{sign}{} min {:02} s", s / 60, s % 60)
    }
}

/// A label of the x axis at `x`: the row number on the event axis, the time
/// since `origin` (the trace's first event) on the time axis. `step` is the
/// distance between ticks, which sets the unit and the decimals shown.
pub fn x_label(axis: Axis, x: i64, origin: i64, step: i64) -> String {
    match axis {
        Axis::Event => compact(x),
        Axis::Time => {
            let dt = x.saturating_sub(origin) as f64;
            let step = step.max(1) as f64;
            let (unit, name) = if step >= 100_000.0 { (1e6, "s") } else { (1e3, "ms") };
            let decimals = (-(step / unit).log10()).ceil().max(0.0) as usize;
            format!("{:.decimals$} {name}", dt / unit)
        }
    }
}

/// Ticks for an x window: multiples of a round step (1, 2 or 5 times a power
/// of ten) counted from `origin`, about `target` of them, inside the window.
/// Returns the ticks and the step.
pub fn x_ticks(start: i64, end: i64, origin: i64, target: u32) -> (Vec<i64>, i64) {
    let width = end.saturating_sub(start).max(1) as f64;
    let rough = width / f64::from(target.max(1));
    let mut step: i64 = 1;
    'search: for power in 0..18 {
        for m in [1, 2, 5] {
            let candidate = m * 10i64.pow(power);
            if candidate as f64 >= rough {
                step = candidate;
                break 'search;
            }
        }
    }
    let first = origin + (start - origin).div_euclid(step) * step;
    let ticks = (0..=target.saturating_mul(3) as i64 + 2)
        .map(|k| first.saturating_add(k.saturating_mul(step)))
        .filter(|&x| x >= start && x < end)
        .collect();
    (ticks, step)
}

/// Ticks for a byte axis from 0 to `max`: multiples of a power of two
/// (`256 MiB`, `512 MiB`, `1 GiB`...), about `target` of them.
pub fn byte_ticks(max: u64, target: u32) -> Vec<u64> {
    let rough = (max / u64::from(target.max(1))).max(1);
    let step = rough.checked_next_power_of_two().unwrap_or(1 << 63);
    (0..=u64::from(target) * 2 + 1).map_while(|k| k.checked_mul(step)).take_while(|&y| y <= max).collect()
}

/// A row number, short: `950`, `12.3k`, `1.50M`.
pub fn compact(n: i64) -> String {
    let a = n.unsigned_abs();
    let sign = if n < 0 { "-" } else { "" };
    if a < 10_000 {
        format!("{n}")
    } else if a < 1_000_000 {
        format!("{sign}{:.1}k", a as f64 / 1e3)
    } else {
        format!("{sign}{:.2}M", a as f64 / 1e6)
    }
}

/// A point of the x axis in words, for the details panel: `row 1,234` or
/// `+1.25 s` (since the trace's first event).
pub fn x_point(axis: Axis, x: i64, origin: i64) -> String {
    match axis {
        Axis::Event => format!("row {}", grouped(x.max(0) as u64)),
        Axis::Time => format!("+{}", duration_us(x.saturating_sub(origin))),
    }
}

/// A wall-clock time of day (UTC) from microseconds since the epoch, as
/// `HH:MM:SS.mmm UTC`.
pub fn clock_us(us: i64) -> String {
    let ms = us.div_euclid(1000);
    let day_ms = ms.rem_euclid(86_400_000);
    let (h, m, s, f) = (day_ms / 3_600_000, day_ms / 60_000 % 60, day_ms / 1000 % 60, day_ms % 1000);
    format!("{h:02}:{m:02}:{s:02}.{f:03} UTC")
}

/// A share as a percentage with one decimal.
pub fn percent(part: f64) -> String {
    if part.is_finite() { format!("{:.1}%", part * 100.0) } else { "—".to_owned() }
}

/// Signed bytes for people: `+1.5 MiB`, `-20 KiB`, `0 B`.
pub fn signed_bytes(delta: i64) -> String {
    match delta {
        0 => "0 B".to_owned(),
        d if d > 0 => format!("+{}", bytes(d.unsigned_abs())),
        d => format!("-{}", bytes(d.unsigned_abs())),
    }
}

#[cfg(test)]
mod tests {

    /// The hand-written formatter `bytes` replaced, kept to show the
    /// crate prints every figure the same.
    fn bytes_by_hand(n: u64) -> String {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        if n < 1024 {
            return format!("{n} B");
        }
        let mut value = n as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        let digits = if value < 10.0 {
            2
        } else if value < 100.0 {
            1
        } else {
            0
        };
        format!("{value:.digits$} {}", UNITS[unit])
    }

    #[test]
    fn regression_one_byte_formatter_prints_what_the_hand_written_one_did() {
        let mut n: u64 = 1;
        let mut checked = 0;
        while n < u64::MAX / 3 {
            for m in [n - 1, n, n + 1, n + n / 3, n - n / 1024, n / 1000 * 999] {
                assert_eq!(bytes(m), bytes_by_hand(m), "{m}");
                checked += 1;
            }
            n = n * 3 / 2 + 1;
        }
        assert!(checked > 500);
        assert_eq!(bytes(u64::MAX), bytes_by_hand(u64::MAX));
        assert_eq!(
            (bytes_text(6 << 30), bytes_text(672_022_528), bytes_text(512)),
            ("6 GiB".into(), "640.89 MiB".into(), "512 B".into())
        );
    }
    use super::*;

    #[test]
    fn sizes_addresses_and_counts() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(283_689_984), "271 MiB");
        assert_eq!(bytes(4_232_052_736), "3.94 GiB");
        assert_eq!(bytes(50 << 20), "50.0 MiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!((count(1, "rank", "ranks"), count(0, "rank", "ranks")), ("1 rank".to_owned(), "0 ranks".to_owned()));
        assert_eq!(count(1_234, "block", "blocks"), "1,234 blocks");
        assert_eq!(hex(0x7f3a_0000_0000), "0x7f3a00000000");
        assert_eq!(compact(9_999), "9999");
        assert_eq!(compact(12_345), "12.3k");
        assert_eq!(compact(1_500_000), "1.50M");
    }

    #[test]
    fn ticks_are_round_from_the_origin() {
        let origin = 1_764_000_000_123_456;
        let (ticks, step) = x_ticks(origin + 140_000, origin + 5_320_000, origin, 8);
        assert_eq!(step, 1_000_000);
        assert_eq!(ticks, [1, 2, 3, 4, 5].map(|s| origin + s * 1_000_000));
        let (ticks, step) = x_ticks(0, 6680, 0, 8);
        assert_eq!((ticks.len(), step), (7, 1000));
        let (ticks, step) = x_ticks(10, 13, 0, 8);
        assert_eq!((ticks, step), (vec![10, 11, 12], 1));
        assert_eq!(byte_ticks(2_900 << 20, 6), [0, 512, 1024, 1536, 2048, 2560].map(|m| m << 20));
        assert_eq!(byte_ticks(0, 6), [0]);
        assert_eq!(byte_ticks(u64::MAX, 6).len(), 4);
    }

    #[test]
    fn time_labels_follow_the_step() {
        assert_eq!(duration_us(850), "850 µs");
        assert_eq!(duration_us(12_500), "12.5 ms");
        assert_eq!(duration_us(3_200_000), "3.20 s");
        assert_eq!(duration_us(125_000_000), "2 min 05 s");
        assert_eq!(duration_us(-2_000), "-2.0 ms");
        let origin = 1_700_000_000_000_000;
        assert_eq!(x_label(Axis::Time, origin + 40, origin, 10), "0.04 ms");
        assert_eq!(x_label(Axis::Time, origin + 12_345, origin, 2_000), "12 ms");
        assert_eq!(x_label(Axis::Time, origin + 12_500, origin, 500), "12.5 ms");
        assert_eq!(x_label(Axis::Time, origin + 2_500_000, origin, 500_000), "2.5 s");
        assert_eq!(x_label(Axis::Time, origin + 3_000_000, origin, 1_000_000), "3 s");
        assert_eq!(x_label(Axis::Event, 43_546, 0, 5_000), "43.5k");
        assert_eq!(x_point(Axis::Event, 1234, 0), "row 1,234");
        assert_eq!(x_point(Axis::Time, origin + 1_250_000, origin), "+1.25 s");
    }

    #[test]
    fn clock_times_and_percentages() {
        // 2026-12-02 18:27:55.123456 UTC.
        assert_eq!(clock_us(1_796_236_075_123_456), "18:27:55.123 UTC");
        assert_eq!(clock_us(0), "00:00:00.000 UTC");
        assert_eq!(percent(0.1234), "12.3%");
        assert_eq!(percent(f64::NAN), "—");
    }

    #[test]
    fn signed_bytes_say_which_way() {
        assert_eq!(signed_bytes(2048), "+2.00 KiB");
        assert_eq!(signed_bytes(-1), "-1 B");
        assert_eq!(signed_bytes(0), "0 B");
    }
}
