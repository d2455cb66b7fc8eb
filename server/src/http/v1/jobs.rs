//! Jobs: the snapshots of one training job grouped by rank and host, side
//! by side. `GET /api/v1/jobs` lists jobs; `GET /api/v1/jobs/{job}` shows
//! each rank's latest snapshot with its figures and flags the rank whose
//! memory diverges from the others (see [`divergences`]).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use vramscope_shared::StatsReport;

use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::{JobSummary, SnapshotRecord, SnapshotStatus};
use vramscope_shared::api::jobs::{JobReport, Member};

/// A rank diverges when its peak is more than this share above the median
/// of the other ranks' peaks…
pub(crate) const DIVERGENCE_RATIO: f64 = 0.25;
/// …and more than this many bytes above it (small jobs vary by a few MiB
/// of workspace without anything being wrong).
pub(crate) const DIVERGENCE_MIN_BYTES: u64 = 256 << 20;

/// One rank that diverges: how far above the others it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Divergence {
    /// The median of the other ranks' peaks.
    pub(crate) median_of_others: u64,
    /// The rank's peak minus that median.
    pub(crate) excess_bytes: u64,
}

/// The median of `values`; for an even count, the upper of the two middle
/// values (see [`divergences`] for why). `None` when empty.
fn upper_median(values: &mut [u64]) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// Which ranks diverge, given each rank's peak (`None`: no figures yet).
///
/// The rule: a rank diverges when its peak is more than
/// [`DIVERGENCE_RATIO`] (25 %) **and** more than [`DIVERGENCE_MIN_BYTES`]
/// (256 MiB) above the median of the *other* ranks' peaks. Data-parallel
/// ranks run the same program on same-sized batches, so their peaks agree
/// to within a few percent; a rank far above the rest holds something the
/// others do not (a leak, a rank-0-only buffer, an uneven shard). The
/// median of the others, not of all, so that the diverging rank does not
/// pull the reference towards itself; for an even number of others, the
/// upper middle value, so that with few ranks one rank far *below* (say
/// 10, 10 and 1 GiB) does not drag the reference down and make the normal
/// ranks look high. Both thresholds, so that neither a
/// large relative gap on a tiny job nor a large absolute gap on a huge one
/// is flagged alone. Only ranks above are flagged: a rank below the rest is
/// rarely what ran out of memory. At least two ranks with figures are
/// needed to compare.
pub(crate) fn divergences(peaks: &[Option<u64>]) -> Vec<Option<Divergence>> {
    let known: Vec<(usize, u64)> = peaks.iter().enumerate().filter_map(|(i, p)| p.map(|p| (i, p))).collect();
    let mut out = vec![None; peaks.len()];
    if known.len() < 2 {
        return out;
    }
    for &(i, peak) in &known {
        let mut others: Vec<u64> = known.iter().filter(|(j, _)| *j != i).map(|(_, p)| *p).collect();
        let Some(reference) = upper_median(&mut others) else { continue };
        let excess = peak.saturating_sub(reference);
        if excess > DIVERGENCE_MIN_BYTES && excess as f64 > reference as f64 * DIVERGENCE_RATIO {
            out[i] = Some(Divergence { median_of_others: reference, excess_bytes: excess });
        }
    }
    out
}

/// Figures of one snapshot, summed over its devices (a rank normally
/// drives one).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Figures {
    peak_requested: u64,
    peak_reserved: u64,
    reserved: u64,
    inactive_split: u64,
    ooms: u64,
}

fn figures(report: &StatsReport) -> Figures {
    let mut f = Figures::default();
    for d in &report.devices {
        // Without a trace there are no peaks: the state at snapshot time is
        // the best lower bound.
        f.peak_requested += d.requested_peak_bytes.unwrap_or(d.requested_bytes);
        f.peak_reserved += d.reserved_peak_bytes.unwrap_or(d.reserved_bytes);
        f.reserved += d.reserved_bytes;
        f.inactive_split += d.inactive_split_bytes;
        f.ooms += d.ooms as u64;
    }
    f
}

/// The job's report from its snapshots (any order).
pub(crate) fn report(job: &str, snapshots: &[SnapshotRecord]) -> JobReport {
    // Newest first; within a rank/host the first parsed one is shown.
    let mut sorted: Vec<&SnapshotRecord> = snapshots.iter().collect();
    sorted.sort_by(|a, b| (b.uploaded_at_ms, &b.id).cmp(&(a.uploaded_at_ms, &a.id)));
    let mut groups: BTreeMap<(Option<i64>, Option<String>), Vec<&SnapshotRecord>> = BTreeMap::new();
    for s in sorted {
        groups.entry((s.rank, s.host.clone())).or_default().push(s);
    }
    let mut members: Vec<Member> = Vec::new();
    for ((rank, host), group) in groups {
        let parsed = group.iter().find(|s| s.status == SnapshotStatus::Ready && s.stats_json.is_some());
        let Some(&shown) = parsed.or(group.first()) else { continue };
        let figures = shown
            .stats_json
            .as_deref()
            .and_then(|json| serde_json::from_str::<StatsReport>(json).ok())
            .map(|r| figures(&r));
        members.push(Member {
            rank,
            host,
            snapshots: group.len() as u64,
            snapshot_id: shown.id.clone(),
            name: shown.name.clone(),
            uploaded_at_ms: shown.uploaded_at_ms,
            status: shown.status,
            trigger: shown.trigger,
            peak_requested_bytes: figures.map(|f| f.peak_requested),
            peak_reserved_bytes: figures.map(|f| f.peak_reserved),
            reserved_bytes: figures.map(|f| f.reserved),
            fragmentation: figures.and_then(|f| (f.reserved > 0).then(|| f.inactive_split as f64 / f.reserved as f64)),
            ooms: figures.map(|f| f.ooms),
            diverges: false,
            excess_bytes: None,
            compare_with: None,
        });
    }
    let peaks: Vec<Option<u64>> = members.iter().map(|m| m.peak_requested_bytes).collect();
    let flags = divergences(&peaks);
    for (i, flag) in flags.iter().enumerate() {
        let Some(d) = flag else { continue };
        // The non-diverging member whose peak is nearest the others' median.
        let reference = members
            .iter()
            .enumerate()
            .filter(|(j, m)| *j != i && flags[*j].is_none() && m.peak_requested_bytes.is_some())
            .min_by_key(|(_, m)| m.peak_requested_bytes.unwrap_or(0).abs_diff(d.median_of_others))
            .map(|(_, m)| m.snapshot_id.clone());
        let member = &mut members[i];
        member.diverges = true;
        member.excess_bytes = Some(d.excess_bytes);
        member.compare_with = reference;
    }
    let mut known: Vec<u64> = peaks.into_iter().flatten().collect();
    JobReport {
        job: job.to_owned(),
        snapshots: snapshots.len() as u64,
        members,
        median_peak_requested_bytes: upper_median(&mut known),
        rule: format!(
            "a rank diverges when its peak requested bytes are more than {:.0}% and more than {} MiB above the \
             median of the other ranks' peaks",
            DIVERGENCE_RATIO * 100.0,
            DIVERGENCE_MIN_BYTES >> 20
        ),
    }
}

/// Jobs listed by default: the agent names each run a job of its own
/// (script and start time), so a server's job count grows with every run.
pub(crate) const DEFAULT_JOBS: u64 = 500;
/// Most jobs one listing answers (`?limit=`).
pub(crate) const MAX_JOBS: u64 = 5000;

/// `?limit=` of `GET /api/v1/jobs`.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct JobsQuery {
    limit: Option<u64>,
}

/// `GET /api/v1/jobs[?limit=N]`: the most recently uploaded to first, at
/// most [`DEFAULT_JOBS`] (or `limit`, clamped to [`MAX_JOBS`]).
pub(crate) async fn list(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<JobsQuery>,
) -> AppResult<Json<Vec<JobSummary>>> {
    let limit = q.limit.unwrap_or(DEFAULT_JOBS).clamp(1, MAX_JOBS);
    Ok(Json(state.db.list_jobs(limit).await?))
}

/// `GET /api/v1/jobs/{job}`.
pub(crate) async fn get_one(State(state): State<AppState>, Path(job): Path<String>) -> AppResult<Json<JobReport>> {
    let snapshots = state.db.job_snapshots(&job).await?;
    if snapshots.is_empty() {
        return Err(AppError::NotFound(format!("job {job}")));
    }
    Ok(Json(report(&job, &snapshots)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn flagged(peaks: &[Option<u64>]) -> Vec<usize> {
        divergences(peaks).iter().enumerate().filter_map(|(i, d)| d.map(|_| i)).collect()
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(upper_median(&mut []), None);
        assert_eq!(upper_median(&mut [7]), Some(7));
        assert_eq!(upper_median(&mut [9, 1, 5]), Some(5));
        assert_eq!(upper_median(&mut [4, 1, 3, 2]), Some(3));
        assert_eq!(upper_median(&mut [1, 2]), Some(2));
    }

    #[test]
    fn a_leaking_rank_is_flagged_and_only_it() {
        let peaks = [Some(10 * GIB), Some(10 * GIB + 50 * MIB), Some(14 * GIB), Some(10 * GIB - 20 * MIB)];
        let d = divergences(&peaks);
        assert_eq!(flagged(&peaks), [2]);
        let leak = d[2].expect("flagged");
        assert_eq!(leak.median_of_others, 10 * GIB);
        assert_eq!(leak.excess_bytes, 4 * GIB);
    }

    #[test]
    fn both_thresholds_must_be_crossed() {
        // 100% above but only 200 MiB: a small job's noise.
        assert!(flagged(&[Some(200 * MIB), Some(200 * MIB), Some(400 * MIB)]).is_empty());
        // 1 GiB above but only 1.25% of 80 GiB.
        assert!(flagged(&[Some(80 * GIB), Some(80 * GIB), Some(81 * GIB)]).is_empty());
        // Just over both.
        assert_eq!(flagged(&[Some(GIB), Some(GIB), Some(GIB + 257 * MIB)]), [2]);
        // Exactly 25% above (256 MiB over 1 GiB) is not "more than".
        assert!(flagged(&[Some(GIB), Some(GIB), Some(GIB + 256 * MIB)]).is_empty());
    }

    #[test]
    fn two_ranks_compare_with_each_other_and_one_is_not_enough() {
        assert_eq!(flagged(&[Some(GIB), Some(3 * GIB)]), [1]);
        assert!(flagged(&[Some(3 * GIB)]).is_empty());
        assert!(flagged(&[Some(3 * GIB), None, None]).is_empty(), "ranks without figures do not count");
        assert_eq!(flagged(&[None, Some(GIB), Some(3 * GIB)]), [2]);
    }

    #[test]
    fn ranks_below_the_others_are_not_flagged() {
        assert!(flagged(&[Some(10 * GIB), Some(10 * GIB), Some(GIB)]).is_empty());
    }

    #[test]
    fn the_majority_defines_normal() {
        // One rank far above four: flagged.
        assert_eq!(flagged(&[Some(10 * GIB), Some(10 * GIB), Some(10 * GIB), Some(10 * GIB), Some(30 * GIB)]), [4]);
        // Four ranks above one: the others of each high rank have a median
        // among the high ones, so none is flagged (nor is the low one).
        assert!(flagged(&[Some(10 * GIB), Some(30 * GIB), Some(30 * GIB), Some(30 * GIB), Some(30 * GIB)]).is_empty());
    }
}
