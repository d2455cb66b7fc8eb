//! The analysis routes of the API. Every call goes through the dashboard's
//! one GET-JSON helper ([`crate::api::get`]), so a file opened locally is
//! answered by its worker with the same functions as the server.

use vramscope_shared::views::analysis::{DiffAnswer, ExplainAnswer, LeaksAnswer, TuneAnswer, WhatIfAnswer};

use crate::api::{ApiError, encode, get};
use crate::core::url::query;

fn url(id: &str, view: &str, pairs: &[(&str, Option<String>)]) -> String {
    format!("/api/v1/snapshots/{}/{view}?{}", encode(id), query(pairs))
}

/// A what-if replay: `alloc_conf` (`None`: the recorded settings) under
/// `capacity` (`None`: unlimited), `px` buckets on the event axis.
pub(crate) async fn whatif(
    id: &str,
    device: u32,
    alloc_conf: Option<String>,
    capacity: Option<String>,
    px: u32,
) -> Result<WhatIfAnswer, ApiError> {
    let pairs = [
        ("device", Some(device.to_string())),
        ("alloc_conf", alloc_conf),
        ("capacity", capacity),
        ("axis", Some("event".to_owned())),
        ("px", Some(px.max(1).to_string())),
    ];
    get("replaying the trace", &url(id, "whatif", &pairs)).await
}

/// Every candidate setting replayed and ranked.
pub(crate) async fn tune(id: &str, capacity: Option<String>) -> Result<TuneAnswer, ApiError> {
    get("ranking allocator settings", &url(id, "tune", &[("capacity", capacity)])).await
}

/// The OOM post-mortems of a device.
pub(crate) async fn explain(id: &str, device: u32) -> Result<ExplainAnswer, ApiError> {
    get("explaining the OOMs", &url(id, "explain", &[("device", Some(device.to_string()))])).await
}

/// The leak ranking of a device.
pub(crate) async fn leaks(id: &str, device: u32, top: u32) -> Result<LeaksAnswer, ApiError> {
    let pairs = [("device", Some(device.to_string())), ("top", Some(top.to_string()))];
    get("ranking the leaks", &url(id, "leaks", &pairs)).await
}

/// The comparison of snapshot `a` with `b`, timelines at `px` buckets.
pub(crate) async fn compare(a: &str, b: &str, align: &str, px: u32) -> Result<DiffAnswer, ApiError> {
    let pairs = [
        ("a", Some(a.to_owned())),
        ("b", Some(b.to_owned())),
        ("align", Some(align.to_owned())),
        ("px", Some(px.max(1).to_string())),
    ];
    get("comparing the snapshots", &format!("/api/v1/compare?{}", query(&pairs))).await
}
