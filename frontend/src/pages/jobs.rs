//! `/jobs` and `/jobs/{job}`: a training job's ranks side by side. Each row
//! is a rank (and host) with its latest snapshot's peaks, fragmentation and
//! OOMs; the rank whose peak diverges from the others' is highlighted, with
//! a link comparing it to the rank nearest the median. The server decides
//! what diverges (its rule comes with the answer and is shown).
//!
//! The JSON shapes and the figures' wording are tested natively; the
//! components exist on wasm32 only.

use crate::core::format;
use crate::core::model::jobs::{JobReport, Member};

/// A rank's name for people: `rank 3`, `node-1`, `rank 3 on node-1`.
pub fn member_label(member: &Member) -> String {
    match (member.rank, &member.host) {
        (Some(r), Some(h)) => format!("rank {r} on {h}"),
        (Some(r), None) => format!("rank {r}"),
        (None, Some(h)) => h.clone(),
        (None, None) => "(no rank or host)".to_owned(),
    }
}

/// A figure or a dash while unknown.
pub fn bytes_or_dash(n: Option<u64>) -> String {
    n.map_or("—".to_owned(), format::bytes)
}

/// A share as a percentage with one decimal, or a dash.
pub fn percent_or_dash(share: Option<f64>) -> String {
    share.map_or("—".to_owned(), |s| format!("{:.1}%", s * 100.0))
}

/// The job page's line of facts: `3 snapshots · 2 ranks · median peak …`.
/// Ranks are counted as the jobs list counts them (distinct ranks given at
/// upload, `COUNT(DISTINCT rank)` on the server), not rows of the table: a
/// job uploaded without `rank=` has no rank, whatever its hosts.
pub fn facts(report: &JobReport) -> String {
    let ranks: std::collections::BTreeSet<i64> = report.members.iter().filter_map(|m| m.rank).collect();
    format!(
        "{} · {} · median peak {}",
        format::count(report.snapshots, "snapshot", "snapshots"),
        ranks_said(ranks.len() as u64),
        bytes_or_dash(report.median_peak_requested_bytes)
    )
}

/// A number of ranks in words: `1 rank`, `2 ranks`, `no rank given`.
pub fn ranks_said(n: u64) -> String {
    if n == 0 { "no rank given".to_owned() } else { format::count(n, "rank", "ranks") }
}

/// The jobs list's "Ranks" cell: the count, or a dash when no snapshot of
/// the job gave a rank.
pub fn ranks_cell(n: u64) -> String {
    if n == 0 { "—".to_owned() } else { format::grouped(n) }
}

/// The sentence under the table: which rank diverges, and by how much.
pub fn verdict(report: &JobReport) -> String {
    let flagged: Vec<String> = report
        .members
        .iter()
        .filter(|m| m.diverges)
        .map(|m| format!("{} (+{})", member_label(m), bytes_or_dash(m.excess_bytes)))
        .collect();
    let known = report.members.iter().filter(|m| m.peak_requested_bytes.is_some()).count();
    match flagged.len() {
        _ if known < 2 => "Fewer than two ranks have figures yet: nothing to compare.".to_owned(),
        0 => "No rank diverges from the others.".to_owned(),
        _ => format!("Diverging: {}.", flagged.join(", ")),
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use component::{JobPage, JobsPage};

#[cfg(target_arch = "wasm32")]
// leptos's `#[component]` gives each component a `pub` props struct.
#[allow(unreachable_pub)]
mod component {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use leptos_router::hooks::use_params_map;

    use super::{bytes_or_dash, facts, member_label, percent_or_dash, ranks_cell, ranks_said, verdict};
    use crate::core::format;
    use crate::core::model::SnapshotStatus;
    use crate::core::model::jobs::{JobReport, JobSummary};
    use crate::infra::api;
    use crate::infra::clock;
    use crate::pages::predict::WillItFit;

    /// `/jobs`: every job, most recent first.
    #[component]
    pub(crate) fn JobsPage() -> impl IntoView {
        let jobs = RwSignal::new(None::<Result<Vec<JobSummary>, String>>);
        spawn_local(async move {
            jobs.try_set(Some(api::jobs().await.map_err(|e| e.to_string())));
        });
        view! {
            <section class="jobs">
                <p class="crumbs"><a href="/">"Library"</a> " / "</p>
                <h1>"Jobs"</h1>
                {move || match jobs.get() {
                    None => view! { <p class="hint">"Loading…"</p> }.into_any(),
                    Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                    Some(Ok(list)) if list.is_empty() => {
                        view! { <p class="empty">"No job yet: upload with ?job=…&rank=… (or vramscope upload --job --rank)."</p> }
                            .into_any()
                    }
                    Some(Ok(list)) => {
                        view! {
                            <table class="snapshots">
                                <thead>
                                    <tr>
                                        <th>"Job"</th>
                                        <th class="num">"Snapshots"</th>
                                        <th class="num">"Ranks"</th>
                                        <th class="num">"Hosts"</th>
                                        <th class="num">"OOM uploads"</th>
                                        <th>"Last upload"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {list
                                        .into_iter()
                                        .map(|j| {
                                            let href = format!("/jobs/{}", api::encode(&j.job));
                                            view! {
                                                <tr>
                                                    <td class="name"><a href=href>{j.job.clone()}</a></td>
                                                    <td class="num">{j.snapshots}</td>
                                                    <td class="num" title=ranks_said(j.ranks)>{ranks_cell(j.ranks)}</td>
                                                    <td class="num">{j.hosts}</td>
                                                    <td class="num">{j.oom_snapshots}</td>
                                                    <td>{clock::date_time(j.last_upload_ms)}</td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()}
                                </tbody>
                            </table>
                        }
                            .into_any()
                    }
                }}
            </section>
        }
    }

    /// `/jobs/{job}`: the ranks side by side.
    #[component]
    pub(crate) fn JobPage() -> impl IntoView {
        let params = use_params_map();
        let job = Memo::new(move |_| params.read().get("job").unwrap_or_default());
        let report = RwSignal::new(None::<Result<JobReport, String>>);
        Effect::new(move |_| {
            let name = job.get();
            report.set(None);
            spawn_local(async move {
                let answer = api::job(&name).await.map_err(|e| e.to_string());
                report.try_set(Some(answer));
            });
        });
        view! {
            <section class="job">
                <p class="crumbs"><a href="/">"Library"</a> " / " <a href="/jobs">"Jobs"</a> " / "</p>
                <h1>{move || format!("Job {}", job.get())}</h1>
                {move || match report.get() {
                    None => view! { <p class="hint">"Loading…"</p> }.into_any(),
                    Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                    Some(Ok(r)) => {
                        let name = r.job.clone();
                        view! { <JobTable report=r/> <WillItFit job=name/> }.into_any()
                    }
                }}
            </section>
        }
    }

    #[component]
    fn JobTable(report: JobReport) -> impl IntoView {
        let verdict_text = verdict(&report);
        let alarm = report.members.iter().any(|m| m.diverges);
        view! {
            <p class="facts" id="job-facts">{facts(&report)}</p>
            <p id="verdict" class="notice" class:error=alarm>{verdict_text}</p>
            <table class="snapshots ranks">
                <thead>
                    <tr>
                        <th>"Rank"</th>
                        <th>"Latest snapshot"</th>
                        <th class="num">"Snapshots"</th>
                        <th class="num">"Peak allocated (requested)"</th>
                        <th class="num">"Peak reserved"</th>
                        <th class="num">"Fragmentation"</th>
                        <th class="num">"OOMs"</th>
                        <th>"Trigger"</th>
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    {report
                        .members
                        .iter()
                        .map(|m| {
                            let href = format!("/snapshots/{}", api::encode(&m.snapshot_id));
                            let compare = m
                                .compare_with
                                .as_ref()
                                .filter(|_| m.diverges)
                                .map(|other| {
                                    let href = format!("/compare/{}/{}", api::encode(&m.snapshot_id), api::encode(other));
                                    view! { <a class="compare" href=href>"compare with the median rank"</a> }
                                });
                            let badge = m.diverges.then(|| {
                                view! {
                                    <span class="badge diverges" title="Peak far above the other ranks' median">
                                        {format!("diverges +{}", bytes_or_dash(m.excess_bytes))}
                                    </span>
                                }
                            });
                            let ooms = m.ooms.map_or("—".to_owned(), format::grouped);
                            view! {
                                <tr class="member" class:diverging=m.diverges>
                                    <td>{member_label(m)} " " {badge}</td>
                                    <td class="name">
                                        <a href=href>{m.name.clone()}</a>
                                        {(m.status != SnapshotStatus::Ready).then(|| format!(" ({})", m.status))}
                                    </td>
                                    <td class="num">{m.snapshots}</td>
                                    <td class="num peak">{bytes_or_dash(m.peak_requested_bytes)}</td>
                                    <td class="num">{bytes_or_dash(m.peak_reserved_bytes)}</td>
                                    <td class="num">{percent_or_dash(m.fragmentation)}</td>
                                    <td class="num">{ooms}</td>
                                    <td>{m.trigger.as_str()}</td>
                                    <td>{compare}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
            <p class="hint">{format!("Rule: {}.", report.rule)}</p>
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::jobs::JobSummary;
    use crate::core::model::{SnapshotStatus, Trigger};

    fn member(rank: i64, peak: Option<u64>, diverges: bool) -> Member {
        Member {
            rank: Some(rank),
            host: None,
            snapshots: 1,
            snapshot_id: format!("s{rank}"),
            name: format!("rank{rank}.pickle"),
            uploaded_at_ms: 0,
            status: SnapshotStatus::Ready,
            trigger: Trigger::Manual,
            peak_requested_bytes: peak,
            peak_reserved_bytes: peak,
            reserved_bytes: peak,
            fragmentation: Some(0.0123),
            ooms: Some(0),
            diverges,
            excess_bytes: diverges.then_some(2 << 30),
            compare_with: diverges.then(|| "s0".to_owned()),
        }
    }

    fn report(members: Vec<Member>) -> JobReport {
        JobReport {
            job: "j".into(),
            snapshots: members.len() as u64,
            members,
            median_peak_requested_bytes: None,
            rule: "r".into(),
        }
    }

    #[test]
    fn reads_the_server_shape() {
        let json = r#"{"job":"llama","snapshots":3,"median_peak_requested_bytes":237080580,"rule":"a rank diverges…",
            "members":[{"rank":2,"host":"node-1","snapshots":1,"snapshot_id":"x","name":"r2","uploaded_at_ms":5,
            "status":"ready","trigger":"oom","peak_requested_bytes":2534204568,"peak_reserved_bytes":2915041280,
            "reserved_bytes":1,"fragmentation":0.25,"ooms":1,"diverges":true,"excess_bytes":2297123988,
            "compare_with":"y"}]}"#;
        let r: JobReport = serde_json::from_str(json).expect("parses");
        assert_eq!(member_label(&r.members[0]), "rank 2 on node-1");
        assert_eq!(r.members[0].compare_with.as_deref(), Some("y"));
        let list: Vec<JobSummary> = serde_json::from_str(
            r#"[{"job":"a","snapshots":2,"ranks":2,"hosts":1,"last_upload_ms":9,"oom_snapshots":0}]"#,
        )
        .expect("parses");
        assert_eq!(list[0].ranks, 2);
    }

    /// Issue 44: `/jobs` said "Ranks 0" for a job uploaded without
    /// `rank=` (the server counts distinct ranks given) while its page
    /// said "1 ranks" (it counted the table's rows). Both count ranks given
    /// now, and say "1 snapshot", "no rank given", "2 ranks".
    #[test]
    fn regression_jobs_list_and_page_count_ranks_alike() {
        let mut solo = member(0, Some(1), false);
        solo.rank = None;
        let one = report(vec![solo]);
        assert_eq!(facts(&one), "1 snapshot · no rank given · median peak —");
        assert_eq!((ranks_cell(0), ranks_said(0)), ("—".to_owned(), "no rank given".to_owned()));
        let two = report(vec![member(0, Some(1), false), member(1, Some(1), false)]);
        assert_eq!(facts(&two), "2 snapshots · 2 ranks · median peak —");
        assert_eq!((ranks_cell(1), ranks_said(1)), ("1".to_owned(), "1 rank".to_owned()));
    }

    #[test]
    fn figures_and_verdicts() {
        assert_eq!(bytes_or_dash(None), "—");
        assert_eq!(percent_or_dash(Some(0.0123)), "1.2%");
        assert_eq!(
            verdict(&report(vec![member(0, Some(1), false)])),
            "Fewer than two ranks have figures yet: nothing to compare."
        );
        assert_eq!(
            verdict(&report(vec![member(0, Some(1), false), member(1, Some(1), false)])),
            "No rank diverges from the others."
        );
        let v = verdict(&report(vec![member(0, Some(1), false), member(1, Some(1), false), member(2, Some(9), true)]));
        assert!(v.starts_with("Diverging: rank 2 (+2"), "{v}");
    }
}
