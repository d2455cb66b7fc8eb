//! `/snapshots/{id}`: one snapshot. Its record and statistics at the top
//! (waiting while the server parses it), a device picker, and the views of
//! the chosen device ([`crate::explorer`]), restored from the URL's query
//! when the page opens from a link ([`crate::core::permalink`]).

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_params_map;
use vramscope_shared::DeviceStats;
use vramscope_shared::api::paths;
use vramscope_shared::snapshot::CaptureContext;

use crate::components::card::Card;
use crate::core::format;
use crate::core::model::{Axis, SnapshotMeta, SnapshotStatus, StatsReport};
use crate::core::permalink;
use crate::explorer::track::PageComments;
use crate::explorer::{DeviceViews, EarlyWindow};
use crate::infra::first_view::FirstView;
use crate::infra::{api, clock, draws};

/// The least time between two requests for the statistics while the
/// server parses. Each request waits on the server for the parse to end
/// ([`api::stats`]), so the page is told the moment it can draw (it
/// polled every 400 ms before: 0.2 s more on average on a 1 GB upload);
/// this only spaces the requests when a 202 comes back at once (a server
/// or proxy that does not hold it).
const PARSING_POLL: Duration = Duration::from_millis(400);

/// The route's component: one view per id, rebuilt when the id changes.
#[component]
pub(crate) fn SnapshotPage() -> impl IntoView {
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    move || {
        let id = id.get();
        view! { <SnapshotView id=id/> }
    }
}

/// What is known of the statistics so far.
#[derive(Clone, Debug, PartialEq)]
enum StatsState {
    Loading,
    Parsing,
    /// Boxed: a report is far larger than the other states.
    Ready(Box<StatsReport>),
    Failed(String),
}

#[component]
pub(crate) fn SnapshotView(id: String) -> impl IntoView {
    let meta = RwSignal::new(None::<Result<SnapshotMeta, String>>);
    let stats = RwSignal::new(StatsState::Loading);
    let device = RwSignal::new(None::<u32>);
    // The timeline goes first; a page that will draw none lets the rest go
    // as soon as it knows.
    let first_view = FirstView::provide();
    let comments = PageComments::provide();
    // The view a link describes (`?device=…&axis=…&start=…`), for the first
    // device shown; a device picked afterwards starts fresh.
    let linked = permalink::parse(&window().location().search().unwrap_or_default());
    let section = ask_first_window_early(&id, &linked);
    let initial = StoredValue::new(Some(linked.clone()));
    Effect::new(move |previous: Option<Option<u32>>| {
        let now = device.get();
        if let Some(Some(before)) = previous
            && now != Some(before)
        {
            initial.set_value(None);
        }
        now
    });

    let meta_id = id.clone();
    spawn_local(async move {
        let answer = api::snapshot(&meta_id).await.map_err(|e| e.to_string());
        // The statistics' request waits on the server while it parses:
        // the record says so at once.
        if answer.as_ref().is_ok_and(|m| m.status == SnapshotStatus::Parsing) {
            stats.try_update(|s| {
                if *s == StatsState::Loading {
                    *s = StatsState::Parsing;
                }
            });
        }
        meta.try_set(Some(answer));
    });
    follow_stats(id.clone(), linked.device, stats, device);

    let selected = move || {
        let d = device.get()?;
        stats.with(|s| match s {
            StatsState::Ready(r) => r.devices.iter().find(|x| x.device == d).cloned(),
            _ => None,
        })
    };
    Effect::new(move |_| {
        let no_timeline = match &*stats.read() {
            StatsState::Loading | StatsState::Parsing => false,
            StatsState::Failed(_) => true,
            StatsState::Ready(_) => selected().is_none_or(|d| d.trace_entries == 0),
        };
        if no_timeline {
            first_view.open();
        }
    });
    let timeline_id = StoredValue::new(id.clone());
    // An offline report has no library and no server to keep comments.
    let report = crate::infra::local::in_report();
    view! {
        <section class="snapshot" node_ref=section>
            {(!report).then(|| view! {
                <p class="crumbs">
                    <a href="/">"Library"</a>
                    " / "
                </p>
            })}
            {move || match meta.get() {
                None => view! { <h1>"Loading…"</h1> }.into_any(),
                Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                Some(Ok(m)) => view! { <Header meta=m/> }.into_any(),
            }}
            {move || match stats.get() {
                StatsState::Loading => view! { <p class="hint">"Loading the statistics…"</p> }.into_any(),
                StatsState::Parsing => {
                    view! { <p class="notice">"The server is still parsing this snapshot; this page updates when it is done."</p> }
                        .into_any()
                }
                // An unknown id fails both calls: say it once.
                StatsState::Failed(_) if meta.with(|m| matches!(m, Some(Err(_)))) => ().into_any(),
                StatsState::Failed(e) => view! { <p class="notice error">{e}</p> }.into_any(),
                StatsState::Ready(report) if report.devices.is_empty() => {
                    view! { <p class="notice">"This snapshot holds no device with segments or a trace: nothing was allocated while it was recorded."</p> }
                        .into_any()
                }
                StatsState::Ready(report) => {
                    view! {
                        <DevicePicker report=(*report).clone() device=device/>
                        {move || selected().map(|d| view! { <Summary stats=d format=report.format_version.clone() capture=report.capture.clone()/> })}
                    }
                        .into_any()
                }
            }}
            {move || {
                selected().map(|d| {
                    let initial = initial.get_value().filter(|p| p.device.is_none_or(|x| x == d.device)).unwrap_or_default();
                    device_views(timeline_id.get_value(), &d, initial)
                })
            }}
            {move || {
                stats.with(|s| matches!(s, StatsState::Ready(r) if r.host.is_some()))
                    .then(|| view! { <crate::pages::host::HostMemory id=timeline_id.get_value()/> })
            }}
            {review(timeline_id.get_value(), report, meta, comments)}
        </section>
    }
}

/// The timeline's first window of snapshot `id`, asked for beside the
/// statistics as soon as the page's section (the node returned) is on
/// screen and so has its width, unless the link (`linked`) asks for
/// another axis or a memory zoom ([`EarlyWindow`]).
fn ask_first_window_early(id: &str, linked: &permalink::PageState) -> NodeRef<leptos::html::Section> {
    let early = EarlyWindow::provide();
    let section = NodeRef::<leptos::html::Section>::new();
    let device = linked.device;
    let wanted = linked.axis.is_none_or(|a| a == Axis::Event) && linked.memory.is_none();
    let id = id.to_owned();
    Effect::new(move |asked: Option<bool>| {
        if asked == Some(true) || !wanted {
            return true;
        }
        let Some(section) = section.get() else { return false };
        early.ask(&id, device, section.client_width());
        true
    });
    section
}

/// Ask for the statistics of snapshot `id` until the server has parsed it
/// (or the page is left), and pick the device to show: the link's
/// (`linked`), or the one with the longest trace.
fn follow_stats(id: String, linked: Option<u32>, stats: RwSignal<StatsState>, device: RwSignal<Option<u32>>) {
    spawn_local(async move {
        loop {
            let asked = draws::now();
            let state = match api::stats(&id).await {
                Ok(Some(report)) => StatsState::Ready(Box::new(report)),
                Ok(None) => StatsState::Parsing,
                Err(e) => StatsState::Failed(e.to_string()),
            };
            let parsing = state == StatsState::Parsing;
            if let StatsState::Ready(report) = &state {
                device.try_set(permalink::device_to_show(linked, &report.devices));
            }
            // The page was left: stop asking.
            if stats.try_set(state).is_some() || !parsing {
                break;
            }
            let took = Duration::from_secs_f64(((draws::now() - asked) / 1000.0).max(0.0));
            if let Some(rest) = PARSING_POLL.checked_sub(took) {
                clock::sleep(rest).await;
            }
        }
    });
}

/// The views of device `d` of snapshot `id`, restored from `initial`, with
/// its analysis panels; a device without a trace says how to record one.
fn device_views(id: String, d: &DeviceStats, initial: permalink::PageState) -> AnyView {
    if d.trace_entries == 0 {
        view! {
            <p class="notice">
                {format!(
                    "GPU {} has no trace: the snapshot holds only the allocator's state at the end. Record one with torch.cuda.memory._record_memory_history() before the code you want to see.",
                    d.device,
                )}
            </p>
        }
            .into_any()
    } else {
        view! { <DeviceViews id=id.clone() device=d.device initial=initial/> <crate::pages::findings::AnalysisPanels id=id device=d.device/> }.into_any()
    }
}

/// The review thread of snapshot `id`, pinned as its record (`meta`)
/// says, loading the page's `comments`. Comments and pins live on the server: an offline `report` has
/// none, and a file opened in this tab has none either (asking the server
/// about its id is a 404).
fn review(
    id: String,
    report: bool,
    meta: RwSignal<Option<Result<SnapshotMeta, String>>>,
    comments: PageComments,
) -> AnyView {
    if report {
        ().into_any()
    } else if crate::infra::local::is_local(&id) {
        view! {
            <p class="notice" id="review-local">
                "Comments and pins are kept by the server: upload this file to discuss it with others."
            </p>
        }
        .into_any()
    } else {
        let pinned_now = Signal::derive(move || meta.with(|m| m.as_ref()?.as_ref().ok().map(|m| m.pinned)));
        view! { <crate::pages::review::ReviewThread id=id pinned_now=pinned_now comments=comments/> }.into_any()
    }
}

/// A download link in token mode: a navigation carries no token, so ask
/// the server for a signed link (valid for minutes) and follow that; the
/// file's `Content-Disposition` keeps the page where it is. The signed
/// link is left on the anchor (`data-signed`) for the browser test. Local
/// files and servers without tokens use the plain link.
fn follow_signed(ev: web_sys::MouseEvent, id: String, report: bool) {
    use wasm_bindgen::JsCast;
    if id.starts_with(crate::infra::local::LOCAL_PREFIX) || api::token().is_none() {
        return;
    }
    ev.prevent_default();
    let anchor = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok());
    spawn_local(async move {
        match api::signed_links(&id).await {
            Ok(links) => {
                let url = if report { links.report } else { links.file };
                if let Some(anchor) = &anchor {
                    let _ = anchor.set_attribute("data-signed", &url);
                }
                if let Some(window) = web_sys::window() {
                    let _ = window.location().set_href(&url);
                }
            }
            Err(e) => {
                if let Some(anchor) = &anchor {
                    let _ = anchor.set_attribute("title", &e.to_string());
                }
            }
        }
    });
}

#[component]
fn Header(meta: SnapshotMeta) -> impl IntoView {
    let facts: Vec<String> = [
        meta.job.as_ref().map(|j| format!("job {j}")),
        meta.host.as_ref().map(|h| format!("host {h}")),
        meta.rank.map(|r| format!("rank {r}")),
        Some(format!("trigger {}", meta.trigger)),
        Some(format::bytes(meta.size_bytes)),
    ]
    .into_iter()
    .flatten()
    .collect();
    // A local file's page offers the file itself: the server never saw it.
    let local = meta.id.starts_with(crate::infra::local::LOCAL_PREFIX);
    let download = if local { crate::infra::local::file_url(&meta.id) } else { Some(paths::FILE.path([&meta.id])) };
    // The same self-contained page as `vramscope report` (server only).
    let report = (!local).then(|| paths::REPORT.path([&meta.id]));
    let name = meta.name.clone();
    let (file_id, report_id) = (meta.id.clone(), meta.id.clone());
    view! {
        <div class="title-row">
            <h1>{meta.name.clone()}</h1>
            {local.then(|| view! { <crate::components::badge::LocalBadge/> })}
        </div>
        <p class="facts">
            {facts.join(" · ")}
            {download.map(|href| view! {
                " · "
                <a href=href rel="external" download=name id="download"
                    on:click=move |ev| follow_signed(ev, file_id.clone(), false)>
                    "download"
                </a>
            })}
            {report.map(|href| view! {
                " · "
                <a href=href rel="external" download id="export-report"
                    on:click=move |ev| follow_signed(ev, report_id.clone(), true)>
                    "export report"
                </a>
            })}
            {meta.tags.iter().cloned().map(|t| view! { <span class="tag">{t}</span> }).collect_view()}
        </p>
    }
}

/// The GPUs with a trace or segments, as PyTorch's viewer lists them (the
/// statistics hold only those). Shown with one GPU too: it says which.
#[component]
fn DevicePicker(report: StatsReport, device: RwSignal<Option<u32>>) -> impl IntoView {
    let devices: Vec<(u32, String)> = report
        .devices
        .iter()
        .map(|d| (d.device, format!("GPU {} — {} trace events", d.device, format::grouped(d.trace_entries as u64))))
        .collect();
    if devices.is_empty() {
        return None;
    }
    Some(view! {
        <label class="device">
            "Device "
            <select
                id="device"
                on:change=move |ev| {
                    if let Ok(d) = event_target_value(&ev).parse() {
                        device.set(Some(d));
                    }
                }
            >
                {devices
                    .into_iter()
                    .map(|(d, label)| {
                        view! {
                            <option value=d.to_string() selected=move || device.get() == Some(d)>
                                {label}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
        </label>
    })
}

/// "Captured by vramscope agent: torch …, backend …, PYTORCH_ALLOC_CONF=…":
/// the job's settings, as the capture module recorded them.
fn captured_by(capture: &CaptureContext) -> String {
    let mut parts = Vec::new();
    if let Some(v) = &capture.torch_version {
        parts.push(format!("torch {v}"));
    }
    if let Some(b) = &capture.backend {
        parts.push(format!("allocator backend {b}"));
    }
    match (&capture.alloc_conf_var, &capture.alloc_conf) {
        (Some(var), Some(conf)) => parts.push(format!("{var}={conf}")),
        _ => parts.push("no PYTORCH_ALLOC_CONF".to_owned()),
    }
    format!("Captured by vramscope agent: {}. ", parts.join(", "))
}

/// The device's figures, as `vramscope stats` prints them.
#[component]
fn Summary(stats: DeviceStats, format: String, capture: Option<CaptureContext>) -> impl IntoView {
    let s = stats;
    let peak = |p: Option<u64>| p.map(|p| format!("peak {}", format::bytes(p))).unwrap_or_default();
    let share = if s.reserved_bytes > 0 {
        format!("{:.1}% of reserved", s.reserved_unallocated_bytes as f64 * 100.0 / s.reserved_bytes as f64)
    } else {
        String::new()
    };
    let mut cards: Vec<(&str, String, String)> = vec![
        ("reserved", format::bytes(s.reserved_bytes), peak(s.reserved_peak_bytes)),
        ("allocated", format::bytes(s.allocated_bytes), String::new()),
        ("active", format::bytes(s.active_bytes), String::new()),
        ("requested", format::bytes(s.requested_bytes), peak(s.requested_peak_bytes)),
        ("cached, not in use", format::bytes(s.reserved_unallocated_bytes), share),
        ("inactive split", format::bytes(s.inactive_split_bytes), String::new()),
        // At the snapshot's end: the OOM post-mortem shows the same figure
        // at the OOM, which differs (the program freed memory since).
        (
            "largest free block at the end",
            format::bytes(s.largest_free_block_bytes),
            format!("of {} free when the snapshot was taken", format::bytes(s.free_bytes)),
        ),
        ("rounding waste", format::bytes(s.internal_waste_bytes), String::new()),
        ("OOMs", s.ooms.to_string(), String::new()),
        (
            "trace events",
            format::grouped(s.trace_entries as u64),
            format::count(s.segments as u64, "segment", "segments"),
        ),
    ];
    // NVML's figure at capture time, when the vramscope agent took it.
    if let (Some(outside), Some(used)) = (s.outside_allocator_bytes, s.process_used_bytes) {
        cards.push((
            "outside the caching allocator",
            format::bytes(outside),
            format!("NVML: the process used {} (CUDA context, NCCL, cuBLAS, other libraries)", format::bytes(used)),
        ));
    }
    let ooms = s.ooms;
    view! {
        <div class="summary" id="stats-summary">
            {cards
                .into_iter()
                .map(|(label, value, note)| {
                    let alarm = label == "OOMs" && ooms > 0;
                    view! { <Card label=label.to_owned() value=value note=note alarm=alarm/> }
                })
                .collect_view()}
        </div>
        <p class="hint">
            {format!("Snapshot format {format}. ")}
            "The cards show the allocator when the snapshot was taken (its end); the peaks are over the trace. "
            {(ooms > 0).then_some("The OOM post-mortem below shows the allocator at the OOM. ")}
            {capture.as_ref().map(captured_by)}
            {s.trace_wrapped.then_some(
                "The trace does not reach back to an empty allocator (the ring buffer wrapped, or recording started late): its peaks are the window's.",
            )}
        </p>
    }
}
