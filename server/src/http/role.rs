//! The role a route needs, declared on the route: a handler that changes
//! or deletes takes [`RequireRole`] as its first argument (so it is
//! checked before anything else is read of the request, its body included);
//! a mounted service (the MCP endpoint) relies on [`deny_by_default`]. Reading needs only
//! a viewer, which every identity the middleware lets through is: a
//! handler that reads declares nothing. Under both, [`deny_by_default`]
//! closes every write route to viewers unless it is declared open to them.

use std::marker::PhantomData;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::Method;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use vramscope_shared::api::paths;

use super::AppState;
use super::error::AppError;
use crate::auth::{Identity, Role};

/// A role, as a type: the parameter of [`RequireRole`].
pub(crate) trait Needed: Send + Sync + 'static {
    /// The role.
    const ROLE: Role;
}

/// Changing: uploads, renames, tags, pins, agents.
pub(crate) struct Uploader;

/// Deleting snapshots.
pub(crate) struct Admin;

impl Needed for Uploader {
    const ROLE: Role = Role::Uploader;
}

impl Needed for Admin {
    const ROLE: Role = Role::Admin;
}

/// The request's identity, refused with 403 unless it holds `R`'s role.
pub(crate) struct RequireRole<R: Needed>(Identity, PhantomData<R>);

impl<R: Needed> RequireRole<R> {
    /// Who made the request.
    pub(crate) fn identity(self) -> Identity {
        self.0
    }
}

impl<R: Needed> FromRequestParts<AppState> for RequireRole<R> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let identity = parts.extensions.get::<Identity>().cloned().ok_or(AppError::Unauthorized)?;
        check(state, &identity, R::ROLE)?;
        Ok(RequireRole(identity, PhantomData))
    }
}

fn check(state: &AppState, identity: &Identity, needed: Role) -> Result<(), AppError> {
    if identity.role < needed {
        state.metrics.error("forbidden");
        return Err(AppError::Forbidden(needed.as_str()));
    }
    Ok(())
}

/// The least role a request to `route` (the pattern it matched) needs by
/// its method: reading a viewer; deleting an admin; any other change an
/// uploader; a route of [`paths::OPEN_TO_VIEWERS`] a viewer.
pub(crate) fn floor(method: &Method, route: &str) -> Role {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || paths::OPEN_TO_VIEWERS.iter().any(|(m, r)| *m == method.as_str() && *r == route)
    {
        Role::Viewer
    } else if *method == Method::DELETE {
        Role::Admin
    } else {
        Role::Uploader
    }
}

/// Deny by default: the API's routes are mounted under this layer
/// (`route_layer`, so it sees the route a request matched and leaves 404s
/// and 405s to the router), which refuses a request whose identity is below
/// its route's [`floor`]. A write route that forgets its [`RequireRole`] is
/// still closed to viewers; one meant for viewers says so in
/// [`paths::OPEN_TO_VIEWERS`]. A handler's own `RequireRole` asks the same or more.
pub(crate) async fn deny_by_default(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or_else(|| request.uri().path(), MatchedPath::as_str);
    let needed = floor(request.method(), route);
    if needed == Role::Viewer {
        return next.run(request).await;
    }
    let Some(identity) = request.extensions().get::<Identity>() else {
        return AppError::Unauthorized.into_response();
    };
    match check(&state, identity, needed) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_need_an_uploader_deletes_an_admin_unless_declared_open() {
        assert_eq!(floor(&Method::GET, paths::SNAPSHOT.route()), Role::Viewer);
        assert_eq!(floor(&Method::PATCH, paths::SNAPSHOT.route()), Role::Uploader);
        assert_eq!(floor(&Method::DELETE, paths::SNAPSHOT.route()), Role::Admin);
        assert_eq!(floor(&Method::PUT, "/api/v1/a-future-route"), Role::Uploader);
        assert_eq!(floor(&Method::POST, paths::LINKS.route()), Role::Viewer);
        assert_eq!(floor(&Method::DELETE, paths::COMMENT.route()), Role::Viewer);
        assert_eq!(floor(&Method::DELETE, paths::COMMENTS.route()), Role::Admin);
        assert_eq!(floor(&Method::DELETE, paths::MCP.route()), Role::Admin);
    }

    /// The router mounts the API's routes from `vramscope_shared::api::paths`
    /// only, so that the hostile suite's walk of `paths::ROUTES` reaches
    /// every one of them.
    #[test]
    fn api_routes_are_mounted_from_the_declared_paths_only() {
        let http = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http");
        let mut literal = Vec::new();
        let mut folders = vec![http];
        while let Some(dir) = folders.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src/http").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    folders.push(path);
                } else if let Ok(text) = std::fs::read_to_string(&path) {
                    for (i, line) in text.lines().enumerate() {
                        let code = line.split("//").next().unwrap_or_default();
                        if code.contains("(\"/api/") && (code.contains("route(") || code.contains("nest")) {
                            literal.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                        }
                    }
                }
            }
        }
        assert!(
            literal.is_empty(),
            "routes mounted at a literal path, not a paths:: constant:\n{}",
            literal.join("\n")
        );
    }
}
