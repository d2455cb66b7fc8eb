//! A glob re-export in the parent and a glob import in the child hide
//! that `b` reaches `a`.

mod a;
mod b;

pub use a::*;
pub use b::*;
