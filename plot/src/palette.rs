//! The dashboard's colours, defined once: the timeline's plot, the small
//! canvases, the analysis charts and the live charts all take theirs from
//! here, so that "allocated" is the same blue everywhere. Each colour is
//! written as CSS (`#rrggbb`, what a 2D canvas takes) and read as bytes at
//! compile time (what plotters and raw pixels take); a malformed one does
//! not compile. The stylesheet's legend swatches (`style.css`) repeat the
//! main ones by hand.

use plotters::style::RGBColor;

/// A colour of the palette.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Colour {
    css: &'static str,
    bytes: [u8; 3],
}

impl Colour {
    /// `#rrggbb`, checked when the constant is evaluated (at compile time).
    const fn hex(css: &'static str) -> Colour {
        let b = css.as_bytes();
        assert!(b.len() == 7 && b[0] == b'#', "a palette colour is written #rrggbb");
        Colour { css, bytes: [byte(b[1], b[2]), byte(b[3], b[4]), byte(b[5], b[6])] }
    }

    /// The CSS form, `#rrggbb`, for a canvas's fill and stroke styles.
    pub const fn css(self) -> &'static str {
        self.css
    }

    /// The CSS form with an opacity, `rgba(r,g,b,alpha)`, for translucent fills.
    pub fn css_with_alpha(self, alpha: f64) -> String {
        let [r, g, b] = self.bytes;
        format!("rgba({r},{g},{b},{alpha})")
    }

    /// Red, green and blue.
    pub const fn bytes(self) -> [u8; 3] {
        self.bytes
    }

    /// The plotters form.
    pub const fn rgb(self) -> RGBColor {
        RGBColor(self.bytes[0], self.bytes[1], self.bytes[2])
    }
}

/// Two hex digits as a byte (compile time only: a bad digit stops the build).
const fn byte(hi: u8, lo: u8) -> u8 {
    nibble(hi) * 16 + nibble(lo)
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("a palette colour has a digit that is not hex"),
    }
}

// The hues (GitHub's Primer colours), each written once; the names below
// say what they mean on the page.
const BLUE: Colour = Colour::hex("#0969da");
const DARK_BLUE: Colour = Colour::hex("#0550ae");
const RED: Colour = Colour::hex("#cf222e");
const ORANGE: Colour = Colour::hex("#db6d28");
const GREEN: Colour = Colour::hex("#1a7f37");
const PURPLE: Colour = Colour::hex("#8250df");
const YELLOW: Colour = Colour::hex("#bf8700");
const GREY: Colour = Colour::hex("#57606a");
const MID_GREY: Colour = Colour::hex("#8c959f");
const LIGHT_GREY: Colour = Colour::hex("#d0d7de");
const PALE_GREY: Colour = Colour::hex("#eaeef2");
const SUBTLE: Colour = Colour::hex("#f6f8fa");
const INK: Colour = Colour::hex("#1f2328");
const WHITE: Colour = Colour::hex("#ffffff");

/// The categories of `vramscope breakdown`, in their stacking order:
/// parameters, gradients, optimizer state, activations, other.
pub const CATEGORIES: [Colour; 5] = [DARK_BLUE, GREEN, PURPLE, ORANGE, LIGHT_GREY];

/// Requested bytes of allocated blocks (curves, blocks, columns).
pub const ALLOCATED: Colour = BLUE;
/// Bytes reserved from CUDA.
pub const RESERVED: Colour = GREY;
/// Requested bytes of allocated and pending-free blocks (the timeline's curve).
pub const ACTIVE: Colour = ORANGE;
/// Pending frees, and free bytes stuck in split segments.
pub const PENDING: Colour = ORANGE;
/// Rounding waste.
pub const WASTE: Colour = RED;
/// Free blocks.
pub const INACTIVE: Colour = LIGHT_GREY;
/// The largest free block.
pub const LARGEST_FREE: Colour = GREEN;
/// Where an allocation failed.
pub const OOM: Colour = RED;
/// The first event of a wrapped trace.
pub const WINDOW_START: Colour = PURPLE;
/// Search matches.
pub const MATCH: Colour = YELLOW;
/// The cursor: the instant the allocator-state panel shows.
pub const CURSOR: Colour = INK;
/// Comment markers, and the outlines of expandable segments.
pub const COMMENT: Colour = PURPLE;
/// Labels drawn on canvases and plots.
pub const LABEL: Colour = GREY;
/// Text inside shapes (annotation ranges).
pub const TEXT: Colour = INK;
/// Axes and shape outlines.
pub const AXIS: Colour = MID_GREY;
/// Grid lines.
pub const GRID: Colour = PALE_GREY;
/// Plot backgrounds.
pub const BACKGROUND: Colour = WHITE;
/// The minimap's background.
pub const MINIMAP_BACKGROUND: Colour = SUBTLE;
/// Outline of the minimap's brush.
pub const BRUSH: Colour = DARK_BLUE;
/// Simulated reserved bytes (what-if).
pub const SIM_RESERVED: Colour = PURPLE;
/// Simulated allocated bytes (what-if).
pub const SIM_ALLOCATED: Colour = GREEN;
/// Where a replay ran out of memory.
pub const SIM_OOM: Colour = RED;
/// NVML's figure for a process (live charts).
pub const NVML: Colour = GREEN;
/// Memory of a process outside PyTorch's caching allocator: the band
/// between reserved and NVML's figure (live charts).
pub const OUTSIDE_ALLOCATOR: Colour = Colour::hex("#f0b37e");
/// What a process may use (live charts).
pub const CAPACITY: Colour = RED;
/// The share of reserved memory not allocated (live charts).
pub const FRAGMENTATION: Colour = ORANGE;
/// An uploaded snapshot on the live charts.
pub const SNAPSHOT_MARKER: Colour = PURPLE;

/// A recorded run's peak ("Will it fit?").
pub const RECORDED_RUN: Colour = DARK_BLUE;
/// The capacity a prediction is made under ("Will it fit?"; not red, which
/// marks the sizes that run out).
pub const PREDICT_CAPACITY: Colour = ORANGE;
/// The largest size that fits ("Will it fit?").
pub const LARGEST_FIT: Colour = GREEN;
/// A size that runs out below one that fits ("Will it fit?").
pub const DIP: Colour = YELLOW;

/// Lines of ranked series (the leaks chart's top stacks), in rank order.
pub const SERIES: [Colour; 5] = [RED, BLUE, ORANGE, GREEN, PURPLE];

/// Fill colours of allocation bars, picked by stack so that one call site
/// keeps its colour across zooms. Pale, so the curves stay readable.
pub const BARS: [Colour; 10] = [
    Colour::hex("#8cbee6"),
    Colour::hex("#fabe8c"),
    Colour::hex("#96d796"),
    Colour::hex("#e6a0c8"),
    Colour::hex("#c8b4eb"),
    Colour::hex("#f0dc82"),
    Colour::hex("#8cd7d2"),
    Colour::hex("#d7b9a0"),
    Colour::hex("#bec878"),
    Colour::hex("#afb9c8"),
];

/// Annotation ranges by nesting level.
pub const LEVELS: [Colour; 4] =
    [Colour::hex("#ddf4ff"), Colour::hex("#fff8c5"), Colour::hex("#fbefff"), Colour::hex("#dafbe1")];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn css_and_bytes_are_the_same_colour() {
        assert_eq!(ALLOCATED.css(), "#0969da");
        assert_eq!(ALLOCATED.bytes(), [9, 105, 218]);
        assert_eq!(RESERVED.rgb(), RGBColor(87, 96, 106));
        assert_eq!(BARS[0].rgb(), RGBColor(140, 190, 230));
        assert_eq!(BARS[9].bytes(), [175, 185, 200]);
        assert_eq!(Colour::hex("#ABCDEF").bytes(), [0xab, 0xcd, 0xef]);
        assert_eq!(RESERVED.css_with_alpha(0.25), "rgba(87,96,106,0.25)");
    }
}
