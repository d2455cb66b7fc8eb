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
//! The data model and the drawing compile natively and are unit-tested; the
//! components need a browser.
// The model is read only by the wasm32 components (and the tests).
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::core::format;
use crate::core::model::live::{Marker, Sample};
use crate::core::palette;

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

// The palette's colours in plotters' form (`palette` defines them).
const ALLOCATED: RGBColor = palette::ALLOCATED.rgb();
const RESERVED: RGBColor = palette::RESERVED.rgb();
const NVML: RGBColor = palette::NVML.rgb();
const CAPACITY: RGBColor = palette::CAPACITY.rgb();
const FRAGMENTATION: RGBColor = palette::FRAGMENTATION.rgb();
const MARKER: RGBColor = palette::SNAPSHOT_MARKER.rgb();
const OUTSIDE: RGBColor = palette::OUTSIDE_ALLOCATOR.rgb();

/// The band of memory outside the caching allocator: for each sample with
/// both figures, (seconds before the newest, reserved GiB, NVML GiB).
pub(crate) fn outside_band(samples: &[Sample]) -> Vec<(f64, f64, f64)> {
    let Some(newest) = samples.last().map(|s| s.t_ms) else { return Vec::new() };
    let gib = |b: i64| b as f64 / (1u64 << 30) as f64;
    samples
        .iter()
        .filter_map(|s| {
            let (reserved, used) = (s.reserved?, s.nvml_process_used?);
            Some(((s.t_ms - newest) as f64 / 1000.0, gib(reserved), gib(used.max(reserved))))
        })
        .collect()
}

/// Which chart to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chart {
    /// Bytes: allocated, reserved, NVML process used, capacity.
    Memory,
    /// Percent of reserved not allocated.
    Fragmentation,
}

/// A chart's line: its name, its colour, its points.
pub(crate) type Line = (&'static str, RGBColor, Vec<(f64, f64)>);

/// The lines of `chart`: (name, colour, points as (seconds before the
/// newest sample, value)).
pub(crate) fn lines(chart: Chart, samples: &[Sample]) -> Vec<Line> {
    let Some(newest) = samples.last().map(|s| s.t_ms) else { return Vec::new() };
    let x = |s: &Sample| (s.t_ms - newest) as f64 / 1000.0;
    let line = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples.iter().filter_map(|s| f(s).map(|v| (x(s), v))).collect()
    };
    let gib = |v: Option<i64>| v.map(|b| b as f64 / (1u64 << 30) as f64);
    let all = match chart {
        Chart::Memory => vec![
            ("reserved", RESERVED, line(&|s| gib(s.reserved))),
            ("allocated", ALLOCATED, line(&|s| gib(s.allocated))),
            ("NVML (process)", NVML, line(&|s| gib(s.nvml_process_used))),
            ("capacity", CAPACITY, line(&|s| gib(s.capacity))),
        ],
        Chart::Fragmentation => vec![("fragmentation", FRAGMENTATION, line(&|s| s.fragmentation_pct()))],
    };
    all.into_iter().filter(|(_, _, points)| !points.is_empty()).collect()
}

/// Draws `chart` of `samples` with a vertical line at each marker.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: Chart,
    samples: &[Sample],
    markers: &[Marker],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the {chart:?} chart failed: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let series = lines(chart, samples);
    let (Some(first), Some(newest)) = (samples.first(), samples.last()) else {
        return Ok(());
    };
    let x0 = ((first.t_ms - newest.t_ms) as f64 / 1000.0).min(-1.0);
    let y_max = series.iter().flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y)).fold(0.0_f64, f64::max);
    let y_max = match chart {
        Chart::Memory => (y_max * 1.1).max(0.001),
        Chart::Fragmentation => 100.0,
    };
    let y_label = match chart {
        Chart::Memory => "GiB",
        Chart::Fragmentation => "% of reserved",
    };
    let mut ctx = ChartBuilder::on(root)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(56)
        .build_cartesian_2d(x0..0.0, 0.0..y_max)
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc("seconds before the latest sample")
        .y_desc(y_label)
        .x_labels(8)
        .y_labels(6)
        .draw()
        .map_err(err)?;
    for marker in markers {
        let x = (marker.uploaded_at_ms - newest.t_ms) as f64 / 1000.0;
        if x >= x0 && x <= 0.0 {
            ctx.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, y_max)], MARKER.stroke_width(2))))
                .map_err(err)?;
        }
    }
    let band = if chart == Chart::Memory { outside_band(samples) } else { Vec::new() };
    if band.len() >= 2 {
        // Upper edge forward, lower edge back: one polygon.
        let outline: Vec<(f64, f64)> =
            band.iter().map(|(x, _, up)| (*x, *up)).chain(band.iter().rev().map(|(x, low, _)| (*x, *low))).collect();
        ctx.draw_series(std::iter::once(Polygon::new(outline, OUTSIDE.mix(0.6).filled())))
            .map_err(err)?
            .label("outside the caching allocator")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], OUTSIDE.mix(0.6).filled()));
    }
    for (name, colour, points) in series {
        ctx.draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    ctx.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    Ok(())
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
    use plotters::prelude::IntoDrawingArea;
    use plotters_canvas::CanvasBackend;

    use super::{Chart, draw, history_note, merge, summary};
    use crate::core::format;
    use crate::core::model::live::{LiveList, LiveRead, Marker, NvmlDevice, Sample};
    use crate::infra::{api, clock};

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
            let width = canvas.client_width().max(300) as u32;
            canvas.set_width(width);
            canvas.set_height(260);
            let Some(backend) = CanvasBackend::with_canvas_object(canvas.clone()) else {
                failure.set(Some("this browser gives no 2D drawing context for the canvas".to_owned()));
                return;
            };
            let root = backend.into_drawing_area();
            let drawn = samples.with(|s| markers.with(|m| draw(&root, chart, s, m)));
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
    use vramscope_plot::recorder::Recorder;

    fn sample(t_ms: i64, allocated: i64, reserved: i64) -> Sample {
        Sample {
            t_ms,
            allocated: Some(allocated),
            reserved: Some(reserved),
            capacity: Some(1 << 30),
            ..Sample::default()
        }
    }

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
    fn lines_are_in_seconds_before_the_newest_and_skip_missing_figures() {
        let samples = vec![sample(1000, 1 << 29, 1 << 30), sample(3000, 1 << 30, 1 << 30)];
        let memory = lines(Chart::Memory, &samples);
        let names: Vec<&str> = memory.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, ["reserved", "allocated", "capacity"], "no NVML figures, no NVML line");
        assert_eq!(memory[1].2, vec![(-2.0, 0.5), (0.0, 1.0)]);
        let fragmentation = lines(Chart::Fragmentation, &samples);
        assert_eq!(fragmentation[0].2, vec![(-2.0, 50.0), (0.0, 0.0)]);
    }

    #[test]
    fn charts_draw_each_line_and_the_snapshot_markers() {
        let samples: Vec<Sample> = (0..50).map(|i| sample(i * 1000, i << 20, 64 << 20)).collect();
        let marker = |t| Marker {
            id: "x".to_owned(),
            name: "n".to_owned(),
            trigger: crate::core::model::Trigger::Threshold,
            uploaded_at_ms: t,
        };
        let (recorder, log) = Recorder::new((800, 260));
        draw(&recorder.into_drawing_area(), Chart::Memory, &samples, &[marker(25_000), marker(99_000)])
            .expect("memory chart");
        // Each path drawn: its colour and its number of points.
        let drawn: Vec<(RGBColor, usize)> = log.borrow().paths.iter().map(|(c, p, _)| (*c, p.len())).collect();
        // One marker inside the window (the other is after the newest sample).
        assert_eq!(drawn.iter().filter(|(c, n)| *c == MARKER && *n == 2).count(), 1);
        for colour in [RESERVED, ALLOCATED, CAPACITY] {
            assert!(drawn.iter().any(|(c, n)| *c == colour && *n == 50), "{colour:?} line of 50 points");
        }
        assert!(!drawn.iter().any(|(c, n)| *c == NVML && *n == 50), "no NVML figures, no NVML line");
        assert!(log.borrow().polygons.is_empty(), "no NVML figures, no band");
    }

    #[test]
    fn memory_outside_the_allocator_is_a_band_between_reserved_and_nvml() {
        // 64 MiB reserved, NVML sees 600 MiB for the process: 536 MiB outside.
        let samples: Vec<Sample> = (0..10)
            .map(|i| Sample { nvml_process_used: Some(600 << 20), ..sample(i * 1000, 32 << 20, 64 << 20) })
            .collect();
        assert_eq!(samples[0].outside_allocator(), Some(536 << 20));
        assert!(summary(&samples[9]).contains(&("outside the caching allocator", "536 MiB".to_owned())));
        let band = outside_band(&samples);
        assert_eq!(band.len(), 10);
        assert_eq!(band[9], (0.0, 0.0625, 600.0 / 1024.0));
        let (recorder, log) = Recorder::new((800, 260));
        draw(&recorder.into_drawing_area(), Chart::Memory, &samples, &[]).expect("memory chart");
        let polygons = &log.borrow().polygons;
        // The band, and its swatch in the legend.
        assert!(polygons.iter().any(|(_, points)| points.len() == 20), "one polygon over the 10 samples, both edges");
    }
}
