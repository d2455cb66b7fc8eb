//! The module the tricks reach.

pub fn g() {}
