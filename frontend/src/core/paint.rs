//! One way to draw the dashboard's small canvases (the segment timeline,
//! fragmentation, the track, the minimap, the allocator state, the memory
//! pools, the breakdown's stacked chart, pinned host memory), tested
//! natively: each panel's drawing is a
//! function of its data into a [`Painter`], which the browser implements
//! over its 2D context (`infra::canvas::Canvas2d`) and a test with a
//! [`Recorder`], which lists the shapes drawn.
//!
//! Not plotters' `DrawingBackend`, which the timeline and the analysis
//! charts draw through: its coordinates are whole pixels, where these
//! panels place their one-pixel lines on half pixels (`x.round() + 0.5`,
//! crisp) and their areas and curves at fractional positions, and it has
//! no clip or text alignment of the canvas's own. Drawn through it, every
//! panel would move by up to half a pixel. The trait holds the few calls
//! the panels make, in CSS pixels, each call complete (its colour and
//! width given): no state carries from one to the next.

use crate::core::blocks::Raster;
use crate::core::palette::Colour;

/// A colour as drawn: the palette's, solid or see-through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ink {
    /// As it is.
    Solid(Colour),
    /// With an opacity from 0 to 1.
    Translucent(Colour, f64),
}

impl From<Colour> for Ink {
    fn from(colour: Colour) -> Ink {
        Ink::Solid(colour)
    }
}

impl Ink {
    /// The canvas's style: `#rrggbb`, or `rgba(r,g,b,alpha)`.
    pub fn css(self) -> std::borrow::Cow<'static, str> {
        match self {
            Ink::Solid(c) => c.css().into(),
            Ink::Translucent(c, alpha) => c.css_with_alpha(alpha).into(),
        }
    }
}

/// A point, in CSS pixels.
pub type Point = (f64, f64);

/// A rectangle: left, top, width, height, in CSS pixels.
pub type Rect = (f64, f64, f64, f64);

/// Where a text's `x` is on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// The text starts at `x` (the canvas's default).
    Start,
    /// The text starts at `x`, said as `left`.
    Left,
    /// The text is centred on `x`.
    Center,
    /// The text ends at `x`.
    Right,
}

impl Align {
    /// The canvas's `textAlign`.
    pub fn css(self) -> &'static str {
        match self {
            Align::Start => "start",
            Align::Left => "left",
            Align::Center => "center",
            Align::Right => "right",
        }
    }
}

/// Where a text's `y` is on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    /// On the letters' baseline (the canvas's default).
    Alphabetic,
    /// In the middle of the em box.
    Middle,
    /// At the top of the em box.
    Top,
}

impl Baseline {
    /// The canvas's `textBaseline`.
    pub fn css(self) -> &'static str {
        match self {
            Baseline::Alphabetic => "alphabetic",
            Baseline::Middle => "middle",
            Baseline::Top => "top",
        }
    }
}

/// How a text is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Font {
    /// Size in CSS pixels (sans-serif).
    pub px: u32,
    /// Its colour.
    pub colour: Colour,
    /// Where `x` is on it.
    pub align: Align,
    /// Where `y` is on it.
    pub baseline: Baseline,
}

impl Font {
    /// A label: 11 px, from `x`, on the baseline.
    pub const fn label(colour: Colour) -> Font {
        Font { px: 11, colour, align: Align::Start, baseline: Baseline::Alphabetic }
    }

    /// An axis's tick label: 10 px, placed by `align` and `baseline`.
    pub const fn tick(colour: Colour, align: Align, baseline: Baseline) -> Font {
        Font { px: 10, colour, align, baseline }
    }

    /// The same, placed by `align`.
    pub const fn aligned(self, align: Align) -> Font {
        Font { align, ..self }
    }

    /// The canvas's `font`.
    pub fn css(&self) -> String {
        format!("{}px sans-serif", self.px)
    }
}

/// Whatever a panel draws into: the browser's 2D canvas, or a recorder.
pub trait Painter {
    /// Device pixels per CSS pixel (`devicePixelRatio`).
    fn ratio(&self) -> f64;
    /// A filled rectangle.
    fn fill_rect(&mut self, ink: impl Into<Ink>, rect: Rect);
    /// A rectangle's outline, `width` wide.
    fn stroke_rect(&mut self, ink: impl Into<Ink>, width: f64, rect: Rect);
    /// Rectangles' outlines, as one path stroked once.
    fn stroke_rects(&mut self, ink: impl Into<Ink>, width: f64, rects: &[Rect]);
    /// Lines through `points`, `width` wide.
    fn stroke_path(&mut self, ink: impl Into<Ink>, width: f64, points: &[Point]);
    /// The polygon through `points`, closed and filled.
    fn fill_path(&mut self, ink: impl Into<Ink>, points: &[Point]);
    /// `text` at `(x, y)`.
    fn text(&mut self, font: Font, text: &str, x: f64, y: f64);
    /// Draw only inside `rect` until the matching [`Painter::unclip`].
    fn clip(&mut self, rect: Rect);
    /// Undo the last [`Painter::clip`].
    fn unclip(&mut self);
    /// Device pixels put as they are, their top left at device pixel
    /// `(x, y)` (no scaling, no clip).
    fn image(&mut self, raster: &Raster, x: f64, y: f64);
}

/// A vertical line from `top` to `bottom` at `x`, on the half pixel (crisp
/// when one pixel wide).
pub fn vline(p: &mut impl Painter, colour: impl Into<Ink>, x: f64, (top, bottom): (f64, f64), width: f64) {
    let x = x.round() + 0.5;
    p.stroke_path(colour, width, &[(x, top), (x, bottom)]);
}

/// One call made to a [`Recorder`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// [`Painter::fill_rect`].
    FillRect(Ink, Rect),
    /// [`Painter::stroke_rect`].
    StrokeRect(Ink, f64, Rect),
    /// [`Painter::stroke_rects`].
    StrokeRects(Ink, f64, Vec<Rect>),
    /// [`Painter::stroke_path`].
    StrokePath(Ink, f64, Vec<Point>),
    /// [`Painter::fill_path`].
    FillPath(Ink, Vec<Point>),
    /// [`Painter::text`].
    Text(Font, String, Point),
    /// [`Painter::clip`].
    Clip(Rect),
    /// [`Painter::unclip`].
    Unclip,
    /// [`Painter::image`]: its width and height, and where it goes.
    Image(usize, usize, Point),
}

/// A [`Painter`] that lists what is drawn, for tests.
#[derive(Debug)]
pub struct Recorder {
    /// The calls, in order.
    pub ops: Vec<Op>,
    ratio: f64,
}

impl Recorder {
    /// Nothing drawn yet, at `ratio` device pixels per CSS pixel.
    pub fn new(ratio: f64) -> Recorder {
        Recorder { ops: Vec::new(), ratio }
    }

    /// The texts drawn.
    pub fn texts(&self) -> Vec<&str> {
        self.ops.iter().filter_map(|o| if let Op::Text(_, t, _) = o { Some(t.as_str()) } else { None }).collect()
    }

    /// The paths stroked in `ink`.
    pub fn strokes(&self, ink: impl Into<Ink>) -> Vec<&[Point]> {
        let colour = ink.into();
        self.ops
            .iter()
            .filter_map(|o| match o {
                Op::StrokePath(c, _, p) if *c == colour => Some(p.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// The polygons filled in `ink`.
    pub fn fills(&self, ink: impl Into<Ink>) -> Vec<&[Point]> {
        let colour = ink.into();
        self.ops
            .iter()
            .filter_map(|o| match o {
                Op::FillPath(c, p) if *c == colour => Some(p.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// The rectangles filled in `ink`.
    pub fn rects(&self, ink: impl Into<Ink>) -> Vec<Rect> {
        let colour = ink.into();
        self.ops
            .iter()
            .filter_map(|o| match o {
                Op::FillRect(c, r) if *c == colour => Some(*r),
                _ => None,
            })
            .collect()
    }
}

impl Painter for Recorder {
    fn ratio(&self) -> f64 {
        self.ratio
    }
    fn fill_rect(&mut self, ink: impl Into<Ink>, rect: Rect) {
        self.ops.push(Op::FillRect(ink.into(), rect));
    }
    fn stroke_rect(&mut self, ink: impl Into<Ink>, width: f64, rect: Rect) {
        self.ops.push(Op::StrokeRect(ink.into(), width, rect));
    }
    fn stroke_rects(&mut self, ink: impl Into<Ink>, width: f64, rects: &[Rect]) {
        self.ops.push(Op::StrokeRects(ink.into(), width, rects.to_vec()));
    }
    fn stroke_path(&mut self, ink: impl Into<Ink>, width: f64, points: &[Point]) {
        self.ops.push(Op::StrokePath(ink.into(), width, points.to_vec()));
    }
    fn fill_path(&mut self, ink: impl Into<Ink>, points: &[Point]) {
        self.ops.push(Op::FillPath(ink.into(), points.to_vec()));
    }
    fn text(&mut self, font: Font, text: &str, x: f64, y: f64) {
        self.ops.push(Op::Text(font, text.to_owned(), (x, y)));
    }
    fn clip(&mut self, rect: Rect) {
        self.ops.push(Op::Clip(rect));
    }
    fn unclip(&mut self) {
        self.ops.push(Op::Unclip);
    }
    fn image(&mut self, raster: &Raster, x: f64, y: f64) {
        self.ops.push(Op::Image(raster.width, raster.height, (x, y)));
    }
}
