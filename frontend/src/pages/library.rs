//! `/`: the snapshot library. Lists what the server holds (newest first,
//! a page at a time), filters it by text, job, host and tag, uploads files
//! dropped on the page or picked, and renames, tags and deletes. It also
//! opens a file without uploading it ([`crate::infra::local`]): read in a Web
//! Worker in this tab, shown on the same snapshot page.

use std::collections::BTreeSet;
use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_navigate;
use web_sys::{DragEvent, File, FileList, HtmlInputElement};

use crate::components::notice::{Notice, NoticeBar};
use crate::core::format;
use crate::core::model::{SnapshotMeta, SnapshotStatus};
use crate::infra::api::{self, ListQuery};
use crate::infra::clock;
use crate::infra::latest::latest;
use crate::infra::local::{self, OpenProgress};

/// How long the filters wait for typing to pause before asking the server.
const FILTER_DEBOUNCE: Duration = Duration::from_millis(250);
/// How often the list is refreshed while a snapshot is being parsed.
const PARSING_POLL: Duration = Duration::from_secs(2);

/// Values seen in listed snapshots, offered as suggestions in the filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Known {
    jobs: BTreeSet<String>,
    hosts: BTreeSet<String>,
    tags: BTreeSet<String>,
}

impl Known {
    fn add(&mut self, items: &[SnapshotMeta]) {
        for s in items {
            self.jobs.extend(s.job.clone());
            self.hosts.extend(s.host.clone());
            self.tags.extend(s.tags.iter().cloned());
        }
    }
}

/// An upload in flight.
#[derive(Clone, Debug, PartialEq)]
struct Progress {
    name: String,
    sent: f64,
    total: f64,
}

/// The library page.
#[component]
pub(crate) fn Library() -> impl IntoView {
    let query = RwSignal::new(ListQuery::default());
    let items = RwSignal::new(Vec::<SnapshotMeta>::new());
    let next = RwSignal::new(None::<String>);
    let loaded = RwSignal::new(false);
    let notice = RwSignal::new(None::<Notice>);
    let known = RwSignal::new(Known::default());
    // Answers to older requests are dropped: only the newest list counts.
    let lists = latest();

    let load = move |append: bool| {
        let q = query.get_untracked();
        let cursor = if append { next.get_untracked() } else { None };
        lists.run(async move { api::list(&q, cursor.as_deref()).await }, move |result| match result {
            Ok(page) => {
                known.update(|k| k.add(&page.items));
                if append {
                    items.update(|v| v.extend(page.items));
                } else {
                    items.set(page.items);
                }
                next.set(page.next_cursor);
                loaded.set(true);
            }
            Err(e) => notice.set(Some(Notice::error(e))),
        });
    };

    // Filters: the first list at once, later ones once typing pauses (the
    // last keystroke's timer is the one that loads).
    let edits = latest();
    Effect::new(move |first: Option<()>| {
        query.track();
        if first.is_none() {
            load(false);
            return;
        }
        let edit = edits.supersede();
        let _ = set_timeout_with_handle(
            move || {
                if edit.is_current() {
                    load(false);
                }
            },
            FILTER_DEBOUNCE,
        );
    });
    // While the server parses an upload, look again now and then.
    Effect::new(move |_| {
        if items.with(|v| v.iter().any(|s| s.status == SnapshotStatus::Parsing)) {
            // Unless another list was asked for meanwhile.
            let asked = lists.current();
            let _ = set_timeout_with_handle(
                move || {
                    if asked.is_current() {
                        load(false);
                    }
                },
                PARSING_POLL,
            );
        }
    });

    let progress = RwSignal::new(None::<Progress>);
    let upload = move |files: Vec<File>| {
        if files.is_empty() {
            return;
        }
        spawn_local(async move {
            for file in files {
                let name = file.name();
                progress.set(Some(Progress { name: name.clone(), sent: 0.0, total: file.size() }));
                let shown = name.clone();
                let answer = api::upload(&file, move |sent, total| {
                    progress.set(Some(Progress { name: shown.clone(), sent, total }));
                })
                .await;
                progress.set(None);
                notice.set(Some(match answer {
                    Ok(a) if a.deduplicated => Notice::info(format!("{name}: the same file was uploaded before")),
                    Ok(a) if a.status == SnapshotStatus::Parsing => {
                        Notice::info(format!("uploaded {name}; the server is parsing it"))
                    }
                    Ok(_) => Notice::info(format!("uploaded {name}")),
                    Err(e) => Notice::error(e),
                }));
            }
            load(false);
        });
    };

    let dragging = RwSignal::new(false);
    let on_drop = move |ev: DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        upload(files_of(ev.data_transfer().and_then(|d| d.files())));
    };
    let on_pick = move |ev: leptos::ev::Event| {
        let input: HtmlInputElement = event_target(&ev);
        upload(files_of(input.files()));
        // Picking the same file again must fire `change` again.
        input.set_value("");
    };

    // Files opened here, not uploaded: read in a worker, then shown at
    // /snapshots/local-<n>.
    let navigate = StoredValue::new_local(use_navigate());
    let opening = RwSignal::new(None::<(String, f64, OpenProgress)>);
    let open_local = move |files: Vec<File>| {
        let Some(file) = files.into_iter().next() else { return };
        spawn_local(async move {
            let name = file.name();
            let size = file.size();
            opening.set(Some((name.clone(), size, OpenProgress::Reading)));
            let shown = name.clone();
            let answer = local::open(&file, move |p| opening.set(Some((shown.clone(), size, p)))).await;
            opening.set(None);
            match answer {
                Ok(id) => navigate.with_value(|go| go(&format!("/snapshots/{id}"), Default::default())),
                Err(e) => notice.set(Some(Notice::error(format!("opening {name}: {e}")))),
            }
        });
    };
    let local_dragging = RwSignal::new(false);
    let on_local_drop = move |ev: DragEvent| {
        ev.prevent_default();
        ev.stop_propagation();
        local_dragging.set(false);
        open_local(files_of(ev.data_transfer().and_then(|d| d.files())));
    };
    let on_local_pick = move |ev: leptos::ev::Event| {
        let input: HtmlInputElement = event_target(&ev);
        open_local(files_of(input.files()));
        input.set_value("");
    };

    let filter = move |label: &'static str, field: fn(&mut ListQuery) -> &mut String, list: &'static str| {
        view! {
            <label class="filter">
                <span>{label}</span>
                <input
                    id=format!("filter-{}", label.to_ascii_lowercase())
                    type="search"
                    list=list
                    prop:value=move || {
                        let mut q = query.get();
                        field(&mut q).clone()
                    }
                    on:input=move |ev| query.update(|q| *field(q) = event_target_value(&ev))
                />
            </label>
        }
    };
    let datalist = move |id: &'static str, pick: fn(&Known) -> Vec<String>| {
        view! {
            <datalist id=id>
                {move || known.with(pick).into_iter().map(|v| view! { <option value=v></option> }).collect_view()}
            </datalist>
        }
    };

    view! {
        <section class="library">
            <div
                class="dropzone"
                class:over=dragging
                on:dragover=move |ev: DragEvent| {
                    ev.prevent_default();
                    dragging.set(true);
                }
                on:dragleave=move |_| dragging.set(false)
                on:drop=on_drop
            >
                <strong>"Drop snapshots here"</strong>
                " or "
                <label class="button">
                    "choose files"
                    <input id="file-input" type="file" multiple on:change=on_pick/>
                </label>
                <span class="hint">
                    " — the pickles that torch.cuda.memory._dump_snapshot() writes (plain, gzip or zstd)"
                </span>
                {move || {
                    progress
                        .get()
                        .map(|p| {
                            let fraction = if p.total > 0.0 { p.sent / p.total } else { 0.0 };
                            view! {
                                <div class="progress">
                                    <progress max="1" prop:value=fraction></progress>
                                    <span>
                                        {format!(
                                            "{}: {:.0}% of {}",
                                            p.name,
                                            fraction * 100.0,
                                            format::bytes(p.total as u64),
                                        )}
                                    </span>
                                </div>
                            }
                        })
                }}
            </div>
            <div
                class="dropzone local"
                class:over=local_dragging
                on:dragover=move |ev: DragEvent| {
                    ev.prevent_default();
                    local_dragging.set(true);
                }
                on:dragleave=move |_| local_dragging.set(false)
                on:drop=on_local_drop
            >
                <label class="button">
                    "Open a local file (not uploaded)"
                    <input id="local-file-input" type="file" on:change=on_local_pick/>
                </label>
                <span class="hint">
                    " — or drop it here: it is read in this browser tab and never leaves this machine"
                </span>
                {move || opening.get().map(|(name, size, p)| {
                    let (fraction, text) = match p {
                        OpenProgress::Reading => (None, format!("{name}: reading {}", format::bytes(size as u64))),
                        OpenProgress::Parsing(read) => {
                            let f = if size > 0.0 { (read / size).min(1.0) } else { 0.0 };
                            (Some(f), format!("{name}: parsing, {:.0}% of {}", f * 100.0, format::bytes(size as u64)))
                        }
                        OpenProgress::Indexing => (Some(1.0), format!("{name}: building the timeline")),
                    };
                    view! {
                        <div class="progress" id="local-progress">
                            {match fraction {
                                Some(f) => view! { <progress max="1" prop:value=f></progress> }.into_any(),
                                None => view! { <progress></progress> }.into_any(),
                            }}
                            <span>{text}</span>
                        </div>
                    }
                })}
            </div>
            <NoticeBar notice=notice/>
            <div class="filters">
                {filter("Search", |q| &mut q.q, "")}
                {filter("Job", |q| &mut q.job, "known-jobs")}
                {filter("Host", |q| &mut q.host, "known-hosts")}
                {filter("Tag", |q| &mut q.tag, "known-tags")}
                {datalist("known-jobs", |k| k.jobs.iter().cloned().collect())}
                {datalist("known-hosts", |k| k.hosts.iter().cloned().collect())}
                {datalist("known-tags", |k| k.tags.iter().cloned().collect())}
            </div>
            <table class="snapshots">
                <thead>
                    <tr>
                        <th>"Name"</th>
                        <th>"Job"</th>
                        <th>"Host"</th>
                        <th class="num">"Rank"</th>
                        <th>"Trigger"</th>
                        <th>"Status"</th>
                        <th class="num">"Size"</th>
                        <th>"Uploaded"</th>
                        <th>"Tags"</th>
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    <For
                        each=move || items.get()
                        key=|s| (s.id.clone(), s.name.clone(), s.tags.clone(), s.status, s.parsed_bytes)
                        children=move |s| view! { <Row item=s items=items notice=notice/> }
                    />
                </tbody>
            </table>
            <Show when=move || loaded.get() && items.with(Vec::is_empty)>
                <p class="empty" id="empty">
                    {move || {
                        if query.with(|q| *q == ListQuery::default()) {
                            "No snapshots yet: drop one above, or send one with curl --data-binary @snapshot.pickle http://HOST/api/v1/snapshots."
                        } else {
                            "No snapshot matches these filters."
                        }
                    }}
                </p>
            </Show>
            <Show when=move || next.with(Option::is_some)>
                <button class="more" on:click=move |_| load(true)>"Load more"</button>
            </Show>
        </section>
    }
}

/// The files of a drop or a file input.
fn files_of(list: Option<FileList>) -> Vec<File> {
    let Some(list) = list else { return Vec::new() };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

/// One snapshot of the list, with its rename, tag and delete controls.
#[component]
fn Row(item: SnapshotMeta, items: RwSignal<Vec<SnapshotMeta>>, notice: RwSignal<Option<Notice>>) -> impl IntoView {
    let id = StoredValue::new(item.id.clone());
    let tags = StoredValue::new(item.tags.clone());
    let editing = RwSignal::new(false);
    let draft = RwSignal::new(item.name.clone());
    let new_tag = RwSignal::new(String::new());

    let replace = move |rec: SnapshotMeta| {
        items.update(|v| {
            if let Some(slot) = v.iter_mut().find(|s| s.id == rec.id) {
                *slot = rec;
            }
        })
    };
    let save = move |name: Option<String>, tags: Option<Vec<String>>| {
        spawn_local(async move {
            match api::update(&id.get_value(), name.as_deref(), tags.as_deref()).await {
                Ok(rec) => replace(rec),
                Err(e) => notice.set(Some(Notice::error(e))),
            }
        });
    };
    let rename = move || {
        let name = draft.get_untracked();
        if name.trim().is_empty() {
            notice.set(Some(Notice::error("A name cannot be empty.")));
            return;
        }
        editing.set(false);
        save(Some(name.trim().to_owned()), None);
    };
    let add_tag = move || {
        let tag = new_tag.get_untracked().trim().to_owned();
        if tag.is_empty() {
            return;
        }
        let mut all = tags.get_value();
        if !all.contains(&tag) {
            all.push(tag);
            save(None, Some(all));
        }
        new_tag.set(String::new());
    };
    let remove_tag = move |tag: String| {
        let all: Vec<String> = tags.get_value().into_iter().filter(|t| *t != tag).collect();
        save(None, Some(all));
    };
    let name_for_confirm = item.name.clone();
    let delete = move |_| {
        let asked = window()
            .confirm_with_message(&format!("Delete {name_for_confirm}? This cannot be undone."))
            .unwrap_or(false);
        if !asked {
            return;
        }
        spawn_local(async move {
            let id = id.get_value();
            match api::delete(&id).await {
                Ok(()) => items.update(|v| v.retain(|s| s.id != id)),
                Err(e) => notice.set(Some(Notice::error(e))),
            }
        });
    };

    let href = format!("/snapshots/{}", item.id);
    let status_title = item.error.clone().unwrap_or_default();
    let status_class = format!("status {}", item.status);
    view! {
        <tr>
            <td class="name">
                <Show
                    when=move || editing.get()
                    fallback={
                        let name = item.name.clone();
                        let href = href.clone();
                        move || {
                            view! {
                                <a href=href.clone()>{name.clone()}</a>
                                <button class="link" title="Rename" on:click=move |_| editing.set(true)>
                                    "✎"
                                </button>
                            }
                        }
                    }
                >
                    <input
                        class="rename"
                        prop:value=draft
                        on:input=move |ev| draft.set(event_target_value(&ev))
                        on:keydown=move |ev| match ev.key().as_str() {
                            "Enter" => rename(),
                            "Escape" => editing.set(false),
                            _ => {}
                        }
                    />
                    <button on:click=move |_| rename()>"Save"</button>
                    <button class="link" on:click=move |_| editing.set(false)>"Cancel"</button>
                </Show>
            </td>
            <td>{item.job.clone().map(|j| view! { <a class="job" href=format!("/jobs/{}", api::encode(&j))>{j.clone()}</a> })}</td>
            <td>{item.host.clone().unwrap_or_default()}</td>
            <td class="num">{item.rank.map(|r| r.to_string()).unwrap_or_default()}</td>
            <td>{item.trigger.as_str()}</td>
            <td>
                <span class=status_class title=status_title>
                    {status_text(&item)}
                </span>
            </td>
            <td class="num">{format::bytes(item.size_bytes)}</td>
            <td>{clock::date_time(item.uploaded_at_ms, "default")}</td>
            <td class="tags">
                {item
                    .tags
                    .iter()
                    .cloned()
                    .map(|t| {
                        let gone = t.clone();
                        view! {
                            <span class="tag">
                                {t}
                                <button class="link" title="Remove this tag" on:click=move |_| remove_tag(gone.clone())>
                                    "×"
                                </button>
                            </span>
                        }
                    })
                    .collect_view()}
                <input
                    class="add-tag"
                    placeholder="+ tag"
                    prop:value=new_tag
                    on:input=move |ev| new_tag.set(event_target_value(&ev))
                    on:keydown=move |ev| {
                        if ev.key() == "Enter" {
                            add_tag();
                        }
                    }
                />
            </td>
            <td>
                <button class="link danger" on:click=delete>
                    "Delete"
                </button>
            </td>
        </tr>
    }
}

/// The status cell: a parse under way says how far it is, by bytes read.
fn status_text(item: &SnapshotMeta) -> String {
    match item.parsed_bytes {
        Some(read) if item.status == SnapshotStatus::Parsing && item.size_bytes > 0 => {
            format!("parsing {}%", (read.min(item.size_bytes) * 100) / item.size_bytes)
        }
        _ => item.status.to_string(),
    }
}
