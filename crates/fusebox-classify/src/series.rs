//! What every layer's metrics share: the `dependency` label, the description of a metric
//! family, and handles registered once and kept alive for exporters that forget idle
//! series.
//!
//! Each layer registers its `metrics` handles when it is built (a keyed breaker: when a key's
//! breaker is made) through a [`SeriesBuilder`], which puts the `dependency` label (and any
//! label common to the owner, such as a keyed breaker's `key`) on every series, and returns
//! plain [`metrics::Counter`]s and [`metrics::Gauge`]s for the call path: recording is an
//! atomic add on a handle, never a lookup, a string or an allocation.
//!
//! # Series that go away
//!
//! The `metrics` facade cannot delete a series. An exporter can forget the series nobody
//! updated for a while: `metrics-exporter-prometheus`'s
//! `idle_timeout(MetricKindMask::COUNTER | MetricKindMask::GAUGE, Some(t))`. That is how a
//! keyed breaker's evicted key, or a dropped layer, leaves a scrape. But such an exporter
//! forgets a *live* series that stayed quiet just as well (a closed breaker's state gauge
//! is set once), and a handle registered before the exporter forgot it records into
//! nothing from then on. So every counter and gauge made here is kept in a [`Series`] group
//! owned by the layer (or the key), and [`keep_alive`] touches every live group's handles
//! (adding zero: the value stays, the exporter sees an update). Call it at least once per
//! idle timeout — before rendering each scrape is simplest. A group whose owner is gone is
//! no longer touched, so its series age out.
//!
//! Histograms cannot be touched without recording a value: keep them out of the idle
//! timeout's mask. fusebox's histograms are labelled per dependency and route, never per
//! key, so their number stays bounded without it.

use metrics::{Counter, Gauge, Histogram, Label, SharedString};
use std::sync::{Arc, Mutex, Once, PoisonError, Weak};

/// The label naming the dependency on every fusebox metric.
pub const DEPENDENCY: &str = "dependency";

/// What kind of metric a family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A monotonic counter (`_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution, rendered by Prometheus exporters as `_bucket`, `_sum` and `_count`.
    Histogram,
}

impl Kind {
    /// `counter`, `gauge` or `histogram`, as Prometheus writes the type.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A metric family: its name, kind, labels and HELP text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The metric's name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Every label its series carry (some only on keyed breakers: see the layer's docs).
    pub labels: &'static [&'static str],
    /// What it measures (the HELP line).
    pub help: &'static str,
}

/// Describes every family of `families` to the installed recorder (the HELP and TYPE lines
/// of a Prometheus scrape).
pub fn describe(families: &[Family]) {
    for f in families {
        match f.kind {
            Kind::Counter => metrics::describe_counter!(f.name, f.help),
            Kind::Gauge => metrics::describe_gauge!(f.name, f.help),
            Kind::Histogram => metrics::describe_histogram!(f.name, f.help),
        }
    }
}

/// Describes `families` once per process (`once` is the caller's own), the first time a
/// layer registers its handles.
pub fn describe_once(once: &'static Once, families: &'static [Family]) {
    once.call_once(|| describe(families));
}

/// The handles of one owner (a layer, one key of a keyed breaker), kept alive by
/// [`keep_alive`] for as long as the owner holds this group.
#[derive(Debug, Default)]
pub struct Series {
    counters: Mutex<Vec<Counter>>,
    gauges: Mutex<Vec<Gauge>>,
}

impl Series {
    fn touch(&self) {
        for c in self
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            c.increment(0);
        }
        for g in self
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            g.increment(0.0);
        }
    }

    /// Keeps `counter` alive with this group (for a series registered after the builder
    /// finished, such as a transition counter made on its first transition).
    pub fn keep_counter(&self, counter: &Counter) {
        self.counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(counter.clone());
    }
}

/// Whether a recorder is installed (for this scope: a local recorder, else the global
/// one). With none, the `metrics` facade hands out no-op handles; an owner with many of
/// them (a keyed breaker's key) can skip making them. The facade's default recorder is a
/// zero-sized no-op, and a recorder that records anything holds some state, so the size of
/// the recorder in use tells them apart.
pub fn recording() -> bool {
    metrics::with_recorder(|recorder| std::mem::size_of_val(recorder) != 0)
}

/// Every live group, weakly: a dropped owner's group is no longer touched.
static LIVE: Mutex<Vec<Weak<Series>>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<Weak<Series>>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Touches every live series fusebox registered (adds zero to each counter and gauge), so
/// that an exporter with an idle timeout keeps them and forgets only those whose owner is
/// gone (see the [module docs](self)). Cheap enough to call before every scrape.
pub fn keep_alive() {
    let groups: Vec<Arc<Series>> = {
        let mut live = live();
        live.retain(|w| w.strong_count() > 0);
        live.iter().filter_map(Weak::upgrade).collect()
    };
    for g in groups {
        g.touch();
    }
}

/// Registers one owner's handles, with the labels they all carry.
#[derive(Debug)]
pub struct SeriesBuilder {
    labels: Vec<Label>,
    series: Arc<Series>,
}

impl SeriesBuilder {
    /// Handles labelled `dependency="<dependency>"`.
    pub fn new(dependency: &str) -> Self {
        SeriesBuilder {
            labels: vec![Label::new(DEPENDENCY, dependency.to_owned())],
            series: Arc::new(Series::default()),
        }
    }

    /// Adds a label every handle of this builder carries.
    pub fn label(mut self, key: &'static str, value: impl Into<SharedString>) -> Self {
        self.labels.push(Label::new(key, value));
        self
    }

    /// Adds a label every handle of this builder carries, if `value` is `Some`.
    pub fn label_opt(self, key: &'static str, value: Option<&str>) -> Self {
        match value {
            Some(v) => self.label(key, v.to_owned()),
            None => self,
        }
    }

    fn labels(&self, extra: &[(&'static str, SharedString)]) -> Vec<Label> {
        let mut labels = self.labels.clone();
        labels.extend(extra.iter().map(|(k, v)| Label::new(*k, v.clone())));
        labels
    }

    /// A counter named `name`, with the builder's labels and `extra`, kept alive.
    pub fn counter(&self, name: &'static str, extra: &[(&'static str, SharedString)]) -> Counter {
        let counter = metrics::counter!(name, self.labels(extra));
        self.series.keep_counter(&counter);
        counter
    }

    /// A gauge named `name`, with the builder's labels and `extra`, kept alive.
    pub fn gauge(&self, name: &'static str, extra: &[(&'static str, SharedString)]) -> Gauge {
        let gauge = metrics::gauge!(name, self.labels(extra));
        self.series
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(gauge.clone());
        gauge
    }

    /// A histogram named `name`, with the builder's labels and `extra` (not kept alive:
    /// see the [module docs](self)).
    pub fn histogram(
        &self,
        name: &'static str,
        extra: &[(&'static str, SharedString)],
    ) -> Histogram {
        metrics::histogram!(name, self.labels(extra))
    }

    /// The labels every handle carries, to register more handles later with the same ones.
    pub fn base_labels(&self) -> &[Label] {
        &self.labels
    }

    /// The group of handles made, registered with [`keep_alive`]. The owner keeps it as
    /// long as its series should stay.
    pub fn finish(self) -> Arc<Series> {
        let mut live = live();
        // Drop dead groups now and then, so that churning keys do not grow the list.
        if live.len() >= 64 && live.len().is_power_of_two() {
            live.retain(|w| w.strong_count() > 0);
        }
        live.push(Arc::downgrade(&self.series));
        self.series
    }
}

/// A static label value.
pub fn label(value: &'static str) -> SharedString {
    SharedString::const_str(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn handles_carry_the_dependency_and_keep_alive_skips_dropped_owners() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let b = SeriesBuilder::new("pay").label("key", "a".to_owned());
            let c = b.counter("t_total", &[("kind", label("x"))]);
            c.increment(2);
            let series = b.finish();
            let weak = Arc::downgrade(&series);
            keep_alive();
            assert!(weak.upgrade().is_some());
            drop(series);
            keep_alive();
            assert!(weak.upgrade().is_none());
            assert!(
                live()
                    .iter()
                    .all(|w| !std::ptr::eq(w.as_ptr(), weak.as_ptr()))
            );
        });
        let snap = snapshotter.snapshot().into_vec();
        let (key, _, _, value) = &snap[0];
        let labels: Vec<_> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        assert_eq!(
            labels,
            [
                ("dependency".to_owned(), "pay".to_owned()),
                ("key".to_owned(), "a".to_owned()),
                ("kind".to_owned(), "x".to_owned())
            ]
        );
        assert_eq!(value, &DebugValue::Counter(2));
    }
}
