//! Text on plotters' bitmap from a font embedded in the binary.
//!
//! plotters' own `ab_glyph` feature would do this through a process-wide
//! font registry, but features unify across the workspace: the dashboard's
//! native tests (which register no font) would then fail to lay out any
//! label. This wrapper keeps the font to the PNG: it measures and draws
//! text with DejaVu Sans (the `dejavu` crate's bytes, Bitstream Vera
//! licence) and passes every other primitive to the bitmap.

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::prelude::DrawingBackend;
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind, text_anchor::HPos, text_anchor::VPos,
};

/// A backend whose text is drawn with the embedded DejaVu Sans.
pub(super) struct EmbeddedFont<B> {
    inner: B,
    font: FontRef<'static>,
}

impl<B> EmbeddedFont<B> {
    pub(super) fn new(inner: B) -> EmbeddedFont<B> {
        // The bytes are the crate's own TTF, checked by its tests and ours.
        #[allow(clippy::expect_used)]
        let font = FontRef::try_from_slice(dejavu::sans::regular()).expect("DejaVu Sans is a valid font");
        EmbeddedFont { inner, font }
    }

    /// Width and height (ascent to descent) of a line of text, in pixels.
    fn measure(&self, text: &str, size: f64) -> (f32, f32) {
        let font = self.font.as_scaled(PxScale::from(size as f32));
        let mut width = 0.0;
        let mut previous = None;
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = previous {
                width += font.kern(p, id);
            }
            width += font.h_advance(id);
            previous = Some(id);
        }
        (width, font.ascent() - font.descent())
    }
}

impl<B: DrawingBackend> DrawingBackend for EmbeddedFont<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }
    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        let (w, h) = self.measure(text, style.size());
        Ok((w.ceil() as u32, h.ceil() as u32))
    }
    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let colour = style.color();
        if colour.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size();
        let (width, height) = self.measure(text, size);
        let anchor = style.anchor();
        let left = pos.0 as f32
            - match anchor.h_pos {
                HPos::Left => 0.0,
                HPos::Center => width / 2.0,
                HPos::Right => width,
            };
        let top = pos.1 as f32
            - match anchor.v_pos {
                VPos::Top => 0.0,
                VPos::Center => height / 2.0,
                VPos::Bottom => height,
            };
        let scaled = self.font.as_scaled(PxScale::from(size as f32));
        let baseline = top + scaled.ascent();
        let mut x = left;
        let mut previous = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = previous {
                x += scaled.kern(p, id);
            }
            previous = Some(id);
            let glyph = id.with_scale_and_position(scaled.scale(), point(x, baseline));
            x += scaled.h_advance(id);
            let Some(outline) = self.font.outline_glyph(glyph) else { continue };
            let bounds = outline.px_bounds();
            // Coverage first, then pixels: `draw` takes a plain closure.
            let mut coverage = Vec::new();
            outline.draw(|gx, gy, c| coverage.push((gx, gy, c)));
            for (gx, gy, c) in coverage {
                if c <= 0.0 {
                    continue;
                }
                let at = (bounds.min.x as i32 + gx as i32, bounds.min.y as i32 + gy as i32);
                let alpha = colour.alpha * f64::from(c.min(1.0));
                self.inner.draw_pixel(at, BackendColor { alpha, rgb: colour.rgb })?;
            }
        }
        Ok(())
    }
}
