//! An admin router for axum: list a [`Registry`]'s breakers and command them.
//!
//! [`AdminRouter`] turns a registry into an axum [`Router`] to mount where operators reach
//! it (`app.nest("/admin", admin)`):
//!
//! | method and path | what it does |
//! |---|---|
//! | `GET /breakers` | the registry's [`Listing`](crate::registry::Listing) as JSON: every policy and layer, its breaker's state, rates and keys, its limit, budget and settings |
//! | `GET /ready` | the registry's [`Readiness`](crate::registry::Readiness) as JSON: `200` when ready, `503` when not |
//! | `POST /breakers/command` | a JSON body `{"name": "payments", "command": "force_open"}` (and `"key"` for one key of a keyed breaker; without one, a keyed policy's dependency-wide breaker around its keys, if it has one); `command` is `force_open`, `disable`, `metrics_only` or `reset`. Answers `200` with `{"name", "key", "command", "from", "to", "by"}` |
//!
//! **The router is never mounted by itself**: nothing in fusebox serves it unless you do.
//! Mount it behind your own authentication (a middleware that knows your operators), on an
//! address only operators reach. On top of that, constructing it takes a [`Credential`],
//! and its mutating route refuses, with `401 Unauthorized`, any request that does not
//! carry it; the secret is compared in constant time. `GET` routes answer without it
//! unless [`AdminRouter::protect_reads`] says otherwise (a listing shows names and
//! settings, no secrets). A readiness probe usually lives elsewhere, unauthenticated:
//! [`readiness_router`] serves `GET /ready` alone.
//!
//! Every command carried out, and every request refused, is logged with `tracing` under
//! the target [`TARGET`] (`fusebox::admin`), with who asked — the credential's *name*,
//! never its secret — the entry, key and command, and the states before and after.
//!
//! ```
//! use axum::Router;
//! use fusebox::admin::{AdminRouter, Credential};
//! use fusebox::{CircuitBreakerConfig, Policy, Registry};
//!
//! let registry = Registry::new();
//! let policy = Policy::builder("payments")
//!     .circuit_breaker(CircuitBreakerConfig::builder())
//!     .registry(&registry)
//!     .build()?;
//! // The secret comes from the environment or a secret store, never from the code.
//! let secret = std::env::var("ADMIN_TOKEN").unwrap_or_default();
//! let admin = AdminRouter::new(registry, Credential::bearer("ops", secret)).into_router();
//! // Behind your authentication layer: `.layer(your_auth)` on the nested router.
//! let app: Router = Router::new().nest("/admin", admin);
//! # drop((app, policy));
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

use crate::registry::{CommandError, Registry};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::{get, post};
use fusebox_breaker::Command;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The `tracing` target of the admin router's events.
pub const TARGET: &str = crate::trace::ADMIN;

/// What a mutating admin request must carry: a name (who asks, in the logs) and a secret
/// (compared in constant time; never logged, never shown by `Debug`).
///
/// A credential with an empty secret matches no request: a router built with one refuses
/// every command, rather than accepting an empty header.
#[derive(Clone)]
pub struct Credential {
    name: Arc<str>,
    scheme: Scheme,
    secret: Arc<[u8]>,
}

#[derive(Clone)]
enum Scheme {
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// `<header>: <secret>`.
    Header(HeaderName),
}

/// What a request carried.
enum Presented {
    Missing,
    Wrong,
    Right,
}

impl Credential {
    /// A bearer token: the request carries `Authorization: Bearer <secret>`. `name` says
    /// who holds it (an operator, a team, a tool) in the logs.
    pub fn bearer(name: impl Into<Arc<str>>, secret: impl AsRef<[u8]>) -> Self {
        Credential {
            name: name.into(),
            scheme: Scheme::Bearer,
            secret: Arc::from(secret.as_ref()),
        }
    }

    /// A secret in a header of its own: the request carries `<header>: <secret>`.
    pub fn header(name: impl Into<Arc<str>>, header: HeaderName, secret: impl AsRef<[u8]>) -> Self {
        Credential {
            name: name.into(),
            scheme: Scheme::Header(header),
            secret: Arc::from(secret.as_ref()),
        }
    }

    /// Who holds the credential (what the logs say).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, headers: &HeaderMap) -> Presented {
        let presented = match &self.scheme {
            Scheme::Bearer => headers
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes())
                .and_then(|v| {
                    // The scheme's name is case-insensitive.
                    let (scheme, token) = v.split_at_checked(7)?;
                    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
                }),
            Scheme::Header(name) => headers.get(name).map(HeaderValue::as_bytes),
        };
        match presented {
            None => Presented::Missing,
            Some(_) if self.secret.is_empty() => Presented::Wrong,
            // Constant time in the secret's content (a length mismatch answers at once,
            // which tells only the length).
            Some(value) if bool::from(value.ct_eq(&self.secret)) => Presented::Right,
            Some(_) => Presented::Wrong,
        }
    }

    fn challenge(&self) -> Option<HeaderValue> {
        match self.scheme {
            Scheme::Bearer => Some(HeaderValue::from_static("Bearer realm=\"fusebox-admin\"")),
            Scheme::Header(_) => None,
        }
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match &self.scheme {
            Scheme::Bearer => "bearer".to_owned(),
            Scheme::Header(h) => format!("header {h}"),
        };
        f.debug_struct("Credential")
            .field("name", &self.name)
            .field("scheme", &scheme)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Builds the admin [`Router`] of a [`Registry`]; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct AdminRouter {
    registry: Registry,
    credential: Credential,
    protect_reads: bool,
    max_keys: usize,
}

impl AdminRouter {
    /// The admin routes of `registry`, whose command route requires `credential`.
    pub fn new(registry: Registry, credential: Credential) -> Self {
        AdminRouter {
            registry,
            credential,
            protect_reads: false,
            max_keys: crate::registry::DEFAULT_MAX_KEYS_LISTED,
        }
    }

    /// Whether the `GET` routes require the credential too (default: no; they change
    /// nothing and show no secret, and the router sits behind your authentication).
    pub fn protect_reads(mut self, protect: bool) -> Self {
        self.protect_reads = protect;
        self
    }

    /// The most keys of one keyed breaker that `GET /breakers` lists (default
    /// [`DEFAULT_MAX_KEYS_LISTED`](crate::registry::DEFAULT_MAX_KEYS_LISTED)).
    pub fn max_keys(mut self, max: usize) -> Self {
        self.max_keys = max;
        self
    }

    /// The router, to nest where operators reach it.
    pub fn into_router<S: Clone + Send + Sync + 'static>(self) -> Router<S> {
        let admin = Arc::new(self);
        let list = Arc::clone(&admin);
        let ready = Arc::clone(&admin);
        let command = admin;
        Router::new()
            .route(
                "/breakers",
                get(move |headers: HeaderMap| {
                    let admin = Arc::clone(&list);
                    async move { admin.list(&headers) }
                }),
            )
            .route(
                "/ready",
                get(move |headers: HeaderMap| {
                    let admin = Arc::clone(&ready);
                    async move {
                        match admin.authorize_read(&headers, "/ready") {
                            Some(refused) => refused,
                            None => readiness(&admin.registry),
                        }
                    }
                }),
            )
            .route(
                "/breakers/command",
                post(move |headers: HeaderMap, body: Bytes| {
                    let admin = Arc::clone(&command);
                    async move { admin.command(&headers, &body) }
                }),
            )
    }

    /// `None` when the request may go on; else the refusal.
    fn authorize(&self, headers: &HeaderMap, route: &'static str) -> Option<Response> {
        let reason = match self.credential.check(headers) {
            Presented::Right => return None,
            Presented::Missing => "missing credential",
            Presented::Wrong => "wrong credential",
        };
        tracing::warn!(target: TARGET, route, reason, "fusebox admin: request refused");
        let mut response = json(
            StatusCode::UNAUTHORIZED,
            &ErrorBody {
                error: "unauthorized",
            },
        );
        if let Some(challenge) = self.credential.challenge() {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        Some(response)
    }

    fn authorize_read(&self, headers: &HeaderMap, route: &'static str) -> Option<Response> {
        if self.protect_reads {
            self.authorize(headers, route)
        } else {
            None
        }
    }

    fn list(&self, headers: &HeaderMap) -> Response {
        if let Some(refused) = self.authorize_read(headers, "/breakers") {
            return refused;
        }
        json(StatusCode::OK, &self.registry.list_with(self.max_keys))
    }

    fn command(&self, headers: &HeaderMap, body: &[u8]) -> Response {
        if let Some(refused) = self.authorize(headers, "/breakers/command") {
            return refused;
        }
        let by = self.credential.name();
        let request: CommandRequest = match serde_json::from_slice(body) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!(target: TARGET, by, error = %e, "fusebox admin: invalid command");
                return json(
                    StatusCode::BAD_REQUEST,
                    &ErrorBody {
                        error: "the body must be {\"name\": ..., \"command\": \"force_open\" | \"disable\" | \"metrics_only\" | \"reset\", \"key\": ... (keyed breakers)}",
                    },
                );
            }
        };
        let key = request.key.as_deref();
        match self
            .registry
            .command(&request.name, key, request.command.into())
        {
            Ok(done) => {
                tracing::info!(
                    target: TARGET,
                    by,
                    name = %request.name,
                    key,
                    command = request.command.as_str(),
                    from = done.from.as_str(),
                    to = done.to.as_str(),
                    "fusebox admin: breaker commanded"
                );
                json(
                    StatusCode::OK,
                    &Done {
                        name: &request.name,
                        key,
                        command: request.command.as_str(),
                        from: done.from.as_str(),
                        to: done.to.as_str(),
                        by,
                    },
                )
            }
            Err(e) => {
                tracing::warn!(
                    target: TARGET,
                    by,
                    name = %request.name,
                    key,
                    command = request.command.as_str(),
                    error = %e,
                    "fusebox admin: command not carried out"
                );
                let status = match e {
                    CommandError::UnknownEntry | CommandError::UnknownKey => StatusCode::NOT_FOUND,
                    _ => StatusCode::BAD_REQUEST,
                };
                json(
                    status,
                    &ErrorMessage {
                        error: e.to_string(),
                    },
                )
            }
        }
    }
}

/// A router that serves `GET /ready` alone: `200` with the registry's
/// [`Readiness`](crate::registry::Readiness) as JSON while every mandatory dependency is
/// ready, `503` while one is not. Needs no credential: mount it where the orchestrator's
/// probe reaches it (`.merge(readiness_router(registry))`).
pub fn readiness_router<S: Clone + Send + Sync + 'static>(registry: Registry) -> Router<S> {
    Router::new().route(
        "/ready",
        get(move || {
            let registry = registry.clone();
            async move { readiness(&registry) }
        }),
    )
}

fn readiness(registry: &Registry) -> Response {
    let readiness = registry.readiness();
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(status, &readiness)
}

/// A command as the route takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandRequest {
    name: String,
    #[serde(default)]
    key: Option<String>,
    command: CommandName,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum CommandName {
    ForceOpen,
    Disable,
    MetricsOnly,
    Reset,
}

impl CommandName {
    fn as_str(self) -> &'static str {
        match self {
            CommandName::ForceOpen => "force_open",
            CommandName::Disable => "disable",
            CommandName::MetricsOnly => "metrics_only",
            CommandName::Reset => "reset",
        }
    }
}

impl From<CommandName> for Command {
    fn from(c: CommandName) -> Command {
        match c {
            CommandName::ForceOpen => Command::ForceOpen,
            CommandName::Disable => Command::Disable,
            CommandName::MetricsOnly => Command::MetricsOnly,
            CommandName::Reset => Command::Reset,
        }
    }
}

#[derive(Serialize)]
struct Done<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    command: &'static str,
    from: &'static str,
    to: &'static str,
    by: &'a str,
}

#[derive(Serialize)]
struct ErrorBody {
    error: &'static str,
}

#[derive(Serialize)]
struct ErrorMessage {
    error: String,
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(_) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}
