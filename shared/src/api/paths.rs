//! The HTTP API's paths, each declared once: the server mounts its routes
//! at an [`Endpoint`]'s pattern (axum's `{param}` syntax) and the clients
//! (the dashboard, the command line) build their requests from the same
//! constant, its parameters percent-encoded and its query serialised from
//! the endpoint's `Params` type with `serde_urlencoded` (what the server
//! reads it back into). The views' paths are declared with the views
//! ([`crate::views::view`]), under [`SNAPSHOT`]: see [`view_route`].

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;

/// What a path segment escapes: everything JavaScript's
/// `encodeURIComponent` escapes, so a path is spelled the same by every
/// client.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// A route of the API with `N` path parameters (`{id}`, `{job}`…).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint<const N: usize>(&'static str);

impl<const N: usize> Endpoint<N> {
    /// The route as the server mounts it: `/api/v1/snapshots/{id}`.
    pub const fn route(&self) -> &'static str {
        self.0
    }

    /// The route up to its first parameter (`/api/v1/snapshots/` of
    /// [`SNAPSHOT`]); the whole route when it has none.
    pub fn prefix(&self) -> &'static str {
        self.0.split_once('{').map_or(self.0, |(head, _)| head)
    }

    /// The path with `params` in place of the route's parameters, in order,
    /// each percent-encoded as one path segment.
    pub fn path(&self, params: [&str; N]) -> String {
        let mut out = String::with_capacity(self.0.len() + 16);
        let mut rest = self.0;
        for param in params {
            let Some((head, tail)) = rest.split_once('{') else { break };
            out.push_str(head);
            out.extend(utf8_percent_encode(param, SEGMENT));
            rest = tail.split_once('}').map_or("", |(_, after)| after);
        }
        out.push_str(rest);
        out
    }

    /// Whether `path` (without its query) is this route with some value
    /// for each parameter (any one segment, even empty).
    pub fn matches(&self, path: &str) -> bool {
        let mut want = self.0.split('/');
        let mut got = path.split('/');
        loop {
            match (want.next(), got.next()) {
                (None, None) => return true,
                (Some(w), Some(g)) if w == g || (w.starts_with('{') && w.ends_with('}')) => {}
                _ => return false,
            }
        }
    }

    /// [`Self::path`] with `query` serialised after a `?` (none when the
    /// query serialises to nothing).
    pub fn path_with<Q: Serialize + ?Sized>(
        &self,
        params: [&str; N],
        query: &Q,
    ) -> Result<String, serde_urlencoded::ser::Error> {
        Ok(with_query(self.path(params), &serde_urlencoded::to_string(query)?))
    }
}

/// `path?query`, or `path` alone for an empty query.
fn with_query(mut path: String, query: &str) -> String {
    if !query.is_empty() {
        path.push('?');
        path.push_str(query);
    }
    path
}

/// Declares each endpoint: a constant, and its route in [`ROUTES`].
macro_rules! endpoints {
    ($($(#[$doc:meta])* $name:ident: $n:literal = $route:literal;)*) => {
        $($(#[$doc])* pub const $name: Endpoint<$n> = Endpoint($route);)*

        /// Every endpoint's route, in the order declared (the views' are
        /// [`view_route`] of each `View::PATH`).
        pub const ROUTES: &[&str] = &[$($route),*];

        #[cfg(test)]
        const ARITIES: &[(&str, usize)] = &[$(($route, $n)),*];
    };
}

endpoints! {
    /// `GET` the library (`?`[`ListParams`](super::snapshots::ListParams)), `POST` an upload.
    SNAPSHOTS: 0 = "/api/v1/snapshots";
    /// `GET`, `PATCH` or `DELETE` one snapshot's record.
    SNAPSHOT: 1 = "/api/v1/snapshots/{id}";
    /// `GET` a snapshot's statistics (202 while it is parsed).
    STATS: 1 = "/api/v1/snapshots/{id}/stats";
    /// `GET` the frames of one of a snapshot's stacks.
    STACK: 2 = "/api/v1/snapshots/{id}/stacks/{stack}";
    /// `GET` a snapshot's original file.
    FILE: 1 = "/api/v1/snapshots/{id}/file";
    /// `GET` a snapshot's self-contained report page.
    REPORT: 1 = "/api/v1/snapshots/{id}/report.html";
    /// `GET` a snapshot's chart as SVG.
    CHART_SVG: 1 = "/api/v1/snapshots/{id}/chart.svg";
    /// `GET` a snapshot's chart as PNG.
    CHART_PNG: 1 = "/api/v1/snapshots/{id}/chart.png";
    /// `POST`: signed links to a snapshot's file and exports.
    LINKS: 1 = "/api/v1/snapshots/{id}/links";
    /// `GET` or `POST` a snapshot's review comments.
    COMMENTS: 1 = "/api/v1/snapshots/{id}/comments";
    /// `DELETE` one comment.
    COMMENT: 2 = "/api/v1/snapshots/{id}/comments/{comment}";
    /// `GET` a snapshot against a memory budget (`?`[`CheckQuery`](super::jobs::CheckQuery)).
    SNAPSHOT_CHECK: 1 = "/api/v1/snapshots/{id}/check";
    /// `GET` who the request's token is.
    TOKEN: 0 = "/api/v1/token";
    /// `GET` every job.
    JOBS: 0 = "/api/v1/jobs";
    /// `GET` one job's ranks side by side.
    JOB: 1 = "/api/v1/jobs/{job}";
    /// `GET` a job's newest snapshot against its pinned one.
    JOB_CHECK: 1 = "/api/v1/jobs/{job}/check";
    /// `GET` the comparison of two snapshots (see [`compare_query`]).
    COMPARE: 0 = "/api/v1/compare";
    /// `GET` will it fit (`?`[`PredictQuery`](super::predict::PredictQuery)).
    PREDICT: 0 = "/api/v1/predict";
    /// `GET` the processes that streamed telemetry.
    LIVE: 0 = "/api/v1/live";
    /// `GET` a source's samples (`?`[`ReadParams`](super::live::ReadParams)).
    LIVE_SOURCE: 1 = "/api/v1/live/{source}";
    /// `POST` capture now (`?`[`CaptureParams`](super::live::CaptureParams)).
    LIVE_CAPTURE: 1 = "/api/v1/live/{source}/capture";
    /// The agents' WebSocket.
    AGENT_SOCKET: 0 = "/api/v1/agents/ws";
    /// The MCP tools (streamable HTTP).
    MCP: 0 = "/api/v1/mcp";
}

/// The write endpoints a viewer may call, as (method, route); every other
/// change needs an uploader, and a `DELETE` an admin. Each of these checks
/// on its own what a viewer may do there: a viewer's signed links read
/// only, comments are anyone's to write and their author's to delete, the
/// MCP tools only read.
pub const OPEN_TO_VIEWERS: [(&str, &str); 4] =
    [("POST", LINKS.route()), ("POST", COMMENTS.route()), ("DELETE", COMMENT.route()), ("POST", MCP.route())];

/// The route of the declared view at `view_path` (`View::PATH`):
/// `/api/v1/snapshots/{id}/{view_path}`.
pub fn view_route(view_path: &str) -> String {
    format!("{}/{view_path}", SNAPSHOT.route())
}

/// The path of the view at `view_path` of snapshot `id`, with its query
/// (the view's `Params`, serialised) after a `?` even when empty.
pub fn view_path<Q: Serialize + ?Sized>(
    id: &str,
    view_path: &str,
    params: &Q,
) -> Result<String, serde_urlencoded::ser::Error> {
    let query = serde_urlencoded::to_string(params)?;
    Ok(format!("{}/{view_path}?{query}", SNAPSHOT.path([id])))
}

/// The two snapshots of `GET /api/v1/compare` (the rest of its query is
/// the comparison's [`DiffParams`](crate::views::findings::DiffParams)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CompareIds {
    /// The first (before, or one rank).
    pub a: Option<String>,
    /// The second (after, or another rank).
    pub b: Option<String>,
}

/// The query of `GET /api/v1/compare`: the ids, then the comparison's
/// parameters (both serialised; the server reads the ids into
/// [`CompareIds`] and the rest into `DiffParams`).
pub fn compare_query(
    ids: &CompareIds,
    diff: &crate::views::findings::DiffParams,
) -> Result<String, serde_urlencoded::ser::Error> {
    let parts = [serde_urlencoded::to_string(ids)?, serde_urlencoded::to_string(diff)?];
    Ok(parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_names_as_many_parameters_as_it_takes() {
        assert_eq!(ARITIES.len(), ROUTES.len());
        for (route, n) in ARITIES {
            assert_eq!(route.matches('{').count(), *n, "{route}");
        }
    }

    #[test]
    fn parameters_are_encoded_as_encode_uri_component_does() {
        assert_eq!(STACK.path(["a1", "17"]), "/api/v1/snapshots/a1/stacks/17");
        assert_eq!(JOB_CHECK.path(["my job/ä?#&+"]), "/api/v1/jobs/my%20job%2F%C3%A4%3F%23%26%2B/check");
        assert_eq!(JOB.path(["a-b_c.d!e~f*g'h(i)"]), "/api/v1/jobs/a-b_c.d!e~f*g'h(i)");
        assert_eq!(SNAPSHOT.prefix(), "/api/v1/snapshots/");
        assert_eq!(JOBS.prefix(), "/api/v1/jobs");
        assert_eq!(view_route("timeline"), "/api/v1/snapshots/{id}/timeline");
        assert!(FILE.matches("/api/v1/snapshots/a1/file"));
        assert!(FILE.matches("/api/v1/snapshots//file"));
        assert!(!FILE.matches("/api/v1/snapshots/a1/file/more"));
        assert!(!FILE.matches("/api/v1/snapshots/a1/stats"));
        assert!(!FILE.matches("/api/v1/snapshots/a1"));
    }

    #[test]
    fn queries_are_serialised_and_empty_ones_left_out() {
        let ids = CompareIds { a: Some("x y".into()), b: Some("z".into()) };
        let diff = crate::views::findings::DiffParams { px: Some(5), ..Default::default() };
        assert_eq!(compare_query(&ids, &diff).expect("query"), "a=x+y&b=z&px=5");
        assert_eq!(compare_query(&ids, &Default::default()).expect("query"), "a=x+y&b=z");
        assert_eq!(COMPARE.path_with([], &ids).expect("query"), "/api/v1/compare?a=x+y&b=z");
        assert_eq!(COMPARE.path_with([], &CompareIds::default()).expect("query"), "/api/v1/compare");
        assert_eq!(view_path("l 1", "state", &CompareIds::default()).expect("query"), "/api/v1/snapshots/l%201/state?");
    }
}
