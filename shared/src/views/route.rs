//! One entry point for every view, by route and query string: what the
//! dashboard asks of a file opened in the browser (its Web Worker calls
//! [`answer`]) is spelled exactly like the server's URL, so the page needs
//! no second set of requests for local mode.
//!
//! A route is the part of `/api/v1/snapshots/{id}/…` after the id
//! (`timeline`, `blocks`, `stacks/17`, `stats`); the query is the URL's
//! query string without `?`, parsed into the view's `Params` with
//! `serde_urlencoded` the same way axum's `Query` parses it on the server.
//! Every view declared in [`super::view`] is answered here by its path.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::findings;
use super::stack;
use super::view::{self, View, Visit};
#[cfg(test)]
use super::{BlocksParams, TimelineParams, blocks, timeline};
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;

/// The JSON answer of a view, as the server would send it for
/// `GET /api/v1/snapshots/{id}/{route}?{query}`.
///
/// `stats` answers the `vramscope stats --json` object with an empty
/// `file` (the caller knows the file's name). Unknown routes, and queries
/// that do not parse, are errors naming what was wrong.
pub fn answer(a: &IndexedSnapshot, route: &str, query: &str) -> Result<String, ViewError> {
    let route = route.trim_matches('/');
    match route.split_once('/') {
        None if route == "stats" => json(&a.stats().report("")),
        None => {
            let mut lookup = Lookup { analyzed: a, route, query, answer: None };
            view::each(&mut lookup);
            lookup.answer.unwrap_or_else(|| Err(unknown(route)))
        }
        Some(("stacks", id)) => {
            let id: u32 = id.parse().map_err(|_| ViewError::BadRequest(format!("stack id {id:?} is not a number")))?;
            json(&stack(a, id)?)
        }
        Some(_) => Err(unknown(route)),
    }
}

/// The declared view at `route`, answered.
struct Lookup<'a> {
    analyzed: &'a IndexedSnapshot,
    route: &'a str,
    query: &'a str,
    answer: Option<Result<String, ViewError>>,
}

impl Visit for Lookup<'_> {
    fn visit<V: View>(&mut self) {
        if self.answer.is_none() && V::PATH == self.route {
            self.answer =
                Some(params::<V::Params>(self.route, self.query).and_then(|p| json(&V::answer(self.analyzed, &p)?)));
        }
    }
}

/// The comparison of `a` with `b` for the query of `GET /api/v1/compare`
/// (`a=` and `b=`, the two ids, are the caller's and ignored here): what
/// the server answers, and what a file opened in the browser answers when
/// it is compared with an uploaded snapshot or another local file (the
/// page's worker reads both), so both agree to the byte.
pub fn compare(a: &IndexedSnapshot, b: &IndexedSnapshot, query: &str) -> Result<findings::DiffAnswer, ViewError> {
    let pairs: Vec<(String, String)> = params("compare", query)?;
    let rest: Vec<(String, String)> = pairs.into_iter().filter(|(k, _)| k != "a" && k != "b").collect();
    let rest = serde_urlencoded::to_string(&rest)
        .map_err(|e| ViewError::BadRequest(format!("query of compare ({query:?}): {e}")))?;
    findings::diff(a, b, &params::<findings::DiffParams>("compare", &rest)?)
}

fn unknown(route: &str) -> ViewError {
    ViewError::NotFound(format!("view {route:?}"))
}

/// The query string as a view's parameters; an empty string is all defaults.
fn params<P: DeserializeOwned>(route: &str, query: &str) -> Result<P, ViewError> {
    serde_urlencoded::from_str(query.trim_start_matches('?'))
        .map_err(|e| ViewError::BadRequest(format!("query of {route} ({query:?}): {e}")))
}

fn json<T: Serialize>(value: &T) -> Result<String, ViewError> {
    // Serializing our own answer types cannot fail (no maps with non-string
    // keys); say so plainly should it ever happen.
    serde_json::to_string(value).map_err(|e| ViewError::BadRequest(format!("answer not serializable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> IndexedSnapshot {
        crate::testing::corpus("streams")
    }

    #[test]
    fn routes_answer_what_the_view_functions_answer() {
        let a = streams();
        let p = TimelineParams { px: Some(200), axis: Some(crate::timeline::Axis::Event), ..Default::default() };
        let direct = serde_json::to_string(&timeline(&a, &p).expect("window")).expect("json");
        assert_eq!(answer(&a, "timeline", "px=200&axis=event").expect("routed"), direct);
        let end = serde_json::to_string(&blocks(&a, &BlocksParams::default()).expect("state")).expect("json");
        assert_eq!(answer(&a, "/blocks", "").expect("routed"), end);
        let stats: serde_json::Value = serde_json::from_str(&answer(&a, "stats", "").expect("stats")).expect("json");
        assert_eq!(stats["devices"][0]["trace_entries"], 1727);
        let frames = answer(&a, "stacks/0", "").expect("stack 0");
        assert!(frames.starts_with('['), "{frames}");
    }

    #[test]
    fn the_pools_view_is_routed() {
        let a = crate::testing::corpus("graph_shared_pool");
        let p = crate::views::pools::PoolsParams { px: Some(10), ..Default::default() };
        let direct = serde_json::to_string(&crate::views::pools::pools(&a, &p).expect("pools")).expect("json");
        assert_eq!(answer(&a, "pools", "px=10").expect("routed"), direct);
    }

    #[test]
    fn compare_answers_the_diff_of_its_query() {
        let (a, b) = (streams(), crate::testing::corpus("oom_leak"));
        let p = findings::DiffParams { px: Some(50), align: Some(findings::Align::Step), ..Default::default() };
        let direct = serde_json::to_string(&findings::diff(&a, &b, &p).expect("diff")).expect("json");
        let routed = compare(&a, &b, "a=local-1&b=0190&align=step&px=50").expect("routed");
        assert_eq!(serde_json::to_string(&routed).expect("json"), direct);
        let bad = compare(&a, &b, "a=x&b=y&px=wide");
        assert!(matches!(&bad, Err(ViewError::BadRequest(m)) if m.contains("compare")), "{bad:?}");
    }

    #[test]
    fn bad_routes_and_queries_say_what_was_wrong() {
        let a = streams();
        assert_eq!(answer(&a, "nope", ""), Err(ViewError::NotFound("view \"nope\"".to_owned())));
        assert!(matches!(answer(&a, "stacks/x", ""), Err(ViewError::BadRequest(m)) if m.contains("\"x\"")));
        assert!(matches!(answer(&a, "stacks/4000000000", ""), Err(ViewError::NotFound(_))));
        let bad = answer(&a, "timeline", "px=wide");
        assert!(
            matches!(&bad, Err(ViewError::BadRequest(m)) if m.contains("timeline") && m.contains("px=wide")),
            "{bad:?}"
        );
        let empty = answer(&a, "timeline", "start=5&end=5");
        assert!(matches!(empty, Err(ViewError::BadRequest(_))));
    }
}
