//! The pure layer: everything the dashboard computes without a browser,
//! built and unit-tested natively (`cargo test -p vramscope-frontend`).
//! Nothing here imports the other layers (`infra`, `components`,
//! `explorer`, `pages`); they all import from here.

pub mod blocks;
pub mod brush;
pub mod chart;
pub mod format;
pub mod fragmentation;
pub mod frames;
pub mod hidpi;
pub mod layout;
pub mod model;
pub mod palette;
pub mod permalink;
pub mod plot;
pub mod predict;
pub mod predict_chart;
#[cfg(test)]
pub(crate) mod recorder;
pub mod track;
pub mod url;
pub mod viewport;
