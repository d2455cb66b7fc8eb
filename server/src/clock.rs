//! The wall clock, in one place: a leaf every layer may use (it names
//! nothing of the server), so reading the time adds no arrow between layers.

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
