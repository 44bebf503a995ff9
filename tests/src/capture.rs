//! A `tracing` layer that keeps every span and event it sees, with their targets, levels
//! and fields, for tests that check what fusebox reports: install
//! [`Capture::subscriber`] as the thread's default (`tracing::subscriber::set_default`),
//! make calls, then read [`Capture::spans_named`] and [`Capture::events`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span: where it came from, every field recorded on it (at creation or later), and the
/// name of the span it was created in.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    /// The span's name.
    pub name: &'static str,
    /// Its target.
    pub target: String,
    /// Its level.
    pub level: Level,
    /// The name of its parent span, if it has one.
    pub parent: Option<&'static str>,
    /// Every field recorded on it, as text.
    pub fields: BTreeMap<String, String>,
    /// The fields the span declares, recorded or not.
    pub declared: Vec<&'static str>,
    /// Whether it was closed.
    pub closed: bool,
}

impl SpanRecord {
    /// A recorded field's value, as text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// One event: its target, level, fields (the message under `message`) and the span it was
/// emitted in.
#[derive(Debug, Clone)]
pub struct EventRecord {
    /// The event's target.
    pub target: String,
    /// Its level.
    pub level: Level,
    /// The name of the span it was emitted in, if any.
    pub span: Option<&'static str>,
    /// Its fields, as text (the message under `message`).
    pub fields: BTreeMap<String, String>,
}

impl EventRecord {
    /// A field's value, as text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Debug, Default)]
struct Captured {
    spans: Vec<SpanRecord>,
    events: Vec<EventRecord>,
}

/// The layer; clones share what was captured.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    captured: Arc<Mutex<Captured>>,
}

/// Where a span's record is kept (in the span's extensions).
struct Index(usize);

impl Capture {
    /// A subscriber (the registry, `filter`, this layer) to install as the default.
    pub fn subscriber(&self, filter: LevelFilter) -> impl Subscriber + Send + Sync + 'static {
        tracing_subscriber::registry()
            .with(filter)
            .with(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.captured.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every span so far.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.lock().spans.clone()
    }

    /// Every span so far named `name`.
    pub fn spans_named(&self, name: &str) -> Vec<SpanRecord> {
        self.lock()
            .spans
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<EventRecord> {
        self.lock().events.clone()
    }

    /// Forgets everything captured so far.
    pub fn clear(&self) {
        let mut captured = self.lock();
        captured.spans.clear();
        captured.events.clear();
    }
}

/// Writes each field as text.
struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name());
        let record = SpanRecord {
            name: meta.name(),
            target: meta.target().to_owned(),
            level: *meta.level(),
            parent,
            fields,
            declared: meta.fields().iter().map(|f| f.name()).collect(),
            closed: false,
        };
        let index = {
            let mut captured = self.lock();
            captured.spans.push(record);
            captured.spans.len() - 1
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Index(index));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let extensions = span.extensions();
        let Some(Index(index)) = extensions.get::<Index>() else {
            return;
        };
        let mut captured = self.lock();
        values.record(&mut Fields(&mut captured.spans[*index].fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let span = ctx.event_span(event).map(|span| span.name());
        self.lock().events.push(EventRecord {
            target: meta.target().to_owned(),
            level: *meta.level(),
            span,
            fields,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let extensions = span.extensions();
        if let Some(Index(index)) = extensions.get::<Index>() {
            self.lock().spans[*index].closed = true;
        }
    }
}
