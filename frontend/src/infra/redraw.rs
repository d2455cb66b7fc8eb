//! Redraws coalesced into animation frames (`requestAnimationFrame`): a view asks for a redraw when
//! what it shows changes, and draws once in the next `requestAnimationFrame`
//! however many changes came before it. A pan or a zoom then costs each
//! view at most one draw per frame, and a view whose inputs did not change
//! does not draw at all.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use leptos::prelude::*;

thread_local! {
    /// The redraws asked for since the last frame, in the order asked.
    static QUEUE: RefCell<Vec<Rc<Inner>>> = const { RefCell::new(Vec::new()) };
    /// Whether a frame callback is already waiting.
    static SCHEDULED: Cell<bool> = const { Cell::new(false) };
}

struct Inner {
    draw: Box<dyn Fn()>,
    pending: Cell<bool>,
    /// Cleared when the view's owner is disposed: its signals are gone.
    alive: Arc<AtomicBool>,
}

/// A view's draw, run at most once per animation frame.
#[derive(Clone)]
pub(crate) struct Redraw(Rc<Inner>);

impl Redraw {
    /// `draw` runs untracked in the frame after each [`Redraw::request`];
    /// it stops running once the current reactive owner is cleaned up.
    pub(crate) fn new(draw: impl Fn() + 'static) -> Self {
        let alive = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&alive);
        // Atomic only because cleanups must be `Send`: all runs on one thread.
        on_cleanup(move || flag.store(false, Ordering::Relaxed));
        Redraw(Rc::new(Inner { draw: Box::new(draw), pending: Cell::new(false), alive }))
    }

    /// Draw in the next frame (once, however often this is called before it).
    pub(crate) fn request(&self) {
        if self.0.pending.replace(true) {
            return;
        }
        QUEUE.with(|q| q.borrow_mut().push(Rc::clone(&self.0)));
        if !SCHEDULED.replace(true) {
            request_animation_frame(run_frame);
        }
    }
}

/// Every redraw asked for, each once.
fn run_frame() {
    SCHEDULED.set(false);
    let due = QUEUE.with(|q| std::mem::take(&mut *q.borrow_mut()));
    for inner in due {
        inner.pending.set(false);
        if inner.alive.load(Ordering::Relaxed) {
            untrack(|| (inner.draw)());
        }
    }
}
