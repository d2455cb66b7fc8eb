//! Stacks shown to people: a trace's frames innermost first with PyTorch's
//! own frames folded ([`stack_list`], the timeline's and the allocator
//! state's details), and an analysis's one-line stack label that expands
//! to its readable frames ([`StackDetails`], the OOM, leaks and compare
//! panels).

use leptos::prelude::*;
use vramscope_shared::analysis::{FrameText, readable_frames, stack_label};

use crate::core::frames::{self, FrameRun};
use crate::core::model::Frame;

/// A stack's frames, innermost first, PyTorch's own frames folded.
pub(crate) fn stack_list(frames: Vec<Frame>, id: &'static str) -> impl IntoView + use<> {
    // Frames keep their numbers across runs, folded or not.
    let mut first = 1;
    let runs: Vec<AnyView> = frames::group(&frames)
        .into_iter()
        .map(|run| {
            let start = first;
            first += run.frames.len();
            run_view(run, start)
        })
        .collect();
    view! {
        <div class="stack" id=id>
            <h4>"Stack, innermost first"</h4>
            {runs}
        </div>
    }
}

fn frame_view(f: Frame) -> impl IntoView {
    view! {
        <li>
            <code class="fn">{f.name}</code>
            " "
            <span class="file">{format!("{}:{}", f.filename, f.line)}</span>
        </li>
    }
}

fn run_view(run: FrameRun, start: usize) -> AnyView {
    let n = run.frames.len();
    let items = run.frames.into_iter().map(frame_view).collect_view();
    let start = start.to_string();
    if run.torch {
        view! {
            <details class="torch-frames">
                <summary>{format!("{n} PyTorch frame{}", if n == 1 { "" } else { "s" })}</summary>
                <ol start=start>{items}</ol>
            </details>
        }
        .into_any()
    } else {
        view! { <ol class="user-frames" start=start>{items}</ol> }.into_any()
    }
}

/// A stack's one-line label, expanding to its readable frames.
#[component]
pub(crate) fn StackDetails(frames: Vec<FrameText>, #[prop(optional)] open: bool) -> impl IntoView {
    let label = stack_label(&frames);
    let lines: Vec<String> = readable_frames(&frames).into_iter().map(FrameText::display).collect();
    view! {
        <details class="stack" open=open>
            <summary><code>{label}</code></summary>
            <ol class="frames">
                {lines.into_iter().map(|l| view! { <li><code>{l}</code></li> }).collect_view()}
            </ol>
        </details>
    }
}
