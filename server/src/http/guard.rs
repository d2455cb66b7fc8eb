//! No ambient authority: without tokens (the loopback default), where every
//! request is an anonymous admin, a request's `Host` and `Origin` are its
//! only credentials.
//!
//! - **DNS rebinding**: a page on `evil.example` whose name is made to
//!   resolve to 127.0.0.1 reaches the server with `Host: evil.example`. Only
//!   requests naming this server (the bound address, `localhost`, a loopback
//!   address, or a name in `allowed_hosts`) are served.
//! - **Cross-site requests**: any page may send a "simple" POST (a form, or
//!   `text/plain`) to 127.0.0.1 without a preflight. A request that changes
//!   something (any method but GET, HEAD and OPTIONS) or opens a WebSocket
//!   is refused when its `Origin` is not this server, or when the browser
//!   says it is cross-site (`Sec-Fetch-Site`).
//!
//! With tokens these checks are off: a token travels in a header that no
//! other page can make a browser send, and a load balancer may give the
//! server any name.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::AppError;

/// The middleware: refuses what the module doc says, answers the rest.
pub(crate) async fn same_origin_only(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !state.auth.required()
        && let Err(refusal) = check(&state, request.method(), request.headers())
    {
        state.metrics.error("forbidden");
        return refusal.into_response();
    }
    next.run(request).await
}

fn check(state: &AppState, method: &Method, headers: &HeaderMap) -> Result<(), AppError> {
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or_default();
        if !is_this_server(state, host_name(host)) {
            return Err(AppError::ForeignHost(host.chars().take(100).collect()));
        }
    }
    let upgrade = headers.contains_key(header::UPGRADE);
    let changes = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !(changes || upgrade) {
        return Ok(());
    }
    if headers.get("sec-fetch-site").is_some_and(|v| v.as_bytes() == b"cross-site") {
        return Err(AppError::CrossOrigin("a cross-site request (Sec-Fetch-Site)".to_owned()));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        if !is_this_origin(state, origin, host) {
            return Err(AppError::CrossOrigin(format!("Origin {:?}", origin.chars().take(100).collect::<String>())));
        }
    }
    Ok(())
}

/// An `Origin` is this server's when it names this server and the port the
/// request came to (the `Host` header's, else the scheme's default): a page
/// of another program on `localhost:3000` names this host, not this port.
fn is_this_origin(state: &AppState, origin: &str, host: Option<&str>) -> bool {
    let Ok(url) = url::Url::parse(origin) else { return false };
    let Some(name) = url.host_str() else { return false };
    let Some(port) = url.port_or_known_default() else { return false };
    let host_port = match host {
        Some(host) => match host.strip_prefix(host_name(host)).and_then(|rest| rest.strip_prefix(':')) {
            Some(digits) => digits.parse::<u16>().ok(),
            None => url::Url::parse(&format!("{}://x", url.scheme())).ok().and_then(|u| u.port_or_known_default()),
        },
        None => Some(state.settings.bind.port()),
    };
    is_this_server(state, name) && host_port == Some(port)
}

/// The name part of a `Host` header: `[::1]:8080` → `[::1]`, `a:80` → `a`.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(name, _)| &host[..name.len() + 1]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

fn is_this_server(state: &AppState, name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Ok(ip) = bare.parse::<std::net::IpAddr>()
        && (ip.is_loopback() || ip == state.settings.bind.ip())
    {
        return true;
    }
    state.settings.allowed_hosts.iter().any(|allowed| host_name(allowed).eq_ignore_ascii_case(&name))
}

/// The address a request came from: its connection's peer, or, when that
/// peer is one of `trusted` (`trusted_proxies`), the nearest address in
/// `X-Forwarded-For` that is not a trusted proxy (read from the right: the
/// entries to the left of an untrusted one are the client's own claims).
/// `None` when the peer is unknown (a request made in process).
pub(crate) fn client_address(request: &Request, trusted: &[ipnet::IpNet]) -> Option<IpAddr> {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>()?.0.ip();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return Some(peer);
    }
    let mut client = peer;
    for value in request.headers().get_all("x-forwarded-for").iter().rev() {
        let Ok(value) = value.to_str() else { return Some(client) };
        for entry in value.rsplit(',') {
            let Some(ip) = parse_forwarded(entry.trim()) else { return Some(client) };
            client = ip;
            if !is_trusted(&ip) {
                return Some(client);
            }
        }
    }
    Some(client)
}

/// One `X-Forwarded-For` entry: an address, possibly with a port
/// (`1.2.3.4:5`, `[::1]:5`).
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    entry.parse::<IpAddr>().ok().or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use axum::extract::{ConnectInfo, Request};

    use super::{client_address, host_name};

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("localhost:3000"), "localhost");
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name("evil.example"), "evil.example");
    }

    #[test]
    fn x_forwarded_for_is_read_only_from_trusted_proxies() {
        let request = |peer: &str, forwarded: &[&str]| {
            let mut builder = Request::get("/");
            for value in forwarded {
                builder = builder.header("x-forwarded-for", *value);
            }
            let mut request = builder.body(axum::body::Body::empty()).expect("request");
            let peer: SocketAddr = peer.parse().expect("peer");
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        };
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("ip"));
        let proxies = ["127.0.0.1/32".parse().expect("net"), "10.0.0.0/24".parse().expect("net")];
        // No trusted proxies (the default): the header is the client's claim.
        assert_eq!(client_address(&request("127.0.0.1:1", &["1.2.3.4"]), &[]), ip("127.0.0.1"));
        // An untrusted peer's header is ignored.
        assert_eq!(client_address(&request("192.0.2.9:1", &["1.2.3.4"]), &proxies), ip("192.0.2.9"));
        // Through nginx: the last entry nginx added.
        assert_eq!(client_address(&request("127.0.0.1:1", &["1.2.3.4"]), &proxies), ip("1.2.3.4"));
        // A forged entry left of the real one is not believed; trusted hops
        // to its right are skipped, across header lines too.
        let hops = request("127.0.0.1:1", &["6.6.6.6, 1.2.3.4", "10.0.0.8"]);
        assert_eq!(client_address(&hops, &proxies), ip("1.2.3.4"));
        // Garbage stops the walk at the last address read.
        assert_eq!(client_address(&request("127.0.0.1:1", &["x, 10.0.0.8"]), &proxies), ip("10.0.0.8"));
        assert_eq!(client_address(&request("127.0.0.1:1", &[]), &proxies), ip("127.0.0.1"));
        assert_eq!(client_address(&request("127.0.0.1:1", &["[::1]:80"]), &proxies), ip("::1"));
        // In process, without a connection.
        let bare = Request::get("/").body(axum::body::Body::empty()).expect("request");
        assert_eq!(client_address(&bare, &proxies), None);
    }
}
