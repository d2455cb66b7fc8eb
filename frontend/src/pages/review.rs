//! A snapshot's review thread: the comments a team writes on it, each
//! optionally about a moment of the timeline (a trace row) and an
//! allocation (its address), with the author (the API token's name) and
//! the time; and the pin that keeps the snapshot from retention.
//!
//! The moment of a new comment is the page's own: the snapshot page keeps
//! its view in the URL (`row=` for the instant under the cursor, `sel=` for
//! the selected allocation; see [`crate::core::permalink`]), and the thread reads
//! it when the comment is posted. A comment with a moment links back to the
//! permalink of that moment.
//!
//! The JSON shapes and links are plain functions, tested natively; the
//! component and its HTTP calls exist on wasm32 only.

use crate::core::model::review::Comment;
use crate::core::permalink::{self, PageState, Selected};

/// The moment and allocation a new comment refers to, read from the
/// snapshot page's query string: its cursor row and selected allocation.
pub fn moment_of_query(query: &str) -> (Option<u32>, Option<u64>) {
    let state = permalink::parse(query);
    (state.cursor, state.selected.map(|s| s.addr))
}

/// The body of `POST /api/v1/snapshots/{id}/comments`.
pub fn post_body(text: &str, row: Option<u32>, addr: Option<u64>) -> serde_json::Value {
    let mut body = serde_json::json!({ "body": text.trim() });
    if let Some(row) = row {
        body["row"] = row.into();
    }
    if let Some(addr) = addr {
        body["addr"] = addr.into();
    }
    body
}

/// The permalink of a comment's moment: the snapshot page at its row, with
/// its allocation selected; `None` for a comment about the whole snapshot.
pub fn moment_link(snapshot_id: &str, comment: &Comment) -> Option<String> {
    if comment.row.is_none() && comment.addr.is_none() {
        return None;
    }
    let state = PageState {
        cursor: comment.row,
        selected: comment.addr.map(|addr| Selected { addr, alloc_row: None }),
        ..PageState::default()
    };
    Some(format!("/snapshots/{snapshot_id}{}", permalink::query(&state)))
}

/// What a comment is about, in words: `at row 1,200 · 0x7f3a00000200`.
pub fn moment_label(row: Option<u32>, addr: Option<u64>) -> Option<String> {
    let parts: Vec<String> = [
        row.map(|r| format!("at row {}", crate::core::format::grouped(u64::from(r)))),
        addr.map(crate::core::format::hex),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// The label of the form's "about the moment shown" box, for the moment
/// `label` (`None`: none selected).
pub fn about_moment(label: Option<&str>) -> String {
    match label {
        Some(label) => format!(" about the moment shown ({label})"),
        None => " about the moment shown (none selected: the whole snapshot)".to_owned(),
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use component::ReviewThread;

#[cfg(target_arch = "wasm32")]
// leptos's `#[component]` gives each component a `pub` props struct.
#[allow(unreachable_pub)]
mod component {
    use leptos::prelude::*;
    use leptos::task::spawn_local;

    use super::{about_moment as about_moment_label, moment_label, moment_link, moment_of_query, post_body};
    use crate::core::model::review::Comment;
    use crate::explorer::track::PageComments;
    use crate::infra::api;
    use crate::infra::clock;
    use crate::infra::first_view::after_first_view;

    /// The review thread of snapshot `id`: pin, comments, a form to add one.
    /// Whether it is pinned comes from the record the page loaded
    /// (`pinned_now`), not from a request of its own; the comments it loads
    /// are the page's (`comments`), which the track marks too.
    #[component]
    pub(crate) fn ReviewThread(id: String, pinned_now: Signal<Option<bool>>, comments: PageComments) -> impl IntoView {
        let thread = Thread {
            id: StoredValue::new(id),
            comments: comments.0,
            pinned: RwSignal::new(None),
            draft: RwSignal::new(String::new()),
            about_moment: RwSignal::new(true),
            error: RwSignal::new(None),
            busy: RwSignal::new(false),
            moment_hint: RwSignal::new(None),
        };
        after_first_view(move || thread.reload());
        Effect::new(move |_| {
            if let Some(p) = pinned_now.get() {
                thread.pinned.set(Some(p));
            }
        });
        thread.refresh_hint();
        let Thread { comments, pinned, error, .. } = thread;

        view! {
            <section class="review" id="review">
                <h2>
                    "Review"
                    <button
                        id="pin"
                        class:active=move || pinned.get() == Some(true)
                        title="A pinned snapshot is never deleted by the retention policy"
                        on:click=move |_| thread.toggle_pin()
                    >
                        {move || if pinned.get() == Some(true) { "✓ Pinned" } else { "Pin" }}
                    </button>
                </h2>
                {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
                {move || match comments.get() {
                    None => view! { <p class="hint">"Loading the comments…"</p> }.into_any(),
                    Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                    Some(Ok(list)) if list.is_empty() => {
                        view! { <p class="hint" id="no-comments">"No comments yet."</p> }.into_any()
                    }
                    Some(Ok(list)) => {
                        view! {
                            <ol class="comments">
                                {list.into_iter().map(|c| comment_item(c, thread)).collect_view()}
                            </ol>
                        }
                            .into_any()
                    }
                }}
                {form(thread)}
            </section>
        }
    }

    /// The thread's state: the comments and pin, the draft and whether it
    /// is about the moment shown, the request under way and its failure.
    #[derive(Clone, Copy)]
    struct Thread {
        id: StoredValue<String>,
        comments: RwSignal<Option<Result<Vec<Comment>, String>>>,
        pinned: RwSignal<Option<bool>>,
        draft: RwSignal<String>,
        about_moment: RwSignal<bool>,
        error: RwSignal<Option<String>>,
        busy: RwSignal<bool>,
        /// The page's moment, in words, as the form last saw it.
        moment_hint: RwSignal<Option<String>>,
    }

    impl Thread {
        /// List the comments again.
        fn reload(self) {
            spawn_local(async move {
                let list = api::comments(&self.id.get_value()).await.map_err(|e| e.to_string());
                self.comments.try_set(Some(list));
            });
        }

        /// The page's current moment, read when needed: the snapshot page
        /// rewrites its URL as the cursor moves.
        fn current_moment(self) -> (Option<u32>, Option<u64>) {
            moment_of_query(&window().location().search().unwrap_or_default())
        }

        fn refresh_hint(self) {
            let (row, addr) = self.current_moment();
            self.moment_hint.set(moment_label(row, addr));
        }

        /// Post the draft (about the moment shown, when asked), then list
        /// again.
        fn post(self) {
            let Thread { id, draft, error, busy, .. } = self;
            let text = draft.get_untracked();
            if text.trim().is_empty() || busy.get_untracked() {
                return;
            }
            let (row, addr) = if self.about_moment.get_untracked() { self.current_moment() } else { (None, None) };
            busy.set(true);
            spawn_local(async move {
                let answer = api::post_comment(&id.get_value(), &post_body(&text, row, addr)).await;
                busy.try_set(false);
                match answer {
                    Ok(_) => {
                        draft.try_set(String::new());
                        error.try_set(None);
                        self.reload();
                    }
                    Err(e) => {
                        error.try_set(Some(e.to_string()));
                    }
                }
            });
        }

        fn remove(self, comment_id: String) {
            spawn_local(async move {
                match api::delete_comment(&self.id.get_value(), &comment_id).await {
                    Ok(()) => self.reload(),
                    Err(e) => {
                        self.error.try_set(Some(e.to_string()));
                    }
                }
            });
        }

        fn toggle_pin(self) {
            let want = !self.pinned.get_untracked().unwrap_or(false);
            spawn_local(async move {
                match api::set_pinned(&self.id.get_value(), want).await {
                    Ok(()) => {
                        self.pinned.try_set(Some(want));
                    }
                    Err(e) => {
                        self.error.try_set(Some(e.to_string()));
                    }
                }
            });
        }
    }

    /// One comment: author, date, the moment it is about (linked) and its
    /// delete button, then its text.
    fn comment_item(c: Comment, thread: Thread) -> impl IntoView {
        let link = moment_link(&thread.id.get_value(), &c);
        let label = moment_label(c.row, c.addr);
        let cid = c.id.clone();
        view! {
            <li class="comment">
                <p class="meta">
                    <strong class="author">{c.author.clone()}</strong>
                    " · "
                    <span>{clock::date_time(c.created_ms)}</span>
                    {link
                        .zip(label)
                        .map(|(href, label)| {
                            view! {
                                " · "
                                // A full load: the snapshot page reads its
                                // state from the URL when it starts.
                                <a class="moment" href=href rel="external">
                                    {label}
                                </a>
                            }
                        })}
                    <button
                        class="link danger"
                        title="Delete this comment (yours, or any as an admin)"
                        on:click=move |_| thread.remove(cid.clone())
                    >
                        "delete"
                    </button>
                </p>
                <p class="body">{c.body.clone()}</p>
            </li>
        }
    }

    /// The form: the draft, whether it is about the moment shown, and the
    /// button.
    fn form(thread: Thread) -> impl IntoView {
        let Thread { draft, about_moment, busy, moment_hint, .. } = thread;
        view! {
            <div class="comment-form">
                <textarea
                    id="comment-text"
                    rows="3"
                    placeholder="What happened here? (Ctrl+Enter to post)"
                    prop:value=draft
                    on:focus=move |_| thread.refresh_hint()
                    on:input=move |ev| draft.set(event_target_value(&ev))
                    on:keydown=move |ev| {
                        if ev.key() == "Enter" && (ev.ctrl_key() || ev.meta_key()) {
                            thread.post();
                        }
                    }
                ></textarea>
                <label class="hint">
                    <input
                        type="checkbox"
                        prop:checked=about_moment
                        on:change=move |_| about_moment.update(|v| *v = !*v)
                    />
                    {move || moment_hint.with(|label| about_moment_label(label.as_deref()))}
                </label>
                <button id="post-comment" disabled=move || busy.get() on:click=move |_| thread.post()>
                    "Comment"
                </button>
            </div>
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comment(row: Option<u32>, addr: Option<u64>) -> Comment {
        Comment {
            id: "c1".into(),
            author: "alice".into(),
            body: "here".into(),
            created_ms: 1,
            row,
            time_us: None,
            addr,
        }
    }

    #[test]
    fn reads_the_server_shape() {
        let json = r#"[{"id":"c","author":"local","body":"b","created_ms":5,"row":null,"time_us":null,"addr":18446744073709551614}]"#;
        let list: Vec<Comment> = serde_json::from_str(json).expect("parses");
        assert_eq!(list[0].addr, Some(u64::MAX - 1));
        assert_eq!(list[0].row, None);
    }

    #[test]
    fn the_moment_comes_from_the_page_query() {
        assert_eq!(
            moment_of_query("?device=0&axis=event&row=4211&sel=0x7f3a00000200%404100"),
            (Some(4211), Some(0x7f3a_0000_0200))
        );
        assert_eq!(moment_of_query(""), (None, None));
        assert_eq!(moment_of_query("?row=nope"), (None, None));
    }

    #[test]
    fn post_bodies_carry_only_what_is_known() {
        assert_eq!(post_body("  hi ", None, None), serde_json::json!({ "body": "hi" }));
        assert_eq!(
            post_body("x", Some(3), Some(u64::MAX)),
            serde_json::json!({ "body": "x", "row": 3, "addr": u64::MAX })
        );
    }

    #[test]
    fn links_and_labels_of_moments() {
        assert_eq!(moment_link("s1", &comment(None, None)), None);
        let link = moment_link("s1", &comment(Some(1200), Some(0x200))).expect("link");
        assert_eq!(link, "/snapshots/s1?row=1200&sel=0x200");
        // The link opens on the same moment the page would restore.
        let back = permalink::parse(link.split_once('?').map(|(_, q)| q).unwrap_or_default());
        assert_eq!((back.cursor, back.selected.map(|s| s.addr)), (Some(1200), Some(0x200)));
        assert_eq!(moment_label(Some(1200), None).as_deref(), Some("at row 1,200"));
        assert_eq!(moment_label(None, None), None);
        assert!(moment_label(Some(1), Some(0x200)).is_some_and(|l| l.starts_with("at row 1 · ")));
    }

    #[test]
    fn the_form_says_which_moment_a_comment_is_about() {
        assert_eq!(about_moment(Some("row 4,211")), " about the moment shown (row 4,211)");
        assert_eq!(about_moment(None), " about the moment shown (none selected: the whole snapshot)");
    }
}
