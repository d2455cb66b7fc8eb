//! The first window, asked for early. The timeline's first request needs
//! the device (from the statistics) and the canvas's width (from the
//! layout of the page the statistics fill in), so it used to leave 40 to
//! 55 ms after the statistics came back, and its answer came 25 ms after
//! that. The snapshot page instead asks for the whole trace as soon as it
//! is on screen, beside the statistics: for the device the link names, or
//! the one the server picks, at the width the canvas will have. The
//! timeline takes that answer for its first window when it asked the same
//! thing, and asks anew when not (another device was picked, the page was
//! resized): an early answer is never drawn for another question.

use futures::channel::oneshot;
use leptos::prelude::*;
use vramscope_shared::views::TimelineParams;
use vramscope_shared::views::view::Timeline;

use super::{MAX_ALLOCATIONS, canvas_width, plot_px};
use crate::core::model::{Axis, TimelineWindow};
use crate::infra::api::{self, ApiError, TimelineQuery};

/// The canvas's border, left and right: its client width is its container's less this.
const CANVAS_BORDER_PX: i32 = 2;

/// What the early request asked, and where its answer will come.
struct Asked {
    device: Option<u32>,
    px: u32,
    answer: oneshot::Receiver<Result<TimelineWindow, ApiError>>,
}

/// A page's early first window, given to its timeline as context.
#[derive(Clone, Copy)]
pub(crate) struct EarlyWindow(StoredValue<Option<Asked>>);

impl EarlyWindow {
    /// None asked yet, for the page being built.
    pub(crate) fn provide() -> Self {
        let early = EarlyWindow(StoredValue::new(None));
        provide_context(early);
        early
    }

    /// Ask snapshot `id` for the whole trace of `device` (`None`: the one
    /// the server picks) on the event axis, for a canvas as wide as a
    /// container whose client width is `container_px` (the page's section
    /// the timeline will fill).
    pub(crate) fn ask(self, id: &str, device: Option<u32>, container_px: i32) {
        let px = plot_px(canvas_width(container_px - CANVAS_BORDER_PX));
        let params = TimelineParams {
            device,
            px: Some(px),
            axis: Some(Axis::Event),
            max_allocations: Some(MAX_ALLOCATIONS as usize),
            ..TimelineParams::default()
        };
        let (send, answer) = oneshot::channel();
        let id = id.to_owned();
        leptos::task::spawn_local(async move {
            let _ = send.send(api::view::<Timeline>("loading the timeline", &id, &params).await);
        });
        self.0.set_value(Some(Asked { device, px, answer }));
    }

    /// The early answer, for the timeline's first request `query` of the
    /// page's timeline (`None` where the page asked nothing early or asked
    /// something else); taken once. The answer must still be checked for
    /// the device: the server may have picked another.
    pub(super) fn take(query: &TimelineQuery) -> Option<oneshot::Receiver<Result<TimelineWindow, ApiError>>> {
        let early = use_context::<EarlyWindow>()?;
        let asked = early.0.try_update_value(Option::take).flatten()?;
        let same = asked.device.is_none_or(|d| d == query.device)
            && asked.px == query.px
            && query.axis == Some(Axis::Event)
            && query.window.is_none()
            && query.y_span.is_none()
            && query.max_allocations == MAX_ALLOCATIONS;
        same.then_some(asked.answer)
    }
}
