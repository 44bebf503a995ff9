//! The response future.

use crate::partition::Unpartitioned;
use crate::service::LimitStage;
use fusebox_classify::StandardClassifier;
use fusebox_classify::stage::{Http, StagedFuture};
use http::Request;

/// The future of [`ConcurrencyLimit`](crate::ConcurrencyLimit) around `S` called with
/// `Request<B>`: waits in the queue if it has to, calls the inner service, and hands the
/// permit to the response body or gives it back. It is the stage runner's future.
pub type ResponseFuture<S, B, C = StandardClassifier, P = Unpartitioned> =
    StagedFuture<S, Request<B>, LimitStage<C, P>, Http>;
