//! The JSON of a snapshot's review thread (`/api/v1/snapshots/{id}/comments`).

use serde::Deserialize;

/// One comment, as `GET /api/v1/snapshots/{id}/comments` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Comment {
    /// Public id.
    pub id: String,
    /// The name of the token that wrote it.
    pub author: String,
    /// The text.
    pub body: String,
    /// When, ms since the Unix epoch.
    pub created_ms: i64,
    /// Trace row of the moment it is about.
    #[serde(default)]
    pub row: Option<u32>,
    /// Time of that moment (µs), when the writer gave one.
    #[serde(default)]
    pub time_us: Option<i64>,
    /// Address of the allocation it is about.
    #[serde(default)]
    pub addr: Option<u64>,
}
