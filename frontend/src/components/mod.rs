//! Reusable leptos components, shared by the explorer and the pages: the
//! notice bar and the stack views. They import only [`crate::core`] and
//! [`crate::infra`].

pub(crate) mod notice;
pub(crate) mod stack;
