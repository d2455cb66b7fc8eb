//! `/live` and `/live/{source}`: what capture agents stream while a job runs.
//!
//! `/live` lists the processes that sent telemetry (job, host, rank), with
//! NVML's view of each connected host. `/live/{source}` polls the server
//! every two seconds for the samples after the last one it has and draws
//! two charts with plotters: memory (allocated, reserved, NVML's figure for
//! the process, the capacity, and the band between reserved and NVML's
//! figure: the process's memory outside PyTorch's caching allocator) and
//! fragmentation (the share of reserved
//! memory not allocated), with a marker where each snapshot of the process
//! was uploaded; the snapshots are listed below as links. "Capture now" asks
//! the agent for a snapshot of this process, or of every process it serves.
//!
//! The data model compiles natively and is unit-tested, the charts are
//! `core::live_chart`'s; the components need a browser.
// The model is read only by the wasm32 components (and the tests).
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use crate::core::format;
use crate::core::model::live::Sample;

/// Samples kept in the page: about five hours at one a second.
pub(crate) const KEEP: usize = 20_000;

/// Appends `new` to `samples` (skipping what is already there) and keeps the
/// newest [`KEEP`].
pub(crate) fn merge(samples: &mut Vec<Sample>, new: Vec<Sample>) {
    let last = samples.last().map(|s| s.t_ms);
    samples.extend(new.into_iter().filter(|s| last.is_none_or(|l| s.t_ms > l)));
    if samples.len() > KEEP {
        let extra = samples.len() - KEEP;
        samples.drain(..extra);
    }
}

/// What the page says of a source whose allocator history is not recorded
/// (cudaMallocAsync has none): its charts come from `memory_stats()` and
/// NVML, and no snapshot can be taken.
pub(crate) fn history_note(source: &crate::core::model::live::Source) -> Option<String> {
    (source.history == Some(false)).then(|| {
        format!(
            "No allocator history under this backend ({}): memory figures and NVML only; no snapshots are taken.",
            source.backend.as_deref().unwrap_or("unknown")
        )
    })
}

/// The latest figures of a source, for the cards above the charts.
pub(crate) fn summary(sample: &Sample) -> Vec<(&'static str, String)> {
    let bytes = |v: Option<i64>| v.map_or_else(|| "–".to_owned(), |b| format::bytes(b.max(0) as u64));
    vec![
        ("allocated", bytes(sample.allocated)),
        ("reserved", bytes(sample.reserved)),
        ("fragmentation", sample.fragmentation_pct().map_or_else(|| "–".to_owned(), |p| format!("{p:.1}%"))),
        ("NVML (process)", bytes(sample.nvml_process_used)),
        ("outside the caching allocator", bytes(sample.outside_allocator())),
        ("capacity", bytes(sample.capacity)),
        ("device", format!("cuda:{}", sample.device)),
    ]
}

#[cfg(target_arch = "wasm32")]
pub(crate) use page::{LiveListPage, LiveSourcePage};

#[cfg(target_arch = "wasm32")]
#[allow(unreachable_pub)]
mod page {
    use std::time::Duration;

    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use leptos_router::hooks::use_params_map;

    use super::{history_note, merge, summary};
    use crate::core::format;
    use crate::core::live_chart::{Chart, draw};
    use crate::core::model::live::{LiveList, LiveRead, Marker, NvmlDevice, Sample};
    use crate::infra::{api, canvas, clock};

    /// How often the page asks for new samples.
    const POLL: Duration = Duration::from_secs(2);

    /// `/live`: every source, refreshed while the page is open.
    #[component]
    pub fn LiveListPage() -> impl IntoView {
        let list = RwSignal::new(None::<Result<LiveList, String>>);
        spawn_local(async move {
            loop {
                let answer = api::live_sources().await.map_err(|e| e.to_string());
                if list.try_set(Some(answer)).is_none() && list.try_get_untracked().is_none() {
                    break;
                }
                clock::sleep(POLL).await;
            }
        });
        view! {
            <section class="live">
                <h1>"Live"</h1>
                <p class="hint">"Processes run under " <code>"vramscope agent"</code> ", newest first."</p>
                {move || match list.get() {
                    None => view! { <p>"Loading…"</p> }.into_any(),
                    Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                    Some(Ok(list)) if list.sources.is_empty() => view! {
                        <p>"No agent has sent telemetry yet: " <code>"vramscope agent --server URL -- python train.py"</code></p>
                    }.into_any(),
                    Some(Ok(list)) => view! {
                        <table class="live-sources">
                            <thead><tr><th>"job"</th><th>"host"</th><th>"rank"</th><th>"pid"</th><th>"last sample"</th><th>"agent"</th></tr></thead>
                            <tbody>
                                {list.sources.into_iter().map(|s| {
                                    let href = format!("/live/{}", s.source);
                                    let rank = match (s.rank, s.world_size) {
                                        (Some(r), Some(w)) => format!("{r} of {w}"),
                                        (Some(r), None) => r.to_string(),
                                        _ => "–".to_owned(),
                                    };
                                    view! {
                                        <tr class="live-source">
                                            <td><a href=href>{s.job}</a></td>
                                            <td>{s.host}</td>
                                            <td>{rank}</td>
                                            <td>{s.pid}</td>
                                            <td>{clock::time_of_day(s.last_ms)}</td>
                                            <td>{if s.connected { "connected" } else { "gone" }}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        {list.hosts.into_iter().map(|h| view! {
                            <h2>"NVML on " {h.host.clone()}</h2>
                            <NvmlTable devices=h.devices/>
                        }).collect_view()}
                    }.into_any(),
                }}
            </section>
        }
    }

    #[component]
    fn NvmlTable(devices: Vec<NvmlDevice>) -> impl IntoView {
        view! {
            <table class="nvml">
                <thead><tr><th>"device"</th><th>"used / total"</th><th>"processes (pid: used)"</th></tr></thead>
                <tbody>
                    {devices.into_iter().map(|d| {
                        let processes = d.processes.iter().map(|p| {
                            format!("{}: {}", p.pid, p.used.map_or_else(|| "?".to_owned(), |u| format::bytes(u.max(0) as u64)))
                        }).collect::<Vec<_>>().join(", ");
                        view! {
                            <tr class="nvml-device">
                                <td>{format!("{} {}", d.index, d.name)}</td>
                                <td>{format!("{} / {}", format::bytes(d.used.max(0) as u64), format::bytes(d.total.max(0) as u64))}</td>
                                <td class="nvml-processes">{processes}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        }
    }

    /// `/live/{source}`: one process's charts.
    #[component]
    pub fn LiveSourcePage() -> impl IntoView {
        let params = use_params_map();
        let source = Memo::new(move |_| params.read().get("source").unwrap_or_default());
        move || {
            let source = source.get();
            view! { <LiveSourceView source=source/> }
        }
    }

    #[component]
    fn LiveSourceView(source: String) -> impl IntoView {
        let samples = RwSignal::new(Vec::<Sample>::new());
        let latest = RwSignal::new(None::<LiveRead>);
        let error = RwSignal::new(None::<String>);
        let notice = RwSignal::new(None::<String>);
        let poll_source = source.clone();
        spawn_local(async move {
            loop {
                let since = samples.try_with_untracked(|s| s.last().map(|s| s.t_ms));
                let Some(since) = since else { break };
                match api::live_samples(&poll_source, since).await {
                    Ok(mut read) => {
                        let new = std::mem::take(&mut read.samples);
                        if samples.try_update(|s| merge(s, new)).is_none() {
                            break;
                        }
                        latest.set(Some(read));
                        error.set(None);
                    }
                    Err(e) => {
                        if error.try_set(Some(e.to_string())).is_none() && error.try_get_untracked().is_none() {
                            break;
                        }
                    }
                }
                clock::sleep(POLL).await;
            }
        });
        let capture = {
            let source = source.clone();
            move |all: bool| {
                let source = source.clone();
                spawn_local(async move {
                    let text = match api::capture(&source, all).await {
                        Ok(()) => "Asked the agent for a snapshot; it appears below once uploaded.".to_owned(),
                        // No HTTP answer at all.
                        Err(e) if e.status == 0 => format!("Could not reach the server: {e}"),
                        Err(e) => format!("The server refused: {e}"),
                    };
                    notice.set(Some(text));
                });
            }
        };
        let capture_all = capture.clone();
        let markers = Memo::new(move |_| latest.with(|l| l.as_ref().map(|l| l.snapshots.clone()).unwrap_or_default()));
        view! {
            <section class="live">
                <p><a href="/live">"← all live sources"</a></p>
                <h1 class="live-title">{source.clone()}</h1>
                {move || error.get().map(|e| view! { <p class="error">{e}</p> })}
                {move || notice.get().map(|n| view! { <p class="notice">{n}</p> })}
                <div class="live-actions">
                    <button class="capture-now" on:click=move |_| capture(false)>"Capture now"</button>
                    <button class="capture-all" on:click=move |_| capture_all(true)>"Capture all ranks"</button>
                    {move || latest.get().map(|l| view! {
                        <span class="hint">{if l.source.connected { "agent connected" } else { "agent not connected" }}</span>
                    })}
                </div>
                {move || latest.get().and_then(|l| history_note(&l.source)).map(|note| view! {
                    <p class="notice no-history" id="no-history">{note}</p>
                })}
                <div class="cards live-cards">
                    {move || samples.with(|s| s.last().map(summary)).unwrap_or_default().into_iter().map(|(k, v)| view! {
                        <div class="card"><div class="card-label">{k}</div><div class="card-value">{v}</div></div>
                    }).collect_view()}
                </div>
                <LiveChart chart=Chart::Memory samples=samples markers=markers/>
                <LiveChart chart=Chart::Fragmentation samples=samples markers=markers/>
                <h2>"Snapshots"</h2>
                <ul class="live-snapshots">
                    {move || markers.get().into_iter().rev().map(|m: Marker| {
                        let href = format!("/snapshots/{}", m.id);
                        view! { <li><a href=href>{m.name}</a> " · " {m.trigger.as_str()} " · " {clock::time_of_day(m.uploaded_at_ms)}</li> }
                    }).collect_view()}
                </ul>
                {move || latest.get().filter(|l| !l.devices.is_empty()).map(|l| view! {
                    <h2>"NVML"</h2>
                    <NvmlTable devices=l.devices/>
                })}
            </section>
        }
    }

    #[component]
    fn LiveChart(chart: Chart, samples: RwSignal<Vec<Sample>>, markers: Memo<Vec<Marker>>) -> impl IntoView {
        let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
        let failure = RwSignal::new(None::<String>);
        Effect::new(move |_| {
            let Some(canvas) = canvas_ref.get() else { return };
            // The frame's width: plot_on fixes the canvas's own to the last draw's.
            let width = canvas.parent_element().map_or(canvas.client_width(), |p| p.client_width()).max(300) as u32;
            let drawn = canvas::plot_on(&canvas, (width, 260), |root| {
                samples.with(|s| markers.with(|m| draw(root, chart, s, m)))
            });
            if let Err(e) = drawn {
                failure.set(Some(e));
            }
        });
        view! {
            <div class="live-chart">
                <canvas node_ref=canvas_ref class=format!("live-{chart:?}").to_lowercase() style="width:100%;height:260px"></canvas>
                {move || failure.get().map(|e| view! { <p class="error">{e}</p> })}
            </div>
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::live_chart::tests::sample;

    #[test]
    fn fragmentation_is_the_unallocated_share_of_reserved() {
        assert_eq!(sample(0, 75, 100).fragmentation_pct(), Some(25.0));
        assert_eq!(sample(0, 0, 0).fragmentation_pct(), None);
    }

    #[test]
    fn merging_skips_repeats_and_keeps_the_newest() {
        let mut samples = vec![sample(1, 1, 2), sample(2, 1, 2)];
        merge(&mut samples, vec![sample(2, 1, 2), sample(3, 1, 2)]);
        assert_eq!(samples.iter().map(|s| s.t_ms).collect::<Vec<_>>(), [1, 2, 3]);
        merge(&mut samples, (4..(KEEP as i64 + 10)).map(|t| sample(t, 1, 2)).collect());
        assert_eq!(samples.len(), KEEP);
        assert_eq!(samples.last().map(|s| s.t_ms), Some(KEEP as i64 + 9));
    }

    #[test]
    fn the_summary_counts_memory_outside_the_allocator() {
        // 64 MiB reserved, NVML sees 600 MiB for the process: 536 MiB outside.
        let s = Sample { nvml_process_used: Some(600 << 20), ..sample(0, 32 << 20, 64 << 20) };
        assert_eq!(s.outside_allocator(), Some(536 << 20));
        assert!(summary(&s).contains(&("outside the caching allocator", "536 MiB".to_owned())));
    }
}
