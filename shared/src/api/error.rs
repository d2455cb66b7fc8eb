//! The body of every error answer of the HTTP API.

use serde::{Deserialize, Serialize};

/// `{"error": "<what went wrong>", "kind": "<stable name>"}`: the message
/// is for people and may change; the kind is a contract for programs
/// (`not_found`, `payload_too_large`, `truncated`, `memory_budget`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// A stable name for programs.
    #[serde(default)]
    pub kind: String,
}
