//! The shared Classifier of fusebox.
//!
//! Every fusebox layer — circuit breaker, retry budget, concurrency limit, timeout — asks the
//! same question of a finished call: *what does this say about the dependency's health?*
//! This crate gives the one answer they all read, per route:
//!
//! - an [`Outcome`] — [`Success`](Outcome::Success), [`Failure`](Outcome::Failure) or
//!   [`Ignored`](Outcome::Ignored) — plus whether the call was slow and whether a retry may
//!   help ([`Verdict`], [`RetryHint`]);
//! - from an HTTP status ([`HttpClassifier`]), a gRPC status in the headers or trailers
//!   ([`GrpcClassifier`]), or an error ([`classify_error_chain`]), through the
//!   [`Classifier`] trait;
//! - chosen per route by a [`RouteTable`] keyed by method and path template, axum's
//!   `MatchedPath`, or a gRPC method path, so that a 429 can open one breaker and be ignored
//!   by another;
//! - at the end of the stream when the verdict is in the trailers, through
//!   [`ClassifiedBody`] — for gRPC-Web too, whose status comes in a trailer frame at the
//!   end of the body ([`grpc_web`]).
//!
//! A rule of your own is a closure away ([`classify_fn`]); a tower-http response classifier
//! (`ServerErrorsAsFailures`, `GrpcErrorsAsFailures`, ...) serves as one through
//! `TowerHttpClassifier` (feature `tower-http`).
//!
//! It also holds what every layer shares: fusebox's own [`error`] types (so each layer can
//! recognise the others' rejections), the [`Clock`] that paused tokio time drives, and
//! [`ConfigError`].
//!
//! # Example
//!
//! ```
//! use fusebox_classify::{Classified, Classifier, HttpClassifier, Outcome, Route, RouteTable, StandardClassifier};
//! use http::{HeaderMap, Method, Request, StatusCode};
//! use std::time::Duration;
//!
//! // A partner API whose 429s mean it is struggling, and an internal one whose 429s are our
//! // own tenant throttle.
//! let table = RouteTable::builder(Route::default())
//!     .route("POST /partner/charge", Route::new(StandardClassifier::new().count_throttling(true)))
//!     .route("GET /internal/{*rest}", Route::default().slow_call_duration(Duration::from_millis(200)))
//!     .build()?;
//!
//! let request = Request::post("/partner/charge").body(())?;
//! let meta = table.meta(&request);
//! let route = table.route(meta.route());
//! let verdict = match route.classifier().classify_response(&meta.call(&table), StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new()) {
//!     Classified::Ready(verdict) => verdict,
//!     Classified::AtEndOfStream => unreachable!("plain HTTP is decided by the status"),
//! };
//! assert_eq!(verdict.outcome(), Outcome::Failure);
//! assert_eq!(HttpClassifier::new().outcome(StatusCode::TOO_MANY_REQUESTS), Outcome::Ignored);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod body;
mod call;
mod classifier;
pub mod clock;
pub mod config;
pub mod context;
pub mod deadline;
pub mod error;
pub mod fn_classifier;
pub mod grpc;
pub mod grpc_web;
pub mod http;
mod outcome;
pub mod route;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod section;
pub mod series;
pub mod shard;
pub mod stage;
#[cfg(feature = "tower-http")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower-http")))]
pub mod tower_http;
pub mod verdict;

pub use crate::body::{ClassifiedBody, OnEndOfStream, StreamEnd};
pub use crate::call::{Call, IDEMPOTENCY_KEY, STANDARD_METHODS, is_idempotent, is_safe_to_repeat};
pub use crate::classifier::{Classifier, Protocol, StandardClassifier, classify_error_chain};
pub use crate::clock::{Clock, Nanos};
pub use crate::config::{ConfigError, Problem, Validator};
pub use crate::deadline::Deadline;
pub use crate::error::{BoxError, ErrorKind};
pub use crate::fn_classifier::{FnClassifier, classify_fn};
pub use crate::grpc::{Code, GrpcClassifier};
pub use crate::http::{HttpClassifier, StatusSet};
pub use crate::outcome::{Classified, Outcome, RetryAfter, RetryHint, Verdict};
pub use crate::route::{
    CallMeta, Inherited, Route, RouteId, RouteRef, RouteTable, RouteTableBuilder, RouteTimeouts,
    SlowThresholds,
};
#[cfg(feature = "tower-http")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower-http")))]
pub use crate::tower_http::TowerHttpClassifier;
pub use crate::verdict::{AnswerVerdict, Judgement, SharedVerdict};

// The README is the crate's page on crates.io: its example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
