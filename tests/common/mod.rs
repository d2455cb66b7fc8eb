//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod browser;
pub mod server;

#[path = "../../shared/tests/common/mod.rs"]
mod corpus;
pub use corpus::*;
