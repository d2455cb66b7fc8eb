//! The role a route needs, declared on the route: a handler that changes
//! or deletes takes [`RequireRole`] as its first argument (so it is
//! checked before anything else is read of the request, its body included),
//! and a mounted service takes [`require`] as a layer. Reading needs only
//! a viewer, which every identity the middleware lets through is: a
//! handler that reads declares nothing.

use std::marker::PhantomData;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

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

/// The role a request needs by its method, for [`require`].
pub(crate) type RoleOf = fn(&axum::http::Method) -> Role;

/// A layer's check for a mounted service (`middleware::from_fn_with_state`):
/// the role `needed` gives for the request's method.
pub(crate) async fn require(
    State((state, needed)): State<(AppState, RoleOf)>,
    request: Request,
    next: Next,
) -> Response {
    let Some(identity) = request.extensions().get::<Identity>() else {
        return AppError::Unauthorized.into_response();
    };
    match check(&state, identity, needed(request.method())) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}
