//! What an adaptive limit keeps about a call while it is in flight: enough to classify it
//! (route, method, whether it is safe to repeat) and to time it, in one word.
//!
//! The classifier's `CallMeta` holds an `http::Method` (three words) and a clock reading
//! another; a response future that carries them grows past the 128 bytes the compiler
//! copies inline, and every call — adaptive or not, the future is one type — pays for the
//! extra `memcpy`s. So the admission time is kept in four bytes (microseconds, wrapping),
//! and the method in one: a code for the nine standard methods, or an index into the
//! limiter's small table of the extension methods it has seen.

use crate::limiter::{Limiter, micros};
use fusebox_classify::context::Scope;
use fusebox_classify::{
    Call, Classified, Classifier, Nanos, RouteId, STANDARD_METHODS, SharedVerdict, Verdict,
};
use http::{Method, Request};
use std::sync::{Mutex, PoisonError};

/// The standard methods, in code order.
const STANDARD: [Method; 9] = STANDARD_METHODS;

/// The most extension methods a limiter remembers; further ones share the last code.
const MAX_EXTENSIONS: usize = 255 - STANDARD.len();

/// Extension methods seen by one limiter: codes `9..` index this table.
#[derive(Debug, Default)]
pub(crate) struct ExtensionMethods {
    seen: Mutex<Vec<Method>>,
}

impl ExtensionMethods {
    fn code(&self, method: &Method) -> u8 {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match seen.iter().position(|m| m == method) {
            Some(i) => i,
            None if seen.len() < MAX_EXTENSIONS => {
                seen.push(method.clone());
                seen.len() - 1
            }
            // A limiter that has seen 246 distinct extension methods is being fed garbage;
            // the rest are classified as the last one it kept.
            None => MAX_EXTENSIONS - 1,
        };
        u8::try_from(STANDARD.len() + index).unwrap_or(u8::MAX)
    }

    fn method(&self, code: u8) -> Method {
        let index = usize::from(code).saturating_sub(STANDARD.len());
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(index).cloned().unwrap_or(Method::GET)
    }
}

/// A call under an adaptive limit: eight bytes, with a niche for `Option`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallInfo {
    /// Admission time, in the limiter clock's microseconds (wrapping).
    start: u32,
    route: RouteId,
    method: u8,
    idempotent: bool,
}

impl CallInfo {
    /// Reads the request once, before it is sent.
    pub(crate) fn new<B, C: Classifier>(
        limiter: &Limiter<C>,
        request: &Request<B>,
        scope: &mut Scope,
    ) -> Self {
        let meta = limiter.table.meta_in(request, scope);
        let (route, idempotent) = (meta.route(), meta.idempotent());
        let method = match STANDARD.iter().position(|m| m == request.method()) {
            Some(i) => i as u8,
            None => limiter.extension_methods.code(request.method()),
        };
        CallInfo {
            start: 0,
            route,
            method,
            idempotent,
        }
    }

    /// The call was admitted at `now`.
    pub(crate) fn admitted(&mut self, now: Nanos) {
        self.start = micros(now);
    }

    /// Asks the route's classifier about the call.
    pub(crate) fn classify<C: Classifier, R>(
        &self,
        limiter: &Limiter<C>,
        ask: impl FnOnce(&C, &Call<'_>) -> R,
    ) -> R {
        let table = &limiter.table;
        let route = table.route(self.route);
        let method = match STANDARD.get(usize::from(self.method)) {
            Some(m) => m.clone(),
            None => limiter.extension_methods.method(self.method),
        };
        let call = Call::new(self.route, table.name(self.route), &method, self.idempotent);
        ask(route.classifier(), &call)
    }

    /// Asks `shared` for the verdict of the route's classifier: the one another stage
    /// asked for already with the same table and route, else `ask`'s.
    #[inline]
    pub(crate) fn classify_shared<C: Classifier>(
        &self,
        limiter: &Limiter<C>,
        shared: &SharedVerdict,
        ask: impl FnOnce(&C, &Call<'_>) -> Classified,
    ) -> Classified {
        shared.classify(&limiter.table, self.route, |_| self.classify(limiter, ask))
    }

    /// [`classify_shared`](Self::classify_shared) for an answer whose verdict is always
    /// known (an error, the end of a stream).
    #[inline]
    pub(crate) fn verdict_shared<C: Classifier>(
        &self,
        limiter: &Limiter<C>,
        shared: &SharedVerdict,
        ask: impl FnOnce(&C, &Call<'_>) -> Verdict,
    ) -> Verdict {
        shared.verdict(&limiter.table, self.route, |_| self.classify(limiter, ask))
    }

    /// Feeds the verdict to the limiter's algorithm.
    pub(crate) fn record<C: Classifier>(&self, limiter: &Limiter<C>, verdict: Verdict) {
        limiter.record_verdict(self.route, verdict, self.start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConcurrencyLimitConfig, VegasConfig};
    use fusebox_classify::RouteTable;

    #[test]
    fn one_word_and_a_niche() {
        assert_eq!(std::mem::size_of::<Option<CallInfo>>(), 8);
    }

    #[test]
    fn methods_round_trip() {
        let config = ConcurrencyLimitConfig::builder()
            .vegas(VegasConfig::new())
            .build()
            .unwrap();
        let limiter = Limiter::new(&config, RouteTable::default(), &[]);
        let mut methods = STANDARD.to_vec();
        methods.push(Method::from_bytes(b"PURGE").unwrap());
        methods.push(Method::from_bytes(b"PROPFIND-WITH-A-VERY-LONG-NAME").unwrap());
        methods.push(Method::from_bytes(b"PURGE").unwrap());
        for m in methods {
            let req = Request::builder().method(m.clone()).body(()).unwrap();
            let info = CallInfo::new(&limiter, &req, &mut Scope::new());
            let (seen, idempotent) = info.classify(&limiter, |_, call| {
                (call.method().cloned(), call.idempotent())
            });
            assert_eq!(seen, Some(m.clone()));
            assert_eq!(idempotent, m.is_idempotent());
        }
        assert_eq!(limiter.extension_methods.seen.lock().unwrap().len(), 2);
    }
}
