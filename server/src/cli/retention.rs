//! `vramscope retention [--dry-run]`: applies the retention policy once to
//! the server's database and blob store (the same settings as `serve`), or
//! shows what it would delete and why.

use std::io::Write;

use anyhow::Context;

use crate::report::text::bytes;
use crate::retention::{Applied, Plan, Policy, run_once};
use crate::settings::{Settings, SettingsArgs};

/// Arguments of `vramscope retention`.
#[derive(Debug, clap::Args)]
pub(crate) struct RetentionArgs {
    #[command(flatten)]
    settings: SettingsArgs,
    /// Show what would be deleted, and why, without deleting anything.
    #[arg(long)]
    dry_run: bool,
    /// Keep this many days (overrides `retention_days`).
    #[arg(long)]
    days: Option<u64>,
    /// Byte budget for all files (overrides `retention_max_bytes`).
    #[arg(long)]
    max_bytes: Option<u64>,
    /// Print the plan (and what was done) as one JSON object.
    #[arg(long)]
    json: bool,
}

/// The policy the settings and flags name.
fn policy(args: &RetentionArgs, settings: &Settings) -> Policy {
    Policy {
        keep_days: args.days.or(settings.retention_days),
        max_bytes: args.max_bytes.or(settings.retention_max_bytes),
    }
}

/// Run the subcommand.
pub(crate) async fn run(args: &RetentionArgs) -> anyhow::Result<()> {
    let settings = Settings::load(&args.settings)?;
    let policy = policy(args, &settings);
    anyhow::ensure!(
        policy.is_active(),
        "no retention policy: set retention_days or retention_max_bytes (config file or VRAMSCOPE_RETENTION_DAYS, \
         VRAMSCOPE_RETENTION_MAX_BYTES), or pass --days / --max-bytes"
    );
    let (db, blobs) = settings.open_stores().await?;
    let (plan, applied) = run_once(&db, &blobs, &policy, args.dry_run).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = serde_json::json!({ "policy": policy, "dry_run": args.dry_run, "plan": plan, "applied": applied });
        writeln!(out, "{value}").context("writing to stdout")?;
    } else {
        print_plan(&mut out, &policy, &plan, applied.as_ref(), args.dry_run).context("writing to stdout")?;
    }
    Ok(())
}

fn print_plan(
    out: &mut impl Write,
    policy: &Policy,
    plan: &Plan,
    applied: Option<&Applied>,
    dry_run: bool,
) -> std::io::Result<()> {
    let days = policy.keep_days.map_or("off".to_owned(), |d| format!("{d} days"));
    let budget = policy.max_bytes.map_or("off".to_owned(), bytes);
    writeln!(out, "retention: keep {days}, byte budget {budget}; pinned and commented snapshots are never deleted")?;
    writeln!(out, "stored: {}", bytes(plan.stored_bytes_before))?;
    let freed: u64 = plan.delete.iter().map(|d| d.freed_bytes).sum();
    let verb = if dry_run { "would delete" } else { "deleting" };
    writeln!(out, "{verb} {} snapshot(s), freeing {}:", plan.delete.len(), bytes(freed))?;
    for d in &plan.delete {
        writeln!(out, "  {}  {}  {}  {}", d.id, d.name, bytes(d.size_bytes), d.reason)?;
    }
    if !plan.spared.is_empty() {
        writeln!(out, "kept although over a limit:")?;
        for s in &plan.spared {
            writeln!(out, "  {}  {}  {}", s.id, s.name, s.reason)?;
        }
    }
    if let Some(applied) = applied {
        writeln!(out, "deleted {} snapshot(s)", applied.deleted.len())?;
        if !applied.skipped.is_empty() {
            writeln!(
                out,
                "skipped {} (deleted elsewhere, or pinned or commented meanwhile): {}",
                applied.skipped.len(),
                applied.skipped.join(", ")
            )?;
        }
    }
    writeln!(out, "stored after: {}{}", bytes(plan.stored_bytes_after), if dry_run { " (dry run)" } else { "" })?;
    if plan.still_over_budget {
        writeln!(out, "still over the byte budget: the rest is pinned, commented, or shares their files")?;
    }
    Ok(())
}
