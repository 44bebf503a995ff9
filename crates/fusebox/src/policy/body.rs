//! The response body of a [`PolicyService`](crate::PolicyService).

use crate::policy::stages::GuardedBody;
use bytes::Bytes;
use fusebox_classify::{BoxError, Classifier};
use http_body::{Body, Frame, SizeHint};
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The body the layers of a policy make of the dependency's body `B`: the breaker's and
/// the limit's end-of-stream bookkeeping around it, in one wrapper.
pub type StackBody<B, C> = GuardedBody<B, C>;

/// The response body of a policy: the dependency's body as the layers wrap it, or the body
/// of a [fallback](crate::Fallback) response.
///
/// Its data type is the dependency's (`B::Data`); a fallback's bytes are converted with
/// `From<Bytes>`, which `Bytes` itself (hyper, axum, tonic) satisfies.
#[pin_project]
pub struct PolicyBody<B, C: Classifier> {
    #[pin]
    kind: Kind<B, C>,
}

#[pin_project(project = KindProj)]
enum Kind<B, C: Classifier> {
    Inner(#[pin] StackBody<B, C>),
    Fallback(Option<Bytes>),
}

impl<B, C: Classifier> PolicyBody<B, C> {
    pub(crate) fn inner(body: StackBody<B, C>) -> Self {
        PolicyBody {
            kind: Kind::Inner(body),
        }
    }

    pub(crate) fn fallback(bytes: Bytes) -> Self {
        PolicyBody {
            kind: Kind::Fallback((!bytes.is_empty()).then_some(bytes)),
        }
    }

    /// Whether this is the body of a fallback response.
    pub fn is_fallback(&self) -> bool {
        matches!(self.kind, Kind::Fallback(_))
    }

    /// The dependency's own body, when no layer waits for its end any more (the verdict
    /// came from the response head and the limit's permit is back, as for a body that was
    /// empty); else this body, unchanged.
    ///
    /// For glue that must hand the body on as another type (axum's `Body`): a body that
    /// needs no more bookkeeping is handed on as it is instead of boxed.
    // The `Err` is the body itself, handed back unchanged (it carries the breakers' and the
    // limit's end-of-stream bookkeeping, `tests/tests/layout.rs`): boxing it would allocate
    // on a path the glue takes for every streamed response.
    #[allow(clippy::result_large_err)]
    pub fn into_inner(self) -> Result<B, Self> {
        let outer = match self.kind {
            Kind::Inner(outer) => outer,
            kind => return Err(PolicyBody { kind }),
        };
        outer.into_inner().map_err(PolicyBody::inner)
    }
}

impl<B, C: Classifier> fmt::Debug for PolicyBody<B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner(_) => f.write_str("PolicyBody::Inner(..)"),
            Kind::Fallback(b) => f.debug_tuple("PolicyBody::Fallback").field(b).finish(),
        }
    }
}

impl<B, C> Body for PolicyBody<B, C>
where
    B: Body,
    B::Error: Into<BoxError>,
    B::Data: From<Bytes>,
    C: Classifier,
{
    type Data = B::Data;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner(body) => body.poll_frame(cx),
            KindProj::Fallback(bytes) => {
                Poll::Ready(bytes.take().map(|b| Ok(Frame::data(B::Data::from(b)))))
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner(body) => body.is_end_stream(),
            Kind::Fallback(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner(body) => body.size_hint(),
            Kind::Fallback(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}
