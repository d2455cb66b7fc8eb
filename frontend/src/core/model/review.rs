//! The JSON of a snapshot's review thread (`/api/v1/snapshots/{id}/comments`),
//! declared once in `vramscope_shared::api`.

pub use vramscope_shared::api::review::Comment;
