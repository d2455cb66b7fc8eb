//! What the dashboard needs from the browser, below every component: the
//! one HTTP client (`api`, with the token), "latest request wins"
//! (`latest`), the transport to the Web Worker that answers for a file
//! opened without uploading it ([`local`]), 2D-canvas drawing (`canvas`),
//! redraws coalesced into animation frames (`redraw`), draw timings for
//! the benchmark (`draws`), timers and dates (`clock`), and the gate that
//! lets a page's first view go before its other requests (`first_view`).
//!
//! It imports only [`crate::core`]. Natively only the pure part of
//! [`local`] (the worker's side and the request parsing) is built, for its
//! tests; the rest needs a browser.

#[cfg(target_arch = "wasm32")]
pub(crate) mod api;
#[cfg(target_arch = "wasm32")]
pub(crate) mod canvas;
#[cfg(target_arch = "wasm32")]
pub(crate) mod clock;
#[cfg(target_arch = "wasm32")]
pub(crate) mod draws;
#[cfg(target_arch = "wasm32")]
pub(crate) mod first_view;
#[cfg(target_arch = "wasm32")]
pub(crate) mod latest;
pub(crate) mod local;
#[cfg(target_arch = "wasm32")]
pub(crate) mod redraw;
