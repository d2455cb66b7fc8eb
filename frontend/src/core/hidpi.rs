//! Sharp canvases on high-density screens. A canvas's backing store is
//! `devicePixelRatio` times its CSS size; [`Scaled`] wraps a plotters
//! backend drawing into such a store and presents it to plotters at the CSS
//! size, multiplying every coordinate, stroke and font by the ratio. The
//! plot's layout, its [`crate::core::layout::Geometry`] and the mouse all stay in
//! CSS pixels.

use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind, FontFamily,
    FontStyle, FontTransform,
};

/// A backend seen at `1 / scale` of its size.
#[derive(Debug)]
pub struct Scaled<B> {
    inner: B,
    scale: f64,
}

impl<B: DrawingBackend> Scaled<B> {
    /// Wrap `inner`, whose pixels are `scale` times smaller than CSS pixels
    /// (`devicePixelRatio`; anything not finite or below 1 counts as 1).
    pub fn new(inner: B, scale: f64) -> Scaled<B> {
        let scale = if scale.is_finite() && scale >= 1.0 { scale } else { 1.0 };
        Scaled { inner, scale }
    }

    fn at(&self, (x, y): BackendCoord) -> BackendCoord {
        ((f64::from(x) * self.scale).round() as i32, (f64::from(y) * self.scale).round() as i32)
    }
}

/// A stroke style with its width scaled.
struct Stroke {
    color: BackendColor,
    width: u32,
}

impl BackendStyle for Stroke {
    fn color(&self) -> BackendColor {
        self.color
    }
    fn stroke_width(&self) -> u32 {
        self.width
    }
}

fn stroke<S: BackendStyle>(style: &S, scale: f64) -> Stroke {
    Stroke { color: style.color(), width: ((f64::from(style.stroke_width()) * scale).round() as u32).max(1) }
}

/// A text style with its size scaled.
struct Text<'a, T> {
    inner: &'a T,
    scale: f64,
}

impl<T: BackendTextStyle> BackendTextStyle for Text<'_, T> {
    type FontError = T::FontError;
    fn color(&self) -> BackendColor {
        self.inner.color()
    }
    fn size(&self) -> f64 {
        self.inner.size() * self.scale
    }
    fn transform(&self) -> FontTransform {
        self.inner.transform()
    }
    fn style(&self) -> FontStyle {
        self.inner.style()
    }
    fn anchor(&self) -> plotters_backend::text_anchor::Pos {
        self.inner.anchor()
    }
    fn family(&self) -> FontFamily<'_> {
        self.inner.family()
    }
    fn layout_box(&self, text: &str) -> Result<((i32, i32), (i32, i32)), Self::FontError> {
        let ((x0, y0), (x1, y1)) = self.inner.layout_box(text)?;
        let s = |v: i32| (f64::from(v) * self.scale).round() as i32;
        Ok(((s(x0), s(y0)), (s(x1), s(y1))))
    }
    fn draw<E, F: FnMut(i32, i32, BackendColor) -> Result<(), E>>(
        &self,
        text: &str,
        pos: BackendCoord,
        draw: F,
    ) -> Result<Result<(), E>, Self::FontError> {
        self.inner.draw(text, pos, draw)
    }
}

impl<B: DrawingBackend> DrawingBackend for Scaled<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        let (w, h) = self.inner.get_size();
        ((f64::from(w) / self.scale).round() as u32, (f64::from(h) / self.scale).round() as u32)
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let (x, y) = self.at(point);
        let side = self.scale.round().max(1.0) as i32;
        let style = Stroke { color, width: 1 };
        self.inner.draw_rect((x, y), (x + side - 1, y + side - 1), &style, true)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let (from, to, style) = (self.at(from), self.at(to), stroke(style, self.scale));
        self.inner.draw_line(from, to, &style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let (a, b, style) = (self.at(upper_left), self.at(bottom_right), stroke(style, self.scale));
        self.inner.draw_rect(a, b, &style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let points: Vec<BackendCoord> = path.into_iter().map(|p| self.at(p)).collect();
        self.inner.draw_path(points, &stroke(style, self.scale))
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let (c, r) = (self.at(center), (f64::from(radius) * self.scale).round() as u32);
        self.inner.draw_circle(c, r, &stroke(style, self.scale), fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let points: Vec<BackendCoord> = vert.into_iter().map(|p| self.at(p)).collect();
        self.inner.fill_polygon(points, &stroke(style, self.scale))
    }
    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let pos = self.at(pos);
        self.inner.draw_text(text, &Text { inner: style, scale: self.scale }, pos)
    }
    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        let (w, h) = self.inner.estimate_text_size(text, &Text { inner: style, scale: self.scale })?;
        Ok(((f64::from(w) / self.scale).round() as u32, (f64::from(h) / self.scale).round() as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_plot::recorder::Recorder;

    #[test]
    fn css_pixels_become_device_pixels() {
        use plotters::prelude::*;
        let (device, log) = Recorder::new((2000, 800));
        let mut scaled = Scaled::new(device, 2.0);
        assert_eq!(scaled.get_size(), (1000, 400));
        let style = ShapeStyle { color: RED.to_rgba(), filled: true, stroke_width: 2 };
        scaled.draw_rect((10, 20), (30, 40), &style, true).expect("rect");
        scaled.draw_path(vec![(1, 1), (5, 5)], &style).expect("path");
        let font = TextStyle::from(("sans-serif", 12).into_font());
        scaled.draw_text("MiB", &font, (0, 0)).expect("text");
        let log = log.take();
        let rects: Vec<_> = log.rects.iter().map(|&(_, _, a, b)| (a, b)).collect();
        assert_eq!(rects, [((20, 40), (60, 80))]);
        let paths: Vec<_> = log.paths.iter().map(|(_, p, w)| (p.clone(), *w)).collect();
        assert_eq!(paths, [(vec![(2, 2), (10, 10)], 4)]);
        let font_sizes: Vec<f64> = log.texts.iter().map(|t| t.2).collect();
        assert_eq!(font_sizes, [24.0]);
        // Nonsense ratios draw at 1:1.
        assert_eq!(Scaled::new(Recorder::new((2000, 800)).0, f64::NAN).get_size(), (2000, 800));
    }
}
