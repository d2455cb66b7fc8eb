//! The JSON of vramscope's two wire protocols, declared once: the server
//! serialises these types, the dashboard and the agent deserialise them
//! (and the other way round for what clients send).
//!
//! - The HTTP API under `/api/v1`: [`snapshots`] (the library, uploads and
//!   signed links), [`review`] (comments), [`jobs`] (a job's ranks side by
//!   side), [`live`] (telemetry read back), [`predict`] (will it fit) and [`error`] (every refusal's
//!   body). The analyses' answers are the view types of
//!   [`crate::views`] and [`crate::timeline`], shared the same way.
//! - Where each endpoint is, and how its query is written: [`paths`].
//! - The capture path: [`agent`] (job ⇄ agent ⇄ server).
//!
//! Fields are only ever added; a reader ignores what it does not know, and
//! an `Option` missing from the JSON reads as `None`.

pub mod agent;
pub mod error;
pub mod jobs;
pub mod live;
pub mod paths;
pub mod predict;
pub mod review;
pub mod snapshots;

pub use error::ErrorBody;
pub use snapshots::{Page, SnapshotMeta, SnapshotStatus, Trigger, UploadAnswer};
