//! Each matched allocation's requested size as a polynomial of the knob,
//! through every recorded run exactly: the interpolating polynomial of the
//! lowest degree (constant, linear, quadratic, ...).
//!
//! Exact, in integers: sizes are bytes and the knob is an integer, so the
//! value at any knob is a fraction with an integer numerator and
//! denominator (Lagrange's form over a common denominator, in `i128`). At a
//! recorded size it is that run's size, to the byte. Elsewhere a fraction is
//! rounded up (a request is whole bytes). Written by hand rather than with a
//! rational-number crate: one formula over at most a handful of points, and
//! an overflow (knobs in the millions with many runs) falls back to `f64`,
//! which is said.

/// A polynomial through the points `(knob, size)`, knobs distinct.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fit {
    /// `(knob, size)`, sorted by knob, the fewest that define the
    /// polynomial (`degree + 1` of them).
    points: Vec<(u64, u64)>,
}

/// The value of a fit at a knob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Value {
    /// Bytes, rounded up, at least 0.
    pub(crate) bytes: u64,
    /// The polynomial was below 0 there (a size that shrinks with the knob,
    /// extrapolated past zero).
    pub(crate) clamped: bool,
    /// Integer arithmetic overflowed and `f64` was used.
    pub(crate) approximate: bool,
}

impl Fit {
    /// The lowest-degree polynomial through `points` (distinct knobs, any
    /// order, at least one).
    pub(crate) fn through(points: &[(u64, u64)]) -> Fit {
        let mut sorted = points.to_vec();
        sorted.sort_unstable();
        sorted.dedup_by_key(|p| p.0);
        // The degree is the first d whose polynomial through d + 1 points
        // reproduces all the others.
        for d in 0..sorted.len() {
            let candidate = Fit { points: sorted[..=d].to_vec() };
            if sorted[d + 1..].iter().all(|&(x, y)| candidate.exact(x) == Some(Ok(y))) {
                return candidate;
            }
        }
        Fit { points: sorted }
    }

    /// Degree of the polynomial (0 constant, 1 linear, 2 quadratic, ...).
    pub(crate) fn degree(&self) -> usize {
        self.points.len().saturating_sub(1)
    }

    /// The size at knob `x`.
    pub(crate) fn at(&self, x: u64) -> Value {
        match self.exact(x) {
            Some(Ok(bytes)) => Value { bytes, clamped: false, approximate: false },
            Some(Err(negative_or_fraction)) => negative_or_fraction,
            None => {
                let v = self.approximate(x);
                Value { bytes: v.max(0.0).ceil() as u64, clamped: v < 0.0, approximate: true }
            }
        }
    }

    /// Lagrange's form over the common denominator `Π_{i<j} (x_j - x_i)`:
    /// `Some(Ok(n))` for a whole number of bytes, `Some(Err(value))` for a
    /// fraction (rounded up) or a negative value (clamped), `None` on
    /// overflow.
    fn exact(&self, x: u64) -> Option<Result<u64, Value>> {
        let p = &self.points;
        if p.len() == 1 {
            return Some(Ok(p[0].1));
        }
        let xi = |i: usize| p[i].0 as i128;
        let at = x as i128;
        // denominator_i = Π_{j≠i} (x_i - x_j); common = Π_{i<j} (x_j - x_i)
        // up to sign; each term is y_i Π_{j≠i}(x - x_j) · common / denominator_i.
        let mut common: i128 = 1;
        for i in 0..p.len() {
            for j in i + 1..p.len() {
                common = common.checked_mul(xi(j) - xi(i))?;
            }
        }
        let mut numerator: i128 = 0;
        for i in 0..p.len() {
            let mut term = p[i].1 as i128;
            let mut denominator: i128 = 1;
            for j in (0..p.len()).filter(|&j| j != i) {
                term = term.checked_mul(at - xi(j))?;
                denominator = denominator.checked_mul(xi(i) - xi(j))?;
            }
            // `common` is a multiple of every `denominator_i` (it holds each
            // difference once, up to sign).
            numerator = numerator.checked_add(term.checked_mul(common / denominator)?)?;
        }
        let (n, d) = if common < 0 { (-numerator, -common) } else { (numerator, common) };
        if n < 0 {
            return Some(Err(Value { bytes: 0, clamped: true, approximate: false }));
        }
        let bytes = u64::try_from(n / d + i128::from(n % d != 0)).ok()?;
        Some(if n % d == 0 { Ok(bytes) } else { Err(Value { bytes, clamped: false, approximate: false }) })
    }

    fn approximate(&self, x: u64) -> f64 {
        let p = &self.points;
        let at = x as f64;
        (0..p.len())
            .map(|i| {
                let xi = p[i].0 as f64;
                p[i].1 as f64
                    * (0..p.len())
                        .filter(|&j| j != i)
                        .map(|j| (at - p[j].0 as f64) / (xi - p[j].0 as f64))
                        .product::<f64>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_degree_that_goes_through_every_run() {
        assert_eq!(Fit::through(&[(8, 4096), (16, 4096), (24, 4096)]).degree(), 0);
        let linear = Fit::through(&[(8, 1000), (16, 2000), (24, 3000)]);
        assert_eq!(linear.degree(), 1);
        assert_eq!(linear.at(96).bytes, 12000);
        let quadratic = Fit::through(&[(128, 128 * 128 * 4), (256, 256 * 256 * 4), (384, 384 * 384 * 4)]);
        assert_eq!(quadratic.degree(), 2);
        assert_eq!(quadratic.at(2048).bytes, 2048 * 2048 * 4);
        // A size plus a square: still exact at sizes never run.
        let mixed = |x: u64| 3 * x * x + 5000 * x + 123_457;
        let f = Fit::through(&[(100, mixed(100)), (300, mixed(300)), (200, mixed(200))]);
        assert_eq!((f.degree(), f.at(4096).bytes), (2, mixed(4096)));
    }

    #[test]
    fn every_run_is_reproduced_to_the_byte_and_fractions_round_up() {
        let points = [(3, 1001), (7, 2999), (11, 7777), (13, 1)];
        let f = Fit::through(&points);
        assert_eq!(f.degree(), 3);
        for (x, y) in points {
            assert_eq!(f.at(x), Value { bytes: y, clamped: false, approximate: false });
        }
        // (5, 10) and (7, 13): 1.5 bytes per step, so 6 → 11.5 → 12.
        assert_eq!(Fit::through(&[(5, 10), (7, 13)]).at(6).bytes, 12);
    }

    #[test]
    fn sizes_extrapolated_below_zero_are_clamped_and_said() {
        let f = Fit::through(&[(10, 1000), (20, 500)]);
        assert_eq!(f.at(40), Value { bytes: 0, clamped: true, approximate: false });
    }

    #[test]
    fn overflow_falls_back_to_floating_point() {
        let big = 1u64 << 40;
        let f = Fit::through(&[(1, 1), (big, 2), (big * 2, 7), (big * 3, 1 << 50), (big * 5, 3)]);
        let v = f.at(big * 4);
        assert!(v.approximate);
    }
}
