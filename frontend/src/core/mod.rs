//! The pure layer: everything the dashboard computes without a browser,
//! built and unit-tested natively (`cargo test -p vramscope-frontend`).
//! Nothing here imports the other layers (`infra`, `components`,
//! `explorer`, `pages`); they all import from here.

// The timeline's drawing and what it shares with the rest (figures,
// colours, the visible window) are their own crate, `vramscope-plot`, which
// `vramscope report` draws with too; here under their usual paths.
pub use vramscope_plot::{format, layout, palette, plot, viewport};

pub mod axes;
pub mod blocks;
pub mod breakdown_chart;
pub mod brush;
pub mod chart;
pub mod dates;
pub mod fragmentation;
pub mod frames;
pub mod hidpi;
pub mod host_chart;
pub mod live_chart;
pub mod minimap_chart;
pub mod model;
pub mod paint;
pub mod panel;
pub mod permalink;
pub mod pools_chart;
pub mod predict;
pub mod predict_chart;
pub mod segments_chart;
pub mod state_chart;
pub mod track;
