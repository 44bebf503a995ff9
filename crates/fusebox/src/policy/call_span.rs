//! The span of one call through a [`Policy`](crate::Policy): `policy_call`, `DEBUG`, target
//! `fusebox::policy` (the fields are listed in [`trace`](crate::trace)).
//!
//! # Why a span of its own
//!
//! The policy could instead record its fields on the caller's span. It does not: the
//! caller's span (a server's request span, say) may not exist, may not declare the fields
//! (`tracing` drops a value recorded for a field its span did not declare), and is one span
//! for several policies when a handler calls several dependencies. A span of its own carries
//! every field, nests under whatever span the caller has, holds the retry layer's
//! `retry_attempt` spans and every event the layers emit during the call, and lasts as long
//! as the call does (to the response head) — which makes it a trace span in OpenTelemetry.
//!
//! # What it costs when nobody wants it
//!
//! The span is `DEBUG`. When no subscriber enables `DEBUG` for `fusebox::policy`, creating it
//! is one comparison against `tracing`'s global level filter (or the callsite's cached
//! interest) and gives a disabled span: nothing else runs — no route lookup, no key, no
//! allocation, no formatting — and the call's future carries one null pointer. When it is
//! enabled, the fields are recorded as `&str`, `i64`s and booleans, never formatted here,
//! and the span's state is boxed (one allocation per call: the subscriber makes its own
//! anyway).

use crate::policy::Shared;
use crate::policy::key::BreakerKey;
use fusebox_breaker::{KeyFn, RequestHead};
use fusebox_classify::context::Scope;
use fusebox_classify::{CallMeta, Classified, Classifier, ErrorKind, Judgement, Outcome};
use http::{HeaderMap, Request, StatusCode};
use std::error::Error;
use std::sync::Arc;
use tracing::Span;
use tracing::field::Empty;

/// The answer a call ended with, as the span reports it.
pub(crate) enum Answer<'a> {
    /// A response (its status and headers).
    Response(StatusCode, &'a HeaderMap),
    /// An error.
    Error(&'a (dyn Error + 'static)),
}

/// The span of one call while it runs, with what its closing fields need.
pub(crate) struct CallSpan<C> {
    span: Span,
    meta: CallMeta,
    shared: Arc<Shared<C>>,
}

impl<C> CallSpan<C> {
    /// The span, to enter while the call runs.
    #[inline]
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }
}

impl<C: Classifier> CallSpan<C> {
    /// The call's span, or `None` (and nothing done) when no subscriber wants it.
    #[inline]
    pub(crate) fn start<B>(
        shared: &Arc<Shared<C>>,
        request: &Request<B>,
        scope: &mut Scope,
    ) -> Option<Box<Self>> {
        let span = tracing::debug_span!(
            target: crate::trace::POLICY,
            crate::trace::POLICY_CALL,
            policy = &*shared.name,
            route = Empty,
            key = Empty,
            attempts = Empty,
            outcome = Empty,
            status = Empty,
            rejection = Empty,
            error = Empty,
            fallback = Empty,
        );
        if span.is_disabled() {
            None
        } else {
            Some(Self::enabled(span, shared, request, scope))
        }
    }

    /// Records what is known when the call starts: its route and, for a keyed breaker, its
    /// key.
    #[cold]
    #[inline(never)]
    fn enabled<B>(
        span: Span,
        shared: &Arc<Shared<C>>,
        request: &Request<B>,
        scope: &mut Scope,
    ) -> Box<Self> {
        let routes = &shared.routes;
        let meta = routes.meta_in(request, scope);
        let route_name = routes.name(meta.route());
        span.record("route", route_name);
        if let Some(key_by) = &shared.key {
            let head = RequestHead::new(request, meta.route(), route_name);
            match key_by.key(&head) {
                BreakerKey::Route(id) => span.record("key", routes.name(id)),
                BreakerKey::Host(host) => span.record("key", host.as_str()),
                BreakerKey::Text(text) => span.record("key", text.as_str()),
                BreakerKey::Value(text) => span.record("key", text.as_str()),
            };
        }
        Box::new(CallSpan {
            span,
            meta,
            shared: Arc::clone(shared),
        })
    }

    /// Records how the call ended (the span closes when this is dropped, right after).
    /// `judged` is the verdict the stages gave the answer, read instead of classifying it
    /// again when it is the policy's table's for the call's route. Returns the verdict on
    /// a response (read or classified: the policy's table's for the call's route), for the
    /// exposed verdict to reuse.
    #[cold]
    #[inline(never)]
    pub(crate) fn finish(
        &self,
        attempts: u32,
        answer: Answer<'_>,
        fallback: bool,
        judged: Option<Judgement>,
    ) -> Option<Classified> {
        let span = &self.span;
        // As `i64`: OpenTelemetry's bridge keeps `i64`s as integer attributes (and would
        // write a `u64` as text).
        span.record("attempts", i64::from(attempts));
        let routes = &self.shared.routes;
        let known = judged.and_then(|j| j.of(routes, self.meta.route()));
        let call = self.meta.call(routes);
        let route = routes.route(self.meta.route());
        let classifier = route.classifier();
        let mut on_response = None;
        match answer {
            Answer::Response(status, headers) => {
                span.record("status", i64::from(status.as_u16()));
                let classified = match known {
                    Some(classified) => classified,
                    None => classifier.classify_response(&call, status, headers),
                };
                let outcome = match classified {
                    Classified::Ready(verdict) => outcome_label(verdict.outcome()),
                    // gRPC: decided by the trailers, after the response head (and the span).
                    Classified::AtEndOfStream => "trailers",
                };
                span.record("outcome", outcome);
                on_response = Some(classified);
            }
            Answer::Error(error) => {
                let kind = ErrorKind::of(error);
                match rejection_label(&kind) {
                    Some(rejection) => {
                        span.record("outcome", "rejected");
                        span.record("rejection", rejection);
                    }
                    None => {
                        let verdict = match known {
                            Some(Classified::Ready(verdict)) => verdict,
                            _ => classifier.classify_error(&call, error),
                        };
                        span.record("outcome", outcome_label(verdict.outcome()));
                        span.record("error", error_label(&kind));
                    }
                }
            }
        }
        if fallback {
            span.record("fallback", true);
        }
        on_response
    }
}

/// The `outcome` of a classified answer.
fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Success => "success",
        Outcome::Failure => "failure",
        Outcome::Ignored => "ignored",
    }
}

/// The `rejection` of an error fusebox made before the call reached the dependency, if it
/// is one ([`ErrorKind::is_rejection`]).
fn rejection_label(kind: &ErrorKind<'_>) -> Option<&'static str> {
    match kind {
        ErrorKind::CircuitOpen(_) => Some("circuit_open"),
        ErrorKind::Overloaded(_) | ErrorKind::TowerOverloaded(_) => Some("overloaded"),
        ErrorKind::DeadlineExceeded(_) => Some("deadline_exceeded"),
        ErrorKind::BudgetExhausted(_) => Some("budget_exhausted"),
        _ => None,
    }
}

/// The `error` of an error that is not a rejection.
fn error_label(kind: &ErrorKind<'_>) -> &'static str {
    match kind {
        ErrorKind::Elapsed(_) | ErrorKind::TowerElapsed(_) => "elapsed",
        ErrorKind::Io(_) => "io",
        _ => "other",
    }
}
