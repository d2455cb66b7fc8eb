//! Macros: one by textual scope, one exported to the crate root.

macro_rules! shout {
    () => {};
}

#[macro_export]
macro_rules! exported {
    () => {};
}
