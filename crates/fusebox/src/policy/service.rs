//! The policy's service.

use crate::policy::Shared;
use crate::policy::body::PolicyBody;
use crate::policy::call_span::CallSpan;
use crate::policy::future::{FallbackCall, ResponseFuture};
use crate::policy::stack::Stack;
use fusebox_classify::context::Scope;
use fusebox_classify::{BoxError, Classifier, StandardClassifier};
use fusebox_retry::ReplayBody;
use http::{Request, Response};
use http_body::Body;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// A service behind a [`Policy`](crate::Policy): retry budget → circuit breaker →
/// concurrency limit → timeout → `S`.
///
/// `S` receives `Request<ReplayBody<B>>` (the retry layer's body, so that a request can be
/// sent again) whichever layers are configured; responses come back as
/// [`PolicyBody`]s, errors as [`BoxError`] (downcast to fusebox's
/// [`error`](crate::error) types).
pub struct PolicyService<S, C = StandardClassifier> {
    stack: Stack<S, C>,
    shared: Arc<Shared<C>>,
}

impl<S, C> PolicyService<S, C> {
    pub(crate) fn new(stack: Stack<S, C>, shared: Arc<Shared<C>>) -> Self {
        PolicyService { stack, shared }
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The layers, as services.
    pub fn stack(&self) -> &Stack<S, C> {
        &self.stack
    }
}

impl<S: Clone, C: Classifier> Clone for PolicyService<S, C> {
    fn clone(&self) -> Self {
        PolicyService {
            stack: self.stack.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, C> fmt::Debug for PolicyService<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyService")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl<S, C, B, RB> Service<Request<B>> for PolicyService<S, C>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Data: Clone,
    B::Error: Into<BoxError>,
    RB: Body,
    RB::Error: Into<BoxError>,
    C: Classifier,
{
    type Response = Response<PolicyBody<RB, C>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, B, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.stack.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = &self.shared;
        if let Some(ramp) = &shared.ramp {
            ramp.tick();
        }
        // What is resolved about the call here (for a fallback, for the call's span) the
        // layers inside read instead of resolving it again; the retry resolves it first
        // otherwise, and the breaker, limit and timeout read the retry's resolution.
        let mut scope = Scope::new();
        let fallback = if shared.fallback.is_none() && !shared.expose_verdict {
            None
        } else {
            let route = shared.routes.resolve_in(&request, &mut scope);
            let fallback = shared
                .fallback
                .as_ref()
                .is_some_and(|armed| armed.applies_on(route));
            let expose = shared.expose_verdict;
            (fallback || expose).then(|| FallbackCall {
                shared: Arc::clone(shared),
                route,
                method: request.method().clone(),
                fallback,
                expose,
            })
        };
        // `policy_call`: `None` at once unless a subscriber wants DEBUG from
        // `fusebox::policy`. Entered while the layers take the call, so that their events
        // and the retry layer's attempt spans belong to it.
        let span = CallSpan::start(shared, &request, &mut scope);
        if span.is_none() && fallback.is_none() && !scope.hands_on() {
            // Nothing to enter and nothing to give back if the layers' `call` unwinds: with
            // no drop on that path, the layers' future (hundreds of bytes) is written
            // straight into this one's place instead of built aside and copied.
            drop((fallback, span));
            return ResponseFuture::new(self.stack.call(request), None, None);
        }
        let _current = scope.hand_on();
        let inner = match &span {
            None => self.stack.call(request),
            Some(span) => {
                let _entered = span.span().enter();
                self.stack.call(request)
            }
        };
        ResponseFuture::new(inner, fallback, span)
    }
}
