//! The OOM post-mortem panel: at each `oom` entry of the trace, the
//! request, free memory on the device, reserved-but-unallocated bytes, the
//! largest free block, whether it was fragmentation or true exhaustion, the
//! top live allocations by stack (frames expandable), and which allocator
//! settings the simulator says would have avoided it.

use vramscope_shared::analysis::oom::{Avoidance, Limit, OomCause, OomReport, SettingVerdict};

use crate::core::format;

/// The figures of a report as cards: (label, value, note).
pub(crate) fn cards(r: &OomReport) -> Vec<(&'static str, String, String)> {
    let pool = pool(r);
    let device_free = match (r.device_free_bytes, r.limit) {
        (Some(f), Limit::ProcessCap) => (format::bytes(f), "more than asked: a per-process cap stopped it".to_owned()),
        (Some(f), _) => (format::bytes(f), "less than asked: the GPU was full".to_owned()),
        (None, _) => ("unknown".to_owned(), "not recorded".to_owned()),
    };
    let share = if r.reserved_bytes > 0 {
        format!("{:.1}% of reserved", r.reserved_unallocated_bytes as f64 * 100.0 / r.reserved_bytes as f64)
    } else {
        String::new()
    };
    let largest = r.largest_usable_free_block.map_or(0, |b| b.size);
    let (low, high) = r.capacity_bytes_range;
    let cap = match (r.recorded_capacity_bytes, r.limit) {
        (Some(cap), _) => {
            Some((format::bytes(cap), "recorded: the process's memory fraction of the device".to_owned()))
        }
        (None, Limit::ProcessCap) => Some((
            format!("{} – {}", format::bytes(low), format::bytes(high)),
            "inferred from the OOM (the capture recorded no cap)".to_owned(),
        )),
        (None, _) => None,
    };
    let mut cards = vec![
        (
            "request",
            format::bytes(r.request_bytes),
            format!("{pool}; tried to allocate {}", format::bytes(r.segment_request_bytes)),
        ),
        ("device free", device_free.0, device_free.1),
        ("reserved", format::bytes(r.reserved_bytes), format!("peak {}", format::bytes(r.reserved_peak_bytes))),
        (
            "allocated",
            format::bytes(r.allocated_bytes),
            format!("{} pending free", format::bytes(r.pending_free_bytes)),
        ),
        ("reserved, unallocated", format::bytes(r.reserved_unallocated_bytes), share),
        // "at the OOM": the snapshot page's card of the same name is the
        // snapshot's end, after the program freed what it held.
        (
            "largest free block at the OOM",
            format::bytes(largest),
            // Two counts of free memory: the request's own pool and stream,
            // which the cause's sentence counts, and every pool together.
            format!(
                "usable by the request ({pool}, its stream); {} free in {} in all pools and streams",
                format::bytes(r.free_bytes),
                format::count(r.free_blocks, "block", "blocks")
            ),
        ),
    ];
    if let Some((value, note)) = cap {
        // Beside "device free", which it explains.
        cards.insert(2, ("memory cap", value, note));
    }
    cards
}

/// The pool a request is served from, by its size.
fn pool(r: &OomReport) -> &'static str {
    if r.small_pool { "small pool" } else { "large pool" }
}

/// The cause in a word and a sentence. The sentence counts the free
/// memory of the request's own pool and stream (what it could use), and
/// says so: the card beside it also gives every pool's.
pub(crate) fn cause(r: &OomReport) -> (&'static str, String) {
    let largest = r.largest_usable_free_block.map_or(0, |b| b.size);
    let pool = pool(r);
    match r.cause {
        OomCause::Fragmentation => (
            "fragmentation",
            format!(
                "The {pool} (on the request's stream) held {} free, more than the {} asked for, but in {}, the largest {}.",
                format::bytes(r.usable_free_bytes),
                format::bytes(r.request_bytes),
                format::count(r.usable_free_blocks, "piece", "pieces"),
                format::bytes(largest)
            ),
        ),
        OomCause::Exhaustion => (
            "exhaustion",
            format!(
                "Even all {} free in the {pool} (on the request's stream) together were less than the {} asked for: the program needed more memory than it could get.",
                format::bytes(r.usable_free_bytes),
                format::bytes(r.request_bytes)
            ),
        ),
        OomCause::Unexplained => (
            "unexplained",
            "A free block large enough existed: a rule the analysis does not model (max_split_size, a private pool) excluded it."
                .to_owned(),
        ),
    }
}

/// What the simulator says of one setting.
pub(crate) fn verdict(v: &SettingVerdict) -> (bool, String) {
    let peak = format::bytes(v.reserved_peak_bytes);
    match v.avoids {
        Avoidance::Yes => (true, format!("{}: avoids it (reserves at most {peak})", v.setting)),
        Avoidance::IfCapacityAtLeast { bytes } => {
            (true, format!("{}: avoids it if the process could reserve {}", v.setting, format::bytes(bytes)))
        }
        Avoidance::No => (false, format!("{}: does not avoid it (reserves {peak})", v.setting)),
    }
}

/// The sentence about which settings help, or that none would.
pub(crate) fn avoided_by(r: &OomReport) -> String {
    match (&r.avoided_by, r.cause) {
        (None, OomCause::Exhaustion) => {
            "No allocator setting helps: the program needs less memory, or more of it.".to_owned()
        }
        (None, _) => "Not simulated.".to_owned(),
        (Some(v), _) if v.is_empty() => {
            "No allocator setting helps: the program needs less memory, or more of it.".to_owned()
        }
        (Some(v), _) => {
            // The condition goes with the setting: under the capacity the
            // what-if replays, such a setting still runs out.
            let good: Vec<String> = v
                .iter()
                .filter_map(|x| match x.avoids {
                    Avoidance::Yes => Some(x.setting.clone()),
                    Avoidance::IfCapacityAtLeast { bytes } => {
                        Some(format!("{} (if the process could reserve {})", x.setting, format::bytes(bytes)))
                    }
                    Avoidance::No => None,
                })
                .collect();
            if good.is_empty() {
                "No simulated setting avoids it.".to_owned()
            } else {
                format!("Would have been avoided by: {}", good.join(", "))
            }
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::OomPanel;

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use vramscope_shared::analysis::oom::OomReport;
    use vramscope_shared::views::findings::{ExplainAnswer, ExplainParams};
    use vramscope_shared::views::view::Explain;

    use super::{avoided_by, cards, cause, verdict};
    use crate::components::stack::StackDetails;
    use crate::core::format;
    use crate::infra::api;
    use crate::infra::first_view::after_first_view;

    /// The post-mortem of each OOM of a device; nothing when it had none.
    #[component]
    pub(crate) fn OomPanel(id: String, device: u32) -> impl IntoView {
        let answer = RwSignal::new(None::<Result<ExplainAnswer, String>>);
        after_first_view(move || {
            spawn_local(async move {
                let p = ExplainParams { device: Some(device), simulate: None };
                let result = api::view::<Explain>("explaining the OOMs", &id, &p).await.map_err(|e| e.to_string());
                answer.try_set(Some(result));
            })
        });
        move || {
            answer.get().map(|a| match a {
                Err(e) => view! { <p class="notice error">{e}</p> }.into_any(),
                Ok(a) if a.ooms.is_empty() => ().into_any(),
                Ok(a) => view! {
                    <div class="panel oom" id="oom-panel">
                        <h2>"Out of memory: post-mortem"</h2>
                        <p class="hint" id="oom-moment">
                            "These figures are the allocator's at the OOM; the cards at the top of the page are the snapshot's end."
                        </p>
                        {a.ooms.into_iter().map(|r| view! { <OomReportView report=r/> }).collect_view()}
                    </div>
                }
                .into_any(),
            })
        }
    }

    #[component]
    fn OomReportView(report: OomReport) -> impl IntoView {
        let r = report;
        let when = r
            .since_trace_start_us
            .map(|us| format!(", {} into the trace", format::duration_us(us)))
            .unwrap_or_default();
        let (word, sentence) = cause(&r);
        let verdicts: Vec<(bool, String)> = r.avoided_by.iter().flatten().map(verdict).collect();
        view! {
            <div class="oom-report">
                <p class="oom-title">
                    {format!(
                        "Device {}: out of memory at trace event {} of {}{when}.",
                        r.device,
                        format::grouped(u64::from(r.row)),
                        format::grouped(u64::from(r.trace_entries)),
                    )}
                </p>
                <div class="summary">
                    {cards(&r)
                        .into_iter()
                        .map(|(label, value, note)| view! { <crate::components::card::Card label=label.to_owned() value=value note=note/> })
                        .collect_view()}
                    <div class="card alarm" id="oom-cause">
                        <div class="label">"cause"</div>
                        <div class="value">{word}</div>
                        <div class="note">{if r.exact { "layout exact" } else { "layout estimated" }}</div>
                    </div>
                </div>
                <p class="cause">{sentence}</p>
                <p class="avoided" id="oom-avoided">{avoided_by(&r)}</p>
                <ul class="verdicts">
                    {verdicts
                        .into_iter()
                        .map(|(good, text)| view! { <li class:good=good class:bad=!good>{text}</li> })
                        .collect_view()}
                </ul>
                <h3>{format!("Live allocations by stack at the OOM (top {} of {})", r.top_stacks.len(), r.live_stacks)}</h3>
                <table class="stacks" id="oom-stacks">
                    <thead>
                        <tr>
                            <th class="num">"bytes"</th>
                            <th class="num">"allocations"</th>
                            <th>"stack"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {r.top_stacks
                            .into_iter()
                            .enumerate()
                            .map(|(k, s)| {
                                view! {
                                    <tr>
                                        <td class="num">{format::bytes(s.bytes)}</td>
                                        <td class="num">{format::grouped(s.count)}</td>
                                        <td><StackDetails frames=s.frames open=k == 0/></td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </tbody>
                </table>
            </div>
        }
    }
}

#[cfg(test)]
mod tests {

    /// Found in review: a snapshot whose capture recorded the process's cap
    /// (a memory fraction) showed only the inferred bracket, though
    /// `vramscope explain` names the recorded figure.
    #[test]
    fn regression_the_oom_panel_shows_the_recorded_cap() {
        let a = vramscope_shared::testing::corpus("fraction_oom");
        let e = explain(&a, &ExplainParams { simulate: Some(false), ..ExplainParams::default() }).expect("explain");
        let r = &e.ooms[0];
        let cap = r.recorded_capacity_bytes.expect("fraction_oom records its cap");
        let c = cards(r);
        assert_eq!(
            c[2],
            ("memory cap", format::bytes(cap), "recorded: the process's memory fraction of the device".to_owned())
        );
    }

    use vramscope_shared::views::findings::{ExplainParams, explain};

    use super::*;

    /// Issue 44: `oom_leak`'s card said "349 MiB free in 32 blocks" and the
    /// sentence under it "the pool held 348 MiB free … in 22 pieces": every
    /// pool and stream, then the request's own, neither said.
    #[test]
    fn regression_oom_free_figures_say_which_pools_they_count() {
        let a = vramscope_shared::testing::corpus("oom_leak");
        let e = explain(&a, &ExplainParams { simulate: Some(false), ..ExplainParams::default() }).expect("explain");
        let r = &e.ooms[0];
        let c = cards(r);
        let largest = c.iter().find(|c| c.0 == "largest free block at the OOM").expect("the card");
        assert_eq!(
            largest.2,
            "usable by the request (large pool, its stream); 349 MiB free in 32 blocks in all pools and streams"
        );
        let (_, sentence) = cause(r);
        assert!(
            sentence.starts_with("The large pool (on the request's stream) held 348 MiB free, more than the 292 MiB asked for, but in 22 pieces"),
            "{sentence}"
        );
    }

    #[test]
    fn oom_leak_reads_as_fragmentation_with_its_figures() {
        let a = vramscope_shared::testing::corpus("oom_leak");
        let e = explain(&a, &ExplainParams::default()).expect("explain");
        let r = &e.ooms[0];
        let c = cards(r);
        assert_eq!(c[0], ("request", "292 MiB".to_owned(), "large pool; tried to allocate 292 MiB".to_owned()));
        assert!(c[1].2.contains("cap"), "{:?}", c[1]);
        assert_eq!(c[2].0, "memory cap");
        assert!(c[2].2.starts_with("inferred"), "{:?}", c[2]);
        assert_eq!(c[5].1, "349 MiB", "PyTorch's 348.89 MiB reserved but unallocated");
        assert_eq!((c[6].0, c[6].1.as_str()), ("largest free block at the OOM", "70.2 MiB"));
        let (word, sentence) = cause(r);
        assert_eq!(word, "fragmentation");
        assert!(sentence.contains("70.2 MiB"), "{sentence}");
        let said = avoided_by(r);
        assert!(said.starts_with("Would have been avoided by") || said.starts_with("No simulated"), "{said}");
        let lines: Vec<(bool, String)> = r.avoided_by.iter().flatten().map(verdict).collect();
        assert!(lines.iter().any(|(_, t)| t.starts_with("expandable_segments:True: ")), "{lines:?}");
    }
}
