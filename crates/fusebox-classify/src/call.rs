//! What a classifier knows about the request behind a verdict.

use crate::route::RouteId;
use http::{HeaderMap, Method, Request};

/// The header whose presence makes a non-idempotent request safe to repeat.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The request side of one call, as the classifier sees it.
///
/// Cheap to build per call: it borrows the route's name from the route table and copies a
/// few flags; no allocation.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    route: RouteId,
    route_name: &'a str,
    /// `None` for a call that is not an HTTP request.
    method: Option<&'a Method>,
    idempotent: bool,
}

impl<'a> Call<'a> {
    /// A call on `route` (named `route_name`) with `method`.
    ///
    /// `idempotent` says whether the request is safe to repeat; see
    /// [`is_safe_to_repeat`].
    pub fn new(route: RouteId, route_name: &'a str, method: &'a Method, idempotent: bool) -> Self {
        Call {
            route,
            route_name,
            method: Some(method),
            idempotent,
        }
    }

    /// A call on `route` that is not an HTTP request: a call through
    /// `fusebox_breaker::PlainCircuitBreaker` (a database query, a cache lookup, any tower service). It has no method and is not
    /// known to be safe to repeat; only its errors are classified (an `Ok` answer is a
    /// success).
    pub fn plain(route: RouteId, route_name: &'a str) -> Self {
        Call {
            route,
            route_name,
            method: None,
            idempotent: false,
        }
    }

    /// The route this call was matched to.
    pub fn route(&self) -> RouteId {
        self.route
    }

    /// The route's name, as written in the route table (`"GET /users/{id}"`,
    /// `"/pkg.Service/Method"`, or `"default"`).
    pub fn route_name(&self) -> &'a str {
        self.route_name
    }

    /// The request method; `None` for a call that is not an HTTP request
    /// ([`Call::plain`]).
    pub fn method(&self) -> Option<&'a Method> {
        self.method
    }

    /// Whether the request is safe to repeat.
    pub fn idempotent(&self) -> bool {
        self.idempotent
    }
}

/// The nine standard methods of RFC 9110, in `http`'s order. They clone without
/// allocating (an extension method's clone allocates).
pub const STANDARD_METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
    Method::PATCH,
    Method::CONNECT,
    Method::TRACE,
];

/// Whether a request may be sent again: an idempotent method (RFC 9110 §9.2.2: GET, HEAD,
/// OPTIONS, TRACE, PUT, DELETE) or an `Idempotency-Key` header.
pub fn is_safe_to_repeat<B>(request: &Request<B>) -> bool {
    is_idempotent(request.method(), request.headers())
}

/// [`is_safe_to_repeat`] on a method and headers.
#[inline]
pub fn is_idempotent(method: &Method, headers: &HeaderMap) -> bool {
    method.is_idempotent() || headers.contains_key(IDEMPOTENCY_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_from_method_or_key() {
        let get = Request::get("/").body(()).unwrap();
        let post = Request::post("/").body(()).unwrap();
        let keyed = Request::post("/")
            .header("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
            .body(())
            .unwrap();
        let put = Request::put("/").body(()).unwrap();
        let patch = Request::patch("/").body(()).unwrap();
        assert!(is_safe_to_repeat(&get));
        assert!(is_safe_to_repeat(&put));
        assert!(!is_safe_to_repeat(&post));
        assert!(!is_safe_to_repeat(&patch));
        assert!(is_safe_to_repeat(&keyed));
    }
}
