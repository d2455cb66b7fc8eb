//! The integration tests as one binary, suites as modules (the ripgrep
//! way: one link of the server for all of them). Each suite drives the
//! real `vramscope` binary (`CARGO_BIN_EXE_vramscope`): its CLI, its server
//! on a loopback port, its agent; the `browser*` suites drive the embedded
//! dashboard in headless Chromium. `cargo test --test main SUITE::` runs
//! one suite.

mod common;

mod agent;
mod analysis;
mod analysis_api;
mod browser;
mod browser_analysis;
mod browser_live;
mod browser_local;
mod browser_newcomer;
mod browser_predict;
mod browser_review;
mod browser_views;
mod build_scripts;
mod check;
mod cli;
mod docs;
mod hostile;
mod ingest;
mod mcp;
mod predict;
mod report;
mod server;
mod simulate;
mod team;
