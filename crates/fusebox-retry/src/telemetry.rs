//! The retry layer's metrics: every series carries `dependency`, the layer's name (a
//! `Policy` names an unnamed retry budget after itself; used alone, `"default"`).
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | [`ATTEMPTS_TOTAL`] `fusebox_retry_attempts_total` | counter | `dependency` | attempts sent: first attempts, retries and hedges |
//! | [`RETRIES_TOTAL`] `fusebox_retry_retries_total` | counter | `dependency` | retries the budget granted |
//! | [`HEDGES_TOTAL`] `fusebox_retry_hedges_total` | counter | `dependency` | hedges the budget granted |
//! | [`BUDGET_EXHAUSTED_TOTAL`] `fusebox_retry_budget_exhausted_total` | counter | `dependency` | retries and hedges refused: the budget was spent |
//! | [`CUTOFF_REFUSALS_TOTAL`] `fusebox_retry_cutoff_refusals_total` | counter | `dependency` | retries and hedges refused: the failure rate passed the cut-off |
//!
//! Together they are the retry's calls by outcome: `attempts - retries - hedges` first
//! attempts, and the two refusals.

use fusebox_classify::series::{self, Family, Kind};
use std::sync::Once;

/// Counter: attempts sent (first attempts, retries and hedges).
pub const ATTEMPTS_TOTAL: &str = "fusebox_retry_attempts_total";
/// Counter: retries the budget granted.
pub const RETRIES_TOTAL: &str = "fusebox_retry_retries_total";
/// Counter: hedges the budget granted.
pub const HEDGES_TOTAL: &str = "fusebox_retry_hedges_total";
/// Counter: retries and hedges refused because the budget was spent.
pub const BUDGET_EXHAUSTED_TOTAL: &str = "fusebox_retry_budget_exhausted_total";
/// Counter: retries and hedges refused because the failure rate passed the cut-off.
pub const CUTOFF_REFUSALS_TOTAL: &str = "fusebox_retry_cutoff_refusals_total";

/// Every family the retry layer records, with its labels and HELP text.
pub const FAMILIES: &[Family] = &[
    Family {
        name: ATTEMPTS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency"],
        help: "Attempts sent by fusebox's retry layer: first attempts, retries and hedges.",
    },
    Family {
        name: RETRIES_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency"],
        help: "Retries the retry budget granted.",
    },
    Family {
        name: HEDGES_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency"],
        help: "Hedges (backup requests) the retry budget granted.",
    },
    Family {
        name: BUDGET_EXHAUSTED_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency"],
        help: "Retries and hedges refused because the retry budget was spent.",
    },
    Family {
        name: CUTOFF_REFUSALS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency"],
        help: "Retries and hedges refused because the dependency's failure rate passed the cut-off.",
    },
];

/// Describes the retry layer's families once per process (every layer does it when built).
pub fn describe() {
    static ONCE: Once = Once::new();
    series::describe_once(&ONCE, FAMILIES);
}
