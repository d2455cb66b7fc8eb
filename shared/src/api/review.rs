//! A snapshot's review thread (`/api/v1/snapshots/{id}/comments`), and who
//! is asking (`/api/v1/token`).

use serde::{Deserialize, Serialize};

/// One comment, as the thread lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// Public id (a UUID v7).
    pub id: String,
    /// The name of the API token that wrote it (`local` without tokens).
    pub author: String,
    /// The text.
    pub body: String,
    /// When it was written, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// The trace row (event index) of the moment it is about, if any.
    pub row: Option<u32>,
    /// The time of the moment it is about (µs, the trace's clock), if any.
    pub time_us: Option<i64>,
    /// The device address of the allocation it is about, if any.
    pub addr: Option<u64>,
}

/// The body of `POST /api/v1/snapshots/{id}/comments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostComment {
    /// The text: not empty once trimmed, and bounded by the server.
    pub body: String,
    /// The trace row of the moment it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<u32>,
    /// The time of that moment (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_us: Option<i64>,
    /// The device address of the allocation it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
}

/// `GET /api/v1/token`: the holder of the request's token and its role,
/// so that a client (`vramscope mcp --allow-write`) offers only what the
/// server will let it do. Without tokens: `local`, an admin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenHolder {
    /// The token's name (the author shown on its comments).
    pub name: String,
    /// `viewer`, `uploader` or `admin`.
    pub role: String,
}
