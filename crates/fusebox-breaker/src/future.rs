//! The breaker's response future and body.

use crate::breaker::EosRecorder;
use crate::service::BreakerStage;
use fusebox_classify::ClassifiedBody;
use fusebox_classify::stage::{Http, StagedFuture};
use http::Request;

/// The response body of a breaker-wrapped service: the inner body, reporting the call's
/// verdict at the end of the stream when the response head could not decide it (gRPC).
pub type ResponseBody<B, C, St> = ClassifiedBody<B, EosRecorder<C, St>>;

/// The future of [`CircuitBreaker`](crate::CircuitBreaker) around `S` called with
/// `Request<B>`: the inner call, or a rejection. It is the stage runner's future.
pub type ResponseFuture<S, B, C, St> = StagedFuture<S, Request<B>, BreakerStage<C, St>, Http>;
