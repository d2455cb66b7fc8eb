//! Reusable leptos components, shared by the explorer and the pages: the
//! notice bar, the figure card and the stack views. They import only [`crate::core`] and
//! [`crate::infra`].

#[cfg(target_arch = "wasm32")]
pub(crate) mod badge;
#[cfg(target_arch = "wasm32")]
pub(crate) mod card;
pub(crate) mod notice;
pub(crate) mod stack;
