//! The lines of `teamster serve --log-format json`: one JSON object per event, with its
//! `timestamp`, `level`, `target`, the event's fields at the top level and the current span as
//! `span` (its `name` and fields). No object repeats a key: a field named like one of those keys,
//! or recorded twice, is kept under the next free name (`message_1`, ...), so every JSON parser
//! reads the same line (with repeated keys, most keep the last value and some refuse the line).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The keys every line starts with; an event's fields never take them.
const LINE_KEYS: [&str; 4] = ["timestamp", "level", "target", "span"];

/// The JSON event format; span fields are recorded with [`JsonFields`].
#[derive(Debug, Default)]
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(&self, context: &FmtContext<'_, S, JsonFields>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = Map::new();
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        line.insert("timestamp".to_owned(), Value::String(timestamp));
        line.insert("level".to_owned(), Value::String(event.metadata().level().to_string()));
        line.insert("target".to_owned(), Value::String(event.metadata().target().to_owned()));
        if let Some(span) = context.lookup_current() {
            let mut object = Map::new();
            object.insert("name".to_owned(), Value::String(span.name().to_owned()));
            let extensions = span.extensions();
            let recorded = extensions.get::<FormattedFields<JsonFields>>().map(|fields| fields.fields.as_str());
            // The span's fields as `JsonFields` wrote them: one JSON object (empty without fields).
            if let Some(Ok(Value::Object(fields))) = recorded.filter(|text| !text.is_empty()).map(serde_json::from_str) {
                for (key, value) in fields {
                    insert_unique(&mut object, key, value);
                }
            }
            line.insert("span".to_owned(), Value::Object(object));
        }
        event.record(&mut Fields(&mut line));
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// Inserts `value` under `key`, or under the first of `key_1`, `key_2`, ... not yet taken.
fn insert_unique(object: &mut Map<String, Value>, key: String, value: Value) {
    let taken = |object: &Map<String, Value>, key: &str| object.contains_key(key) || LINE_KEYS.contains(&key);
    if !taken(object, &key) {
        object.insert(key, value);
        return;
    }
    let free = (1..).map(|number| format!("{key}_{number}")).find(|candidate| !taken(object, candidate));
    if let Some(free) = free {
        object.insert(free, value);
    }
}

/// Records an event's fields into a line.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        insert_unique(self.0, field.name().to_owned(), value);
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer keeping what the subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("the buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The keys of one JSON object as written, in order, repeats included.
    fn keys_of(line: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut depth = 0;
        let mut chars = line.chars().peekable();
        let mut expecting_key = false;
        while let Some(char) = chars.next() {
            match char {
                '{' => {
                    depth += 1;
                    expecting_key = depth == 1;
                }
                '}' => depth -= 1,
                ',' if depth == 1 => expecting_key = true,
                '"' => {
                    let mut text = String::new();
                    while let Some(next) = chars.next() {
                        match next {
                            '\\' => text.extend(chars.next()),
                            '"' => break,
                            other => text.push(other),
                        }
                    }
                    if expecting_key {
                        keys.push(text);
                        expecting_key = false;
                    }
                }
                _ => {}
            }
        }
        keys
    }

    #[test]
    fn no_line_repeats_a_key() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("turn", turn_id = "turn_1", name = "not the span's name");
            let _entered = span.enter();
            // The fields that collide: with the message, the line's own keys, and each other.
            tracing::error!(status = 500, message = "upstream broke", target = "x", level = 3, "request failed");
        });
        let text = String::from_utf8(captured.0.lock().expect("the buffer").clone()).expect("UTF-8");
        let line = text.lines().next().expect("one line");
        let mut keys = keys_of(line);
        let written = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), written, "a repeated key in {line}");
        let value: Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(value["message"], "request failed");
        assert_eq!(value["message_1"], "upstream broke");
        assert_eq!(value["target_1"], "x");
        assert_eq!(value["level"], "ERROR");
        assert_eq!(value["status"], 500);
        assert_eq!(value["span"]["name"], "turn");
        assert_eq!(value["span"]["name_1"], "not the span's name");
        assert_eq!(value["span"]["turn_id"], "turn_1");
    }
}
