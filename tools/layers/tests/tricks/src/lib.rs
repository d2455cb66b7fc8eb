//! A crate that reaches other modules in every way a reader of paths could
//! miss; `tests/tricks.rs` checks that the graph finds each. It is parsed,
//! never compiled.

extern crate self as me;

#[macro_use]
mod macros;
mod high;
mod low;
mod views;

/// An item of the crate root itself.
pub fn root_helper() {}
