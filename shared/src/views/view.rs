//! Every view, declared once: its path under `/api/v1/snapshots/{id}/`,
//! its parameters (the URL's query), its answer (the JSON body) and the
//! function that answers it. The server mounts each declared view at its
//! path with one generic handler, the dashboard writes each request by
//! serialising the same parameters to the same path, and the browser's
//! worker answers a file opened locally through [`super::route`], which
//! looks the path up here: none of them names a view's path or query
//! field by hand.
//!
//! Adding a view is one row of the table at the bottom of this file (plus
//! its answer function and the dashboard's drawing of it).

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::annotations::{AnnotationsAnswer, AnnotationsParams};
use super::entry::{EntryAnswer, EntryParams};
use super::findings::{
    BreakdownAnswer, BreakdownParams, ExplainAnswer, ExplainParams, LeaksAnswer, LeaksParams, TuneAnswer, TuneParams,
    WhatIfAnswer, WhatIfParams,
};
use super::fragmentation::{FragmentationAnswer, FragmentationParams};
use super::host::{HostAnswer, HostParams};
use super::pools::{PoolsAnswer, PoolsParams};
use super::search::{SearchAnswer, SearchParams};
use super::segments::{SegmentsAnswer, SegmentsParams};
use super::state::{AllocatorState, StateParams};
use super::{BlocksParams, StateAt, TimelineParams};
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::timeline::TimelineWindow;

/// How much work an answer is, which tells the server where to run it
/// (the browser's worker runs every view the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Reads the indexes: answered where it is asked.
    Light,
    /// Passes over the trace: on a blocking thread, off the async workers.
    Pass,
    /// Analyses or replays the trace: in the server's analysis pool, one
    /// at a time per snapshot (see the server's `AnalysisQueue`).
    Analysis,
}

/// One view of a snapshot: `GET /api/v1/snapshots/{id}/{PATH}?{Params}`
/// answers `Answer` as JSON.
pub trait View: 'static {
    /// The path after the snapshot's id, without slashes (`timeline`).
    const PATH: &'static str;
    /// Where the server runs it.
    const WORK: Work;
    /// The query, read from the URL's query string (`serde_urlencoded`,
    /// as axum's `Query` reads it) and written by the dashboard the same way.
    type Params: Serialize + DeserializeOwned + Send + 'static;
    /// The answer, sent as JSON.
    type Answer: Serialize + DeserializeOwned + Send + 'static;
    /// The answer of `a` to `p`.
    fn answer(a: &IndexedSnapshot, p: &Self::Params) -> Result<Self::Answer, ViewError>;
}

/// Whoever does something with every declared view (the server mounts
/// them, the router looks one up): [`each`] calls [`Visit::visit`] once
/// per view.
pub trait Visit {
    /// Called with each declared view in turn.
    fn visit<V: View>(&mut self);
}

/// Declares each view: a unit struct implementing [`View`], and [`each`].
macro_rules! views {
    ($($(#[$doc:meta])* $name:ident = $path:literal, $params:ty => $answer:ty, $answer_fn:path, $work:ident;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;

            impl View for $name {
                const PATH: &'static str = $path;
                const WORK: Work = Work::$work;
                type Params = $params;
                type Answer = $answer;
                fn answer(a: &IndexedSnapshot, p: &$params) -> Result<$answer, ViewError> {
                    $answer_fn(a, p)
                }
            }
        )*

        /// Every declared view, in the order of the table.
        pub fn each(v: &mut impl Visit) {
            $(v.visit::<$name>();)*
        }
    };
}

views! {
    /// A window of the timeline ([`super::timeline`]).
    Timeline = "timeline", TimelineParams => TimelineWindow, super::timeline, Light;
    /// Segments and allocations alive after a row ([`super::blocks`]).
    Blocks = "blocks", BlocksParams => StateAt, super::blocks, Light;
    /// The allocator's state after a row ([`super::state::state`]).
    State = "state", StateParams => AllocatorState, super::state::state, Pass;
    /// The segment timeline ([`super::segments::segments`]).
    Segments = "segments", SegmentsParams => SegmentsAnswer, super::segments::segments, Pass;
    /// Fragmentation over a window ([`super::fragmentation::fragmentation`]).
    Fragmentation = "fragmentation", FragmentationParams => FragmentationAnswer,
        super::fragmentation::fragmentation, Pass;
    /// `record_function` ranges ([`super::annotations::annotations`]).
    Annotations = "annotations", AnnotationsParams => AnnotationsAnswer, super::annotations::annotations, Light;
    /// Allocations by address, size or frame ([`super::search::search`]).
    Search = "search", SearchParams => SearchAnswer, super::search::search, Pass;
    /// One trace entry ([`super::entry::entry`]).
    Entry = "entry", EntryParams => EntryAnswer, super::entry::entry, Pass;
    /// Pinned host memory ([`super::host::host`]).
    Host = "host", HostParams => HostAnswer, super::host::host, Pass;
    /// Memory by pool and stream ([`super::pools::pools`]).
    Pools = "pools", PoolsParams => PoolsAnswer, super::pools::pools, Pass;
    /// A replay under other allocator settings ([`super::findings::whatif`]).
    WhatIf = "whatif", WhatIfParams => WhatIfAnswer, super::findings::whatif, Analysis;
    /// Allocator settings ranked ([`super::findings::tune`]).
    Tune = "tune", TuneParams => TuneAnswer, super::findings::tune, Analysis;
    /// The OOM post-mortems ([`super::findings::explain`]).
    Explain = "explain", ExplainParams => ExplainAnswer, super::findings::explain, Analysis;
    /// Live allocations ranked by growth ([`super::findings::leaks`]).
    Leaks = "leaks", LeaksParams => LeaksAnswer, super::findings::leaks, Analysis;
    /// Memory by category ([`super::findings::breakdown`]).
    Breakdown = "breakdown", BreakdownParams => BreakdownAnswer, super::findings::breakdown, Analysis;
}
