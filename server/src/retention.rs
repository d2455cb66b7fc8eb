//! The retention policy: which stored snapshots to delete so that storage
//! stays within a team's limits (`retention_days`, `retention_max_bytes`).
//!
//! Rules, in order:
//! 1. A pinned snapshot, or one with comments, is never deleted: someone
//!    marked it as worth keeping. It still counts towards the byte budget.
//! 2. Older than `retention_days`: deleted.
//! 3. While the stored files still total more than `retention_max_bytes`:
//!    the oldest files go first. Bytes are counted per file, not per row:
//!    identical uploads share one content-addressed file, which is freed only
//!    with its last row; so this step deletes a file's rows together (ordered
//!    by the newest of them), and never a row whose file a kept snapshot
//!    still needs, which would lose data and free nothing.
//!
//! [`plan`] is pure (tested below); [`apply`] carries a plan out with the
//! same steps as `DELETE /api/v1/snapshots/{id}`, but through
//! [`Db::delete_unprotected`], so a pin or comment that lands in between,
//! from any instance, still saves the snapshot. Both `vramscope serve`
//! (periodically) and `vramscope retention` (once, or `--dry-run`) use them.

use std::collections::HashMap;

use anyhow::Result;
use serde::Serialize;
use vramscope_plot::format::bytes_text;

use crate::store::{BlobStore, Db, RetentionItem};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// Limits a team sets; `None` leaves that limit off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Policy {
    /// Delete what was uploaded more than this many days ago.
    pub(crate) keep_days: Option<u64>,
    /// Delete the oldest files while all files together are larger.
    pub(crate) max_bytes: Option<u64>,
}

impl Policy {
    /// Whether any limit is set.
    pub(crate) fn is_active(&self) -> bool {
        self.keep_days.is_some() || self.max_bytes.is_some()
    }
}

/// A snapshot the policy deletes, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Doomed {
    /// Snapshot id.
    pub(crate) id: String,
    /// Display name.
    pub(crate) name: String,
    /// Size of its file.
    pub(crate) size_bytes: u64,
    /// Bytes its deletion frees: its file's size if it is the file's last
    /// row, else 0.
    pub(crate) freed_bytes: u64,
    /// Upload time, milliseconds since the Unix epoch.
    pub(crate) uploaded_at_ms: i64,
    /// Why, in a sentence.
    pub(crate) reason: String,
}

/// A snapshot the limits would have deleted but a pin or a comment keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Spared {
    /// Snapshot id.
    pub(crate) id: String,
    /// Display name.
    pub(crate) name: String,
    /// `pinned`, or `N comments`.
    pub(crate) reason: String,
}

/// What the policy decides for the stored snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Plan {
    /// To delete, in order.
    pub(crate) delete: Vec<Doomed>,
    /// Kept only because they are pinned or commented.
    pub(crate) spared: Vec<Spared>,
    /// Bytes of all distinct files now.
    pub(crate) stored_bytes_before: u64,
    /// Bytes of all distinct files after the deletions.
    pub(crate) stored_bytes_after: u64,
    /// True when even after the deletions the files exceed the byte budget
    /// (what is left is protected, or shared with protected snapshots).
    pub(crate) still_over_budget: bool,
}

fn protection(item: &RetentionItem) -> Option<String> {
    if item.pinned {
        Some("pinned".to_owned())
    } else if item.comments > 0 {
        Some(format!("{} comment{}", item.comments, if item.comments == 1 { "" } else { "s" }))
    } else {
        None
    }
}

/// Decides what `policy` deletes among `items` at time `now_ms`. `items`
/// may come in any order; deletions are listed oldest first within each rule.
pub(crate) fn plan(policy: &Policy, items: &[RetentionItem], now_ms: i64) -> Plan {
    let mut order: Vec<&RetentionItem> = items.iter().collect();
    order.sort_by(|a, b| (a.uploaded_at_ms, &a.id).cmp(&(b.uploaded_at_ms, &b.id)));

    // Rows per file, and each file's size (rows of one file have one size).
    let mut rows_of: HashMap<&str, u64> = HashMap::new();
    let mut size_of: HashMap<&str, u64> = HashMap::new();
    for item in &order {
        *rows_of.entry(item.blob_key.as_str()).or_default() += 1;
        size_of.insert(item.blob_key.as_str(), item.size_bytes);
    }
    let stored_bytes_before: u64 = size_of.values().sum();
    let mut stored = stored_bytes_before;
    let mut out = Plan { stored_bytes_before, ..Plan::default() };
    let mut deleted: Vec<bool> = vec![false; order.len()];
    let mut spared: Vec<bool> = vec![false; order.len()];

    let mut delete = |i: usize, reason: String, out: &mut Plan, stored: &mut u64, deleted: &mut [bool]| {
        let item = order[i];
        deleted[i] = true;
        let rows = rows_of.entry(item.blob_key.as_str()).or_default();
        *rows = rows.saturating_sub(1);
        let freed = if *rows == 0 { size_of.get(item.blob_key.as_str()).copied().unwrap_or(0) } else { 0 };
        *stored = stored.saturating_sub(freed);
        out.delete.push(Doomed {
            id: item.id.clone(),
            name: item.name.clone(),
            size_bytes: item.size_bytes,
            freed_bytes: freed,
            uploaded_at_ms: item.uploaded_at_ms,
            reason,
        });
    };

    if let Some(days) = policy.keep_days {
        let cutoff = now_ms.saturating_sub(i64::try_from(days).unwrap_or(i64::MAX).saturating_mul(DAY_MS));
        for (i, item) in order.iter().enumerate() {
            if item.uploaded_at_ms >= cutoff {
                continue;
            }
            let age_days = (now_ms - item.uploaded_at_ms) / DAY_MS;
            match protection(item) {
                Some(why) => {
                    spared[i] = true;
                    out.spared.push(Spared { id: item.id.clone(), name: item.name.clone(), reason: why });
                }
                None => delete(
                    i,
                    format!("uploaded {age_days} days ago, older than retention_days = {days}"),
                    &mut out,
                    &mut stored,
                    &mut deleted,
                ),
            }
        }
    }

    if let Some(budget) = policy.max_bytes {
        // Files whose remaining rows are all unprotected, ordered by the
        // newest of those rows: deleting them all frees the file.
        let mut files: Vec<(i64, &str)> = Vec::new();
        let mut blocked: HashMap<&str, bool> = HashMap::new();
        let mut newest: HashMap<&str, i64> = HashMap::new();
        for (i, item) in order.iter().enumerate() {
            if deleted[i] {
                continue;
            }
            let key = item.blob_key.as_str();
            if protection(item).is_some() {
                blocked.insert(key, true);
            }
            let at = newest.entry(key).or_insert(item.uploaded_at_ms);
            *at = (*at).max(item.uploaded_at_ms);
        }
        for (key, at) in &newest {
            if !blocked.get(key).copied().unwrap_or(false) {
                files.push((*at, key));
            }
        }
        files.sort();
        for (_, key) in files {
            if stored <= budget {
                break;
            }
            let before = stored;
            for i in 0..order.len() {
                if !deleted[i] && order[i].blob_key == key {
                    // Sizes as the commands print them: `1.50 GiB`.
                    let (total, limit) = (bytes_text(before), bytes_text(budget));
                    let reason = format!(
                        "stored files total {total}, over retention_max_bytes = {limit}: oldest files go first"
                    );
                    delete(i, reason, &mut out, &mut stored, &mut deleted);
                }
            }
        }
        if stored > budget {
            out.still_over_budget = true;
            for (i, item) in order.iter().enumerate() {
                if !deleted[i]
                    && !spared[i]
                    && let Some(why) = protection(item)
                {
                    out.spared.push(Spared { id: item.id.clone(), name: item.name.clone(), reason: why });
                }
            }
        }
    }
    out.stored_bytes_after = stored;
    out
}

/// What [`apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Applied {
    /// Snapshots deleted.
    pub(crate) deleted: Vec<String>,
    /// Snapshots the plan named but that were gone (another instance
    /// deleted them) or became pinned or commented meanwhile.
    pub(crate) skipped: Vec<String>,
    /// The files of the deleted snapshots (to drop from the analysis cache).
    #[serde(skip)]
    pub(crate) files: Vec<String>,
}

/// Deletes what `plan` names: the row (only if still unprotected), then
/// the file once no row uses it, under the file's lock (an upload of the
/// same content on another instance may be committing it again).
pub(crate) async fn apply(db: &Db, blobs: &BlobStore, plan: &Plan) -> Result<Applied> {
    let mut applied = Applied::default();
    for doomed in &plan.delete {
        match db.delete_unprotected(&doomed.id).await? {
            Some(rec) => {
                crate::store::delete_blob_if_unused(db, blobs, &rec.blob_key).await?;
                applied.deleted.push(rec.meta.id);
                applied.files.push(rec.blob_key);
            }
            None => applied.skipped.push(doomed.id.clone()),
        }
    }
    Ok(applied)
}

/// Reads the inventory, plans and (unless `dry_run`) applies.
pub(crate) async fn run_once(
    db: &Db,
    blobs: &BlobStore,
    policy: &Policy,
    dry_run: bool,
) -> Result<(Plan, Option<Applied>)> {
    let items = db.retention_inventory().await?;
    let plan = plan(policy, &items, crate::clock::now_ms());
    if dry_run {
        return Ok((plan, None));
    }
    let applied = apply(db, blobs, &plan).await?;
    Ok((plan, Some(applied)))
}

/// Runs the policy every `retention_interval_secs` while `serve` runs
/// (first at start-up), when the settings set a limit. Every instance of a
/// team may run it: [`apply`]'s conditional deletes make a second run of the
/// same plan a no-op.
pub(crate) fn spawn_periodic(ingest: crate::ingest::Ingest, settings: &crate::settings::Settings) {
    let policy = Policy { keep_days: settings.retention_days, max_bytes: settings.retention_max_bytes };
    if !policy.is_active() {
        return;
    }
    let every = std::time::Duration::from_secs(settings.retention_interval_secs.max(1));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match run_once(&ingest.db, &ingest.blobs, &policy, false).await {
                Ok((plan, Some(applied))) => {
                    for key in &applied.files {
                        ingest.cache.remove(key);
                        ingest.indexes.forget(key).await;
                    }
                    if !applied.deleted.is_empty() {
                        tracing::info!(
                            deleted = applied.deleted.len(),
                            stored_bytes = plan.stored_bytes_after,
                            "retention deleted snapshots"
                        );
                    }
                }
                Ok((_, None)) => {}
                Err(e) => tracing::warn!(error = format!("{e:#}"), "retention run failed; trying again later"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 100 * DAY_MS;

    fn item(id: &str, days_ago: i64, size: u64) -> RetentionItem {
        RetentionItem {
            id: id.to_owned(),
            name: format!("{id}.pickle"),
            blob_key: format!("snapshots/{id}"),
            size_bytes: size,
            uploaded_at_ms: NOW - days_ago * DAY_MS,
            pinned: false,
            comments: 0,
        }
    }

    fn ids(plan: &Plan) -> Vec<&str> {
        plan.delete.iter().map(|d| d.id.as_str()).collect()
    }

    #[test]
    fn no_limits_delete_nothing() {
        let items = [item("a", 400, 10), item("b", 1, 10)];
        let plan = plan(&Policy::default(), &items, NOW);
        assert!(plan.delete.is_empty());
        assert_eq!((plan.stored_bytes_before, plan.stored_bytes_after), (20, 20));
        assert!(!Policy::default().is_active());
    }

    #[test]
    fn age_limit_deletes_the_old_and_spares_pinned_and_commented() {
        let mut pinned = item("pinned", 30, 10);
        pinned.pinned = true;
        let mut discussed = item("discussed", 20, 10);
        discussed.comments = 2;
        let items = [item("new", 1, 10), item("old", 10, 10), pinned, discussed, item("edge", 7, 10)];
        let plan = plan(&Policy { keep_days: Some(7), max_bytes: None }, &items, NOW);
        // Exactly 7 days old is not older than 7 days.
        assert_eq!(ids(&plan), ["old"]);
        assert_eq!(plan.delete[0].reason, "uploaded 10 days ago, older than retention_days = 7");
        assert_eq!(plan.delete[0].freed_bytes, 10);
        let spared: Vec<(&str, &str)> = plan.spared.iter().map(|s| (s.id.as_str(), s.reason.as_str())).collect();
        assert_eq!(spared, [("pinned", "pinned"), ("discussed", "2 comments")]);
        assert_eq!(plan.stored_bytes_after, 40);
    }

    #[test]
    fn byte_budget_deletes_oldest_first_until_under() {
        let items = [item("c", 3, 30), item("a", 5, 50), item("b", 4, 40), item("d", 1, 10)];
        let plan = plan(&Policy { keep_days: None, max_bytes: Some(60) }, &items, NOW);
        assert_eq!(ids(&plan), ["a", "b"], "130 → 80 → 40 ≤ 60");
        assert_eq!(plan.stored_bytes_after, 40);
        assert!(!plan.still_over_budget);
        assert!(
            plan.delete[0].reason.starts_with("stored files total 130 B, over retention_max_bytes = 60 B"),
            "{}",
            plan.delete[0].reason
        );
    }

    #[test]
    fn byte_budget_deletes_a_shared_file_with_all_its_rows_or_not_at_all() {
        // `x1` and `x2` are one upload twice (one file); `y` is another file
        // shared with a pinned row.
        let mut x1 = item("x1", 9, 100);
        let mut x2 = item("x2", 2, 100);
        x1.blob_key = "snapshots/x".into();
        x2.blob_key = "snapshots/x".into();
        let mut y = item("y", 8, 50);
        let mut y_pinned = item("y-pinned", 1, 50);
        y.blob_key = "snapshots/y".into();
        y_pinned.blob_key = "snapshots/y".into();
        y_pinned.pinned = true;
        let items = [x1, x2, y, y_pinned, item("z", 3, 20)];
        assert_eq!(plan(&Policy::default(), &items, NOW).stored_bytes_before, 170, "files are counted once");

        let plan = plan(&Policy { keep_days: None, max_bytes: Some(60) }, &items, NOW);
        // `y` is oldest-but-one, but deleting it frees nothing: its file stays
        // for the pinned row. The file of x (newest row 2 days old) goes after
        // z's (3 days old).
        assert_eq!(ids(&plan), ["z", "x1", "x2"]);
        assert_eq!(plan.delete.iter().map(|d| d.freed_bytes).collect::<Vec<_>>(), [20, 0, 100]);
        assert_eq!(plan.stored_bytes_after, 50);
    }

    #[test]
    fn protected_files_can_leave_storage_over_budget() {
        let mut a = item("a", 10, 100);
        a.pinned = true;
        let items = [a, item("b", 5, 10)];
        let plan = plan(&Policy { keep_days: None, max_bytes: Some(50) }, &items, NOW);
        assert_eq!(ids(&plan), ["b"]);
        assert!(plan.still_over_budget);
        assert_eq!(plan.spared.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn both_limits_together() {
        let items = [item("ancient", 40, 10), item("old", 6, 50), item("mid", 4, 50), item("new", 0, 50)];
        let plan = plan(&Policy { keep_days: Some(30), max_bytes: Some(100) }, &items, NOW);
        assert_eq!(ids(&plan), ["ancient", "old"]);
        assert!(plan.delete[0].reason.contains("retention_days"));
        assert!(plan.delete[1].reason.contains("retention_max_bytes"));
        assert_eq!(plan.stored_bytes_after, 100, "at the budget is within it");
    }
}
