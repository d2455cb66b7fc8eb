//! Each file reaches `high`, the crate root or `macros` by one trick.

mod by_extern_self;
mod by_macro;
mod by_root_item;
mod by_self_alias;
