//! A plotters backend for unit tests: it draws nothing and records every
//! shape, with its colour, into a log the test keeps a handle to (a drawing
//! area owns its backend, so the log is shared rather than handed back).

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

use plotters::style::RGBColor;
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind};

/// What was drawn, in the backend's pixels.
#[derive(Debug, Default)]
pub struct Log {
    /// Filled polygons.
    pub polygons: Vec<(RGBColor, Vec<BackendCoord>)>,
    /// Rectangles: colour, filled, corners.
    pub rects: Vec<(RGBColor, bool, BackendCoord, BackendCoord)>,
    /// Lines: colour, points, stroke width.
    pub paths: Vec<(RGBColor, Vec<BackendCoord>, u32)>,
    /// Texts: the text, where, font size.
    pub texts: Vec<(String, BackendCoord, f64)>,
}

/// The recording backend, `size` pixels large.
pub struct Recorder {
    size: (u32, u32),
    log: Rc<RefCell<Log>>,
}

impl Recorder {
    /// A recorder of `size` and the handle to its log.
    pub fn new(size: (u32, u32)) -> (Recorder, Rc<RefCell<Log>>) {
        let log = Rc::new(RefCell::new(Log::default()));
        (Recorder { size, log: Rc::clone(&log) }, log)
    }
}

fn rgb(c: BackendColor) -> RGBColor {
    RGBColor(c.rgb.0, c.rgb.1, c.rgb.2)
}

impl DrawingBackend for Recorder {
    type ErrorType = Infallible;
    fn get_size(&self) -> (u32, u32) {
        self.size
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Infallible>> {
        Ok(())
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<Infallible>> {
        Ok(())
    }
    fn draw_pixel(&mut self, _: BackendCoord, _: BackendColor) -> Result<(), DrawingErrorKind<Infallible>> {
        Ok(())
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        self.log.borrow_mut().rects.push((rgb(style.color()), fill, a, b));
        Ok(())
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        self.log.borrow_mut().paths.push((rgb(style.color()), path.into_iter().collect(), style.stroke_width()));
        Ok(())
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        self.log.borrow_mut().polygons.push((rgb(style.color()), vert.into_iter().collect()));
        Ok(())
    }
    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        self.log.borrow_mut().texts.push((text.to_owned(), pos, style.size()));
        Ok(())
    }
}
