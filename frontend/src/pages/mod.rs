//! The dashboard's pages, one per route, each built from the layers below
//! (explorer, components, infra, core): the library (`/`), one snapshot
//! (`/snapshots/{id}`) with its analysis panels and review thread, the
//! comparison of two (`/compare/{a}/{b}`), the jobs (`/jobs`,
//! `/jobs/{job}`), the live telemetry (`/live`, `/live/{source}`), and the
//! page of a report file. Pages keep their pure parts (what to draw, what
//! to say) natively testable; their components exist on wasm32 only.

// Natively only the pure parts are built, for their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

pub(crate) mod compare;
pub(crate) mod findings;
#[cfg(target_arch = "wasm32")]
pub(crate) mod host;
pub(crate) mod jobs;
pub(crate) mod library;
pub(crate) mod live;
#[cfg(target_arch = "wasm32")]
pub(crate) mod predict;
#[cfg(target_arch = "wasm32")]
pub(crate) mod report;
pub(crate) mod review;
#[cfg(target_arch = "wasm32")]
pub(crate) mod snapshot;
