//! The analyses the dashboard shows beside the timeline, as views: a
//! what-if replay drawn over the recorded curves ([`whatif`]), the ranking
//! of allocator settings ([`tune`]), the OOM post-mortem ([`explain`]), the
//! leak ranking ([`leaks`]), memory by category ([`breakdown`]) and the
//! comparison of two snapshots ([`diff`]).
//!
//! Like the other views, each is a plain function of [`IndexedSnapshot`]
//! snapshots and a query struct read from the URL, answering plain data
//! whose size depends on the query (`px`, `top`), never on the trace. The
//! server wraps them (and caches the expensive replay, [`simulate_device`]);
//! the browser calls them directly for a file opened locally.

mod breakdown;
mod diff;
mod explain;
mod leaks;
mod tune;
mod whatif;

pub use breakdown::{BreakdownAnswer, BreakdownParams, DeviceBreakdownAnswer, breakdown};
pub use diff::{Align, AlignedBucket, AlignedTimeline, AlignedTimelines, DiffAnswer, DiffParams, diff};
pub use explain::{ExplainAnswer, ExplainParams, explain};
pub use leaks::{DeviceLeaksAnswer, LeaksAnswer, LeaksParams, leaks};
pub use tune::{TuneAnswer, TuneCandidate, TuneParams, tune};
pub use whatif::{
    SimulatedBucket, SimulatedDevice, SimulatedFigures, SimulatedOom, WhatIfAnswer, WhatIfParams, simulate_device,
    whatif, whatif_window,
};

use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::simulate::{AllocatorConfig, SimError, parse_size};
use crate::snapshot::DeviceSnapshot;

/// Most stacks a leak or comparison answer lists.
pub const MAX_TOP: usize = 200;

impl From<SimError> for ViewError {
    fn from(e: SimError) -> ViewError {
        // Every simulator error is about the request (bad settings) or about
        // what the file allows (no trace, a wrapped trace): the caller's to fix.
        ViewError::BadRequest(e.to_string())
    }
}

/// A `capacity` query value (`80GiB`, `500MB`, plain bytes) in bytes.
pub fn parse_capacity(text: Option<&str>) -> Result<Option<u64>, ViewError> {
    match text.map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => parse_size(t).map(Some).map_err(|e| ViewError::BadRequest(format!("capacity: {e}"))),
    }
}

/// Most bytes of an `alloc_conf` a replay takes.
pub const MAX_ALLOC_CONF_BYTES: usize = 512;
/// The capacities a replay takes: whole MiB from 64 MiB to 16 TiB (every
/// GPU's memory is one), so that a capacity is a setting a user can name
/// rather than any of 2^64 cache keys.
pub const REPLAY_CAPACITY_STEP: u64 = 1 << 20;
/// See [`REPLAY_CAPACITY_STEP`].
pub const REPLAY_CAPACITY_RANGE: std::ops::RangeInclusive<u64> = (64 << 20)..=(16 << 40);

/// The capacity of a replay asked for by a client of the server (the
/// HTTP API or an MCP tool), parsed and checked (see
/// [`REPLAY_CAPACITY_STEP`]).
pub fn replay_capacity(text: Option<&str>) -> Result<Option<u64>, ViewError> {
    let capacity = parse_capacity(text)?;
    if let Some(c) = capacity
        && (!c.is_multiple_of(REPLAY_CAPACITY_STEP) || !REPLAY_CAPACITY_RANGE.contains(&c))
    {
        return Err(ViewError::BadRequest(format!(
            "capacity: {c} bytes; a replay's capacity is a whole number of MiB from 64MiB to 16TiB (e.g. 80GiB, \
             143771MiB)"
        )));
    }
    Ok(capacity)
}

/// The allocator settings of a replay asked for by a client of the server,
/// checked, in one spelling: `expandable_segments:True` and
/// ` expandable_segments:True,` are the same setting (and cache key).
pub fn replay_alloc_conf(text: Option<&str>) -> Result<Option<String>, ViewError> {
    let Some(text) = text else { return Ok(None) };
    if text.len() > MAX_ALLOC_CONF_BYTES {
        return Err(ViewError::BadRequest(format!("alloc_conf: longer than {MAX_ALLOC_CONF_BYTES} bytes")));
    }
    check_alloc_conf(Some(text))?;
    let parts: Vec<&str> = text.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    Ok(Some(parts.join(",")))
}

/// The allocator settings a replay uses: `None` for the recorded ones.
/// Checked before any replay, so that a typo is answered at once.
pub fn check_alloc_conf(conf: Option<&str>) -> Result<(), ViewError> {
    match conf {
        Some(c) => AllocatorConfig::parse(c).map(|_| ()).map_err(|e| ViewError::BadRequest(e.to_string())),
        None => Ok(()),
    }
}

pub(super) fn device_snapshot(a: &IndexedSnapshot, device: u32) -> Result<&DeviceSnapshot, ViewError> {
    a.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::corpus as fixture;
    use crate::timeline::Axis;

    #[test]
    fn whatif_buckets_follow_the_timeline_and_end_at_the_simulated_peak() {
        let a = fixture("streams");
        let p = WhatIfParams { px: Some(64), axis: Some(Axis::Event), ..Default::default() };
        let w = whatif(&a, &p).expect("what-if");
        assert_eq!(w.simulated.len(), w.recorded.buckets.len());
        assert!(w.recorded.buckets.len() <= 64);
        let peak = w.simulated.iter().map(|b| b.reserved.max).max().expect("buckets");
        assert_eq!(peak, w.figures.peaks.reserved_peak_bytes, "the buckets see every row");
        assert!(w.simulated.iter().all(|b| b.replayed));
        assert_eq!(w.settings, "recorded");
        // The recorded settings replay the recorded reserved peak.
        assert_eq!(Some(w.figures.peaks.reserved_peak_bytes), w.recorded_reserved_peak_bytes);
        // The same on the time axis, zoomed into the middle.
        let full = whatif(&a, &WhatIfParams { px: Some(50), ..Default::default() }).expect("time axis");
        assert_eq!(full.recorded.axis, Axis::Time);
        let (s, e) = (full.recorded.start, full.recorded.end);
        let zoom = WhatIfParams {
            px: Some(50),
            start: Some(s + (e - s) / 4),
            end: Some(e - (e - s) / 4),
            ..Default::default()
        };
        let z = whatif(&a, &zoom).expect("zoomed");
        assert_eq!(z.simulated.len(), z.recorded.buckets.len());
    }

    #[test]
    fn bad_settings_and_capacities_are_refused_with_the_reason() {
        let a = fixture("streams");
        let bad = WhatIfParams { alloc_conf: Some("max_split_size_mb:8".into()), ..Default::default() };
        match whatif(&a, &bad) {
            Err(ViewError::BadRequest(m)) => assert!(m.contains("max_split_size_mb"), "{m}"),
            other => panic!("{other:?}"),
        }
        let bad = WhatIfParams { capacity: Some("80G".into()), ..Default::default() };
        assert!(matches!(whatif(&a, &bad), Err(ViewError::BadRequest(m)) if m.contains("capacity")));
        assert_eq!(parse_capacity(Some("1GiB")), Ok(Some(1 << 30)));
    }

    #[test]
    fn a_small_capacity_runs_out_where_the_answer_says() {
        let a = fixture("streams");
        let p = WhatIfParams {
            capacity: Some("4MiB".into()),
            axis: Some(Axis::Event),
            px: Some(100),
            ..Default::default()
        };
        let w = whatif(&a, &p).expect("what-if");
        let oom = w.oom.expect("4 MiB is too little");
        assert_eq!(oom.x, i64::from(oom.row));
        assert!(w.simulated.iter().any(|b| !b.replayed), "nothing after the failure");
        assert!(w.figures.peaks.reserved_peak_bytes <= 4 << 20);
    }

    #[test]
    fn oom_leak_is_explained_leaks_ranked_and_tuned() {
        let a = fixture("oom_leak");
        let e = explain(&a, &ExplainParams::default()).expect("explain");
        assert_eq!(e.ooms.len(), 1);
        let verdicts = e.ooms[0].avoided_by.as_ref().expect("simulated");
        assert!(verdicts.iter().any(|v| v.setting == "expandable_segments:True"));
        let l = leaks(&a, &LeaksParams { top: Some(5), ..Default::default() }).expect("leaks");
        let top = &l.devices[0].leaks.candidates[0];
        assert!(top.frames.iter().any(|f| f.filename == "/srv/jobs/train.py" && f.line == 96), "{top:?}");
        let t = tune(&a, &TuneParams::default()).expect("tune");
        assert!(t.rows.iter().any(|r| r.outcome.recorded));
        // Every setting runs out under the inferred cap: the later the
        // better (issue 44: roundup_power2_divisions:2 ranked first for a
        // peak cut short 14 rows before the recorded OOM).
        let key = |r: &TuneCandidate| r.outcome.oom.map(|o| std::cmp::Reverse(o.row));
        assert!(t.rows.windows(2).all(|w| key(&w[0]) <= key(&w[1])));
        let last = &t.rows.last().expect("rows").outcome;
        assert_eq!((last.alloc_conf.as_str(), last.oom.map(|o| o.row)), ("roundup_power2_divisions:2", Some(6663)));
    }

    #[test]
    fn the_local_mode_route_answers_what_the_functions_answer() {
        let a = fixture("oom_leak");
        let p = WhatIfParams {
            alloc_conf: Some("expandable_segments:True".into()),
            px: Some(40),
            axis: Some(Axis::Event),
            ..Default::default()
        };
        let direct = serde_json::to_string(&whatif(&a, &p).expect("what-if")).expect("json");
        let routed = super::super::route::answer(&a, "whatif", "alloc_conf=expandable_segments:True&px=40&axis=event");
        assert_eq!(routed.expect("routed"), direct);
        let leaks = super::super::route::answer(&a, "leaks", "top=3").expect("leaks");
        let back: LeaksAnswer = serde_json::from_str(&leaks).expect("answers deserialize");
        assert_eq!(back.devices[0].leaks.candidates.len(), 3);
        assert!(super::super::route::answer(&a, "explain", "simulate=false").is_ok());
        assert!(super::super::route::answer(&a, "tune", "capacity=1GiB").is_ok());
    }

    #[test]
    fn diff_aligns_two_timelines_on_one_scale() {
        let (a, b) = (fixture("streams"), fixture("oom_leak"));
        for align in [Align::Event, Align::Step] {
            let p = DiffParams { align: Some(align), px: Some(200), ..Default::default() };
            let d = diff(&a, &b, &p).expect("diff");
            let t = d.timelines.expect("both have traces");
            for side in [&t.a, &t.b] {
                assert!(!side.buckets.is_empty());
                assert!(
                    side.buckets.iter().all(|k| k.x0 >= 0.0 && k.x1 <= t.x_end + 1e-9 && k.reserved.max <= t.y_max)
                );
                assert!(side.buckets.len() <= 2 * 200, "{align:?}: {}", side.buckets.len());
            }
            assert!(!d.identical);
        }
        let same = diff(&a, &a, &DiffParams::default()).expect("diff");
        assert!(same.identical);
    }
}
