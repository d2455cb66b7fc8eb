//! `/`: the snapshot library. Lists what the server holds (newest first,
//! a page at a time), filters it by text, job, host and tag, uploads files
//! dropped on the page or picked, and renames, tags and deletes. It also
//! opens a file without uploading it ([`crate::infra::local`]): read in a Web
//! Worker in this tab, shown on the same snapshot page.

use std::collections::BTreeSet;

use vramscope_shared::api::{SnapshotMeta, SnapshotStatus, UploadAnswer};

use crate::core::format;

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
    /// Which file of how many, when several were dropped together.
    of: Option<(usize, usize)>,
}

impl Progress {
    /// How far it is (0 to 1), and in words.
    fn said(&self) -> (f64, String) {
        let fraction = if self.total > 0.0 { self.sent / self.total } else { 0.0 };
        let which = self.of.map(|(k, n)| format!(" ({k} of {n})")).unwrap_or_default();
        let text = format!("{}{which}: {:.0}% of {}", self.name, fraction * 100.0, format::bytes(self.total as u64));
        (fraction, text)
    }
}

/// What became of each file of an upload so far: its name and the
/// server's answer, or the error in words.
type Outcomes = [(String, Result<UploadAnswer, String>)];

/// The notice of an upload of `total` files, `done` of them answered:
/// whether it reports a failure, and the sentence. One file reads as
/// before ("uploaded a.pickle"); several name every file stored ("3 files
/// stored: a, b, c"), "1 of 3" while the others are on their way, and each
/// failure with its reason.
fn uploads_said(done: &Outcomes, total: usize) -> (bool, String) {
    if let ([(name, outcome)], 1) = (done, total) {
        return match outcome {
            Ok(a) => (false, uploaded(name, a)),
            Err(e) => (true, e.clone()),
        };
    }
    let stored: Vec<String> = done
        .iter()
        .filter_map(|(name, outcome)| {
            let a = outcome.as_ref().ok()?;
            Some(if a.deduplicated {
                format!("{name} (uploaded before)")
            } else if a.status == SnapshotStatus::Parsing {
                format!("{name} (being parsed)")
            } else {
                name.clone()
            })
        })
        .collect();
    let failed: Vec<&String> = done.iter().filter_map(|(_, outcome)| outcome.as_ref().err()).collect();
    let head = if stored.len() == total {
        format!("{total} files stored")
    } else {
        format!("{} of {total} files stored", stored.len())
    };
    let mut text = if stored.is_empty() { head } else { format!("{head}: {}", stored.join(", ")) };
    for e in &failed {
        text.push_str("; ");
        text.push_str(e);
    }
    (!failed.is_empty(), text)
}

/// What the notice says of the upload of `name` the server took.
fn uploaded(name: &str, answer: &UploadAnswer) -> String {
    if answer.deduplicated {
        format!("{name}: the same file was uploaded before")
    } else if answer.status == SnapshotStatus::Parsing {
        format!("uploaded {name}; the server is parsing it")
    } else {
        format!("uploaded {name}")
    }
}

/// How far the page's reader is in `name` (`size` bytes) after `read`
/// bytes (0 to 1), and in words.
fn parsing(name: &str, read: f64, size: f64) -> (f64, String) {
    let f = if size > 0.0 { (read / size).min(1.0) } else { 0.0 };
    (f, format!("{name}: parsing, {:.0}% of {}", f * 100.0, format::bytes(size as u64)))
}

/// `tags` with `tag` (trimmed) added; `None` when it is empty or there.
fn with_tag(tags: &[String], tag: &str) -> Option<Vec<String>> {
    let tag = tag.trim();
    if tag.is_empty() || tags.iter().any(|t| t == tag) {
        return None;
    }
    let mut all = tags.to_vec();
    all.push(tag.to_owned());
    Some(all)
}

/// `tags` without `tag`.
fn without_tag(tags: &[String], tag: &str) -> Vec<String> {
    tags.iter().filter(|t| *t != tag).cloned().collect()
}

/// A name typed in the rename box, trimmed; an empty one is refused.
fn new_name(draft: &str) -> Result<String, &'static str> {
    match draft.trim() {
        "" => Err("A name cannot be empty."),
        name => Ok(name.to_owned()),
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

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::Library;

#[cfg(target_arch = "wasm32")]
mod ui {
    use std::time::Duration;

    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use leptos_router::hooks::use_navigate;
    use web_sys::{DragEvent, File, FileList, HtmlInputElement};

    use vramscope_shared::api::UploadAnswer;

    use super::{Known, Progress, new_name, parsing, status_text, uploads_said, with_tag, without_tag};
    use crate::components::notice::{Notice, NoticeBar};
    use crate::core::format;
    use crate::core::model::{Page, SnapshotMeta, SnapshotStatus};
    use crate::infra::api::{self, ListQuery};
    use crate::infra::clock;
    use crate::infra::latest::{Latest, latest};
    use crate::infra::local::{self, OpenProgress};

    /// How long the filters wait for typing to pause before asking the server.
    const FILTER_DEBOUNCE: Duration = Duration::from_millis(250);
    /// How often the list is refreshed while a snapshot is being parsed.
    const PARSING_POLL: Duration = Duration::from_secs(2);

    /// The library page.
    #[component]
    pub(crate) fn Library() -> impl IntoView {
        let list = Listing::new();
        list.follow_filters();
        list.poll_while_parsing();
        let Listing { query, items, next, loaded, notice, .. } = list;
        let progress = RwSignal::new(None::<Progress>);
        let upload = move |files: Vec<File>| list.upload(files, progress);
        let opening = RwSignal::new(None::<(String, f64, OpenProgress)>);
        let navigate = StoredValue::new_local(use_navigate());
        // Files opened here, not uploaded: read in a worker, then shown at
        // /snapshots/local-<n>.
        let open_local = move |files: Vec<File>| {
            open_local(files, opening, notice, move |id| {
                navigate.with_value(|go| go(&format!("/snapshots/{id}"), Default::default()))
            })
        };

        view! {
            <section class="library">
                {upload_zone(upload, progress)}
                {local_zone(open_local, opening)}
                <NoticeBar notice=notice/>
                {filters(list)}
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
                    <button class="more" on:click=move |_| list.load(true)>"Load more"</button>
                </Show>
            </section>
        }
    }

    /// The list's state: the filters, the snapshots listed and the next
    /// page's cursor, the values seen, the notice.
    #[derive(Clone, Copy)]
    struct Listing {
        query: RwSignal<ListQuery>,
        items: RwSignal<Vec<SnapshotMeta>>,
        next: RwSignal<Option<String>>,
        loaded: RwSignal<bool>,
        notice: RwSignal<Option<Notice>>,
        known: RwSignal<Known>,
        /// Answers to older requests are dropped: only the newest list counts.
        lists: Latest,
    }

    impl Listing {
        fn new() -> Self {
            Listing {
                query: RwSignal::new(ListQuery::default()),
                items: RwSignal::new(Vec::new()),
                next: RwSignal::new(None),
                loaded: RwSignal::new(false),
                notice: RwSignal::new(None),
                known: RwSignal::new(Known::default()),
                lists: latest(),
            }
        }

        /// Ask for the first page (or, with `append`, the next one).
        fn load(self, append: bool) {
            let q = self.query.get_untracked();
            let cursor = if append { self.next.get_untracked() } else { None };
            self.lists
                .run(async move { api::list(&q, cursor.as_deref()).await }, move |result| self.show(result, append));
        }

        /// Ask for the first page again and wait for it: an upload of
        /// several files shows each one as soon as it is stored.
        async fn reload(self) {
            let ticket = self.lists.supersede();
            let q = self.query.get_untracked();
            let result = api::list(&q, None).await;
            if ticket.is_current() {
                self.show(result, false);
            }
        }

        /// A page of the list (after the others with `append`), or why not.
        fn show(self, result: Result<Page, api::ApiError>, append: bool) {
            let Listing { items, next, loaded, notice, known, .. } = self;
            match result {
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
            }
        }

        /// Filters: the first list at once, later ones once typing pauses
        /// (the last keystroke's timer is the one that loads).
        fn follow_filters(self) {
            let edits = latest();
            Effect::new(move |first: Option<()>| {
                self.query.track();
                if first.is_none() {
                    self.load(false);
                    return;
                }
                let edit = edits.supersede();
                let _ = set_timeout_with_handle(
                    move || {
                        if edit.is_current() {
                            self.load(false);
                        }
                    },
                    FILTER_DEBOUNCE,
                );
            });
        }

        /// While the server parses an upload, look again now and then.
        fn poll_while_parsing(self) {
            Effect::new(move |_| {
                if self.items.with(|v| v.iter().any(|s| s.status == SnapshotStatus::Parsing)) {
                    // Unless another list was asked for meanwhile.
                    let asked = self.lists.current();
                    let _ = set_timeout_with_handle(
                        move || {
                            if asked.is_current() {
                                self.load(false);
                            }
                        },
                        PARSING_POLL,
                    );
                }
            });
        }

        /// Upload `files` one after the other, showing each one's
        /// `progress`; the list is asked again as each file is stored (not
        /// once after the last), and the notice names every file.
        fn upload(self, files: Vec<File>, progress: RwSignal<Option<Progress>>) {
            if files.is_empty() {
                return;
            }
            let notice = self.notice;
            let total = files.len();
            spawn_local(async move {
                let mut done: Vec<(String, Result<UploadAnswer, String>)> = Vec::with_capacity(total);
                for (k, file) in files.into_iter().enumerate() {
                    let name = file.name();
                    let of = (total > 1).then_some((k + 1, total));
                    progress.set(Some(Progress { name: name.clone(), sent: 0.0, total: file.size(), of }));
                    let shown = name.clone();
                    let answer = api::upload(&file, move |sent, size| {
                        progress.set(Some(Progress { name: shown.clone(), sent, total: size, of }));
                    })
                    .await
                    .map_err(|e| e.to_string());
                    let stored = answer.is_ok();
                    done.push((name, answer));
                    if stored {
                        self.reload().await;
                    }
                    let (failed, text) = uploads_said(&done, total);
                    notice.set(Some(if failed { Notice::error(text) } else { Notice::info(text) }));
                }
                progress.set(None);
            });
        }
    }

    /// Open the first of `files` in the page's worker, showing its progress
    /// in `opening`; `shown(id)` once it is read.
    fn open_local(
        files: Vec<File>,
        opening: RwSignal<Option<(String, f64, OpenProgress)>>,
        notice: RwSignal<Option<Notice>>,
        shown: impl FnOnce(String) + 'static,
    ) {
        let Some(file) = files.into_iter().next() else { return };
        spawn_local(async move {
            let name = file.name();
            let size = file.size();
            opening.set(Some((name.clone(), size, OpenProgress::Reading)));
            let named = name.clone();
            let answer = local::open(&file, move |p| opening.set(Some((named.clone(), size, p)))).await;
            opening.set(None);
            match answer {
                Ok(id) => shown(id),
                Err(e) => notice.set(Some(Notice::error(format!("opening {name}: {e}")))),
            }
        });
    }

    /// The drop zone and file picker of uploads, with the upload's progress.
    fn upload_zone(upload: impl Fn(Vec<File>) + Copy + 'static, progress: RwSignal<Option<Progress>>) -> impl IntoView {
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
        view! {
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
                            let (fraction, text) = p.said();
                            view! {
                                <div class="progress">
                                    <progress max="1" prop:value=fraction></progress>
                                    <span>{text}</span>
                                </div>
                            }
                        })
                }}
            </div>
        }
    }

    /// The drop zone and picker of a file opened without uploading it,
    /// with how far its reading is.
    fn local_zone(
        open_local: impl Fn(Vec<File>) + Copy + 'static,
        opening: RwSignal<Option<(String, f64, OpenProgress)>>,
    ) -> impl IntoView {
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
        view! {
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
                            let (f, text) = parsing(&name, read, size);
                            (Some(f), text)
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
        }
    }

    /// The filters, with the values seen offered as suggestions.
    fn filters(list: Listing) -> impl IntoView {
        let Listing { query, known, .. } = list;
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
            <div class="filters">
                {filter("Search", |q| &mut q.q, "")}
                {filter("Job", |q| &mut q.job, "known-jobs")}
                {filter("Host", |q| &mut q.host, "known-hosts")}
                {filter("Tag", |q| &mut q.tag, "known-tags")}
                {datalist("known-jobs", |k| k.jobs.iter().cloned().collect())}
                {datalist("known-hosts", |k| k.hosts.iter().cloned().collect())}
                {datalist("known-tags", |k| k.tags.iter().cloned().collect())}
            </div>
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
        let row = RowEdits {
            id: StoredValue::new(item.id.clone()),
            tags: StoredValue::new(item.tags.clone()),
            editing: RwSignal::new(false),
            draft: RwSignal::new(item.name.clone()),
            new_tag: RwSignal::new(String::new()),
            items,
            notice,
        };
        let name_for_confirm = item.name.clone();
        let status_title = item.error.clone().unwrap_or_default();
        let status_class = format!("status {}", item.status);
        view! {
            <tr>
                <td class="name">{name_cell(row, &item)}</td>
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
                <td>{clock::date_time(item.uploaded_at_ms)}</td>
                <td class="tags">{tags_cell(row, &item.tags)}</td>
                <td>
                    <button class="link danger" on:click=move |_| row.delete(&name_for_confirm)>
                        "Delete"
                    </button>
                </td>
            </tr>
        }
    }

    /// A row's edits: its snapshot, the rename box and the tag being typed.
    #[derive(Clone, Copy)]
    struct RowEdits {
        id: StoredValue<String>,
        tags: StoredValue<Vec<String>>,
        editing: RwSignal<bool>,
        draft: RwSignal<String>,
        new_tag: RwSignal<String>,
        items: RwSignal<Vec<SnapshotMeta>>,
        notice: RwSignal<Option<Notice>>,
    }

    impl RowEdits {
        /// Send a new name or tags; the list shows the server's record.
        fn save(self, name: Option<String>, tags: Option<Vec<String>>) {
            let RowEdits { id, items, notice, .. } = self;
            spawn_local(async move {
                match api::update(&id.get_value(), name.as_deref(), tags.as_deref()).await {
                    Ok(rec) => items.update(|v| {
                        if let Some(slot) = v.iter_mut().find(|s| s.id == rec.id) {
                            *slot = rec;
                        }
                    }),
                    Err(e) => notice.set(Some(Notice::error(e))),
                }
            });
        }

        fn rename(self) {
            match new_name(&self.draft.get_untracked()) {
                Ok(name) => {
                    self.editing.set(false);
                    self.save(Some(name), None);
                }
                Err(e) => self.notice.set(Some(Notice::error(e))),
            }
        }

        fn add_tag(self) {
            let tag = self.new_tag.get_untracked();
            if tag.trim().is_empty() {
                return;
            }
            if let Some(all) = self.tags.with_value(|t| with_tag(t, &tag)) {
                self.save(None, Some(all));
            }
            self.new_tag.set(String::new());
        }

        fn remove_tag(self, tag: &str) {
            self.save(None, Some(self.tags.with_value(|t| without_tag(t, tag))));
        }

        /// Delete the snapshot `name`, once confirmed.
        fn delete(self, name: &str) {
            let asked =
                window().confirm_with_message(&format!("Delete {name}? This cannot be undone.")).unwrap_or(false);
            if !asked {
                return;
            }
            let RowEdits { id, items, notice, .. } = self;
            spawn_local(async move {
                let id = id.get_value();
                match api::delete(&id).await {
                    Ok(()) => items.update(|v| v.retain(|s| s.id != id)),
                    Err(e) => notice.set(Some(Notice::error(e))),
                }
            });
        }
    }

    /// The name cell: a link and a rename button, or the rename box.
    fn name_cell(row: RowEdits, item: &SnapshotMeta) -> impl IntoView + use<> {
        let RowEdits { editing, draft, .. } = row;
        let href = format!("/snapshots/{}", item.id);
        let name = item.name.clone();
        view! {
            <Show
                when=move || editing.get()
                fallback=move || {
                    view! {
                        <a href=href.clone()>{name.clone()}</a>
                        <button class="link" title="Rename" on:click=move |_| editing.set(true)>
                            "✎"
                        </button>
                    }
                }
            >
                <input
                    class="rename"
                    prop:value=draft
                    on:input=move |ev| draft.set(event_target_value(&ev))
                    on:keydown=move |ev| match ev.key().as_str() {
                        "Enter" => row.rename(),
                        "Escape" => editing.set(false),
                        _ => {}
                    }
                />
                <button on:click=move |_| row.rename()>"Save"</button>
                <button class="link" on:click=move |_| editing.set(false)>"Cancel"</button>
            </Show>
        }
    }

    /// The tags cell: each tag with its remove button, and a box to add one.
    fn tags_cell(row: RowEdits, tags: &[String]) -> impl IntoView + use<> {
        let new_tag = row.new_tag;
        view! {
            {tags
                .iter()
                .cloned()
                .map(|t| {
                    let gone = t.clone();
                    view! {
                        <span class="tag">
                            {t}
                            <button class="link" title="Remove this tag" on:click=move |_| row.remove_tag(&gone)>
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
                        row.add_tag();
                    }
                }
            />
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(status: SnapshotStatus, parsed_bytes: Option<u64>) -> SnapshotMeta {
        let json = serde_json::json!({
            "id": "s1", "name": "a.pickle", "size_bytes": 400, "sha256": "00", "uploaded_at_ms": 0,
            "status": status, "parsed_bytes": parsed_bytes, "trigger": "manual", "job": "train", "host": "h1", "tags": ["x", "y"],
        });
        serde_json::from_value(json).expect("a snapshot's record")
    }

    #[test]
    fn known_values_gather_jobs_hosts_and_tags() {
        let mut known = Known::default();
        known.add(&[meta(SnapshotStatus::Ready, None), meta(SnapshotStatus::Ready, None)]);
        assert_eq!(known.jobs.iter().collect::<Vec<_>>(), ["train"]);
        assert_eq!(known.hosts.iter().collect::<Vec<_>>(), ["h1"]);
        assert_eq!(known.tags.iter().collect::<Vec<_>>(), ["x", "y"]);
    }

    #[test]
    fn statuses_and_progress_are_said_in_words() {
        assert_eq!(status_text(&meta(SnapshotStatus::Parsing, Some(100))), "parsing 25%");
        assert_eq!(status_text(&meta(SnapshotStatus::Parsing, Some(900))), "parsing 100%");
        assert_eq!(status_text(&meta(SnapshotStatus::Ready, Some(100))), SnapshotStatus::Ready.to_string());
        let p = Progress { name: "a.pickle".to_owned(), sent: 512.0, total: 2048.0, of: None };
        assert_eq!(p.said(), (0.25, "a.pickle: 25% of 2.00 KiB".to_owned()));
        assert_eq!(Progress { total: 0.0, ..p }.said().0, 0.0);
        assert_eq!(parsing("b", 3000.0, 2048.0), (1.0, "b: parsing, 100% of 2.00 KiB".to_owned()));
        let answer =
            |status, deduplicated| UploadAnswer { id: "s".to_owned(), sha256: String::new(), status, deduplicated };
        assert_eq!(uploaded("a", &answer(SnapshotStatus::Ready, true)), "a: the same file was uploaded before");
        assert_eq!(uploaded("a", &answer(SnapshotStatus::Parsing, false)), "uploaded a; the server is parsing it");
        assert_eq!(uploaded("a", &answer(SnapshotStatus::Ready, false)), "uploaded a");
    }

    /// Issue 44: dropping 3 files showed "No snapshots yet" while two
    /// were stored (the list was asked for after the last) and a notice
    /// naming only the last file. The notice names each file, as they are
    /// stored ("1 of 3 files stored: a"), then all of them.
    #[test]
    fn regression_a_multi_file_upload_names_every_file() {
        let ok =
            |status, deduplicated| Ok(UploadAnswer { id: "s".to_owned(), sha256: String::new(), status, deduplicated });
        let one = [("a".to_owned(), ok(SnapshotStatus::Ready, false))];
        assert_eq!(uploads_said(&one, 1), (false, "uploaded a".to_owned()), "one file reads as before");
        assert_eq!(uploads_said(&one, 3), (false, "1 of 3 files stored: a".to_owned()));
        let all = [
            ("a".to_owned(), ok(SnapshotStatus::Ready, false)),
            ("b".to_owned(), ok(SnapshotStatus::Ready, true)),
            ("c".to_owned(), ok(SnapshotStatus::Parsing, false)),
        ];
        assert_eq!(
            uploads_said(&all, 3),
            (false, "3 files stored: a, b (uploaded before), c (being parsed)".to_owned())
        );
        let failed = [
            ("a".to_owned(), ok(SnapshotStatus::Ready, false)),
            ("b".to_owned(), Err("uploading b: 422 not a snapshot".to_owned())),
        ];
        assert_eq!(
            uploads_said(&failed, 2),
            (true, "1 of 2 files stored: a; uploading b: 422 not a snapshot".to_owned())
        );
        let p = Progress { name: "b".to_owned(), sent: 1024.0, total: 2048.0, of: Some((2, 3)) };
        assert_eq!(p.said().1, "b (2 of 3): 50% of 2.00 KiB");
    }

    #[test]
    fn tags_and_names_are_edited_as_typed() {
        let tags = ["x".to_owned()];
        assert_eq!(with_tag(&tags, " y "), Some(vec!["x".to_owned(), "y".to_owned()]));
        assert_eq!(with_tag(&tags, "x"), None);
        assert_eq!(with_tag(&tags, "  "), None);
        assert_eq!(without_tag(&["x".to_owned(), "y".to_owned()], "x"), ["y"]);
        assert_eq!(new_name("  run 2 "), Ok("run 2".to_owned()));
        assert!(new_name("   ").is_err());
    }
}
