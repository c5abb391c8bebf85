//! The Prometheus text exposition format (version 0.0.4), written by hand, and the fixed-bucket
//! [`Histogram`] it renders: a sample is one scan of a short bucket list and two atomic adds.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A histogram of durations with fixed upper bounds, in seconds.
pub(crate) struct Histogram {
    /// The buckets' upper bounds, rising; the `+Inf` bucket is implicit.
    bounds: &'static [f64],
    /// The samples of each bucket alone (not cumulative), the last one for `+Inf`.
    counts: Box<[AtomicU64]>,
    /// The sum of every sample, in nanoseconds.
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_nanos: AtomicU64::new(0) }
    }

    pub(crate) fn observe(&self, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let bucket = self.bounds.iter().position(|bound| seconds <= *bound).unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// A metrics page being written: each family's `# HELP` and `# TYPE`, then its samples.
#[derive(Default)]
pub(crate) struct Page {
    text: String,
}

/// A sample's labels, as name and value pairs.
pub(crate) type Labels<'a> = &'a [(&'a str, &'a str)];

impl Page {
    /// Starts a family; `kind` is `counter`, `gauge` or `histogram`. A counter's `# HELP` and
    /// `# TYPE` lines name its `_total` samples, as the 0.0.4 text format's parsers match them
    /// (under the bare name, Prometheus's own parser reads the samples as an untyped family).
    pub(crate) fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Page {
        let suffix = if kind == "counter" { "_total" } else { "" };
        let _ = writeln!(self.text, "# HELP {name}{suffix} {help}\n# TYPE {name}{suffix} {kind}");
        self
    }

    /// A sample of the family just started (`name` carries a counter's `_total`).
    pub(crate) fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) -> &mut Page {
        self.text.push_str(name);
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {}", number(value));
        self
    }

    /// The samples of a histogram: cumulative buckets, sum and count.
    pub(crate) fn histogram(&mut self, name: &str, labels: Labels<'_>, histogram: &Histogram) -> &mut Page {
        let mut cumulative = 0;
        for (index, count) in histogram.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let bound = histogram.bounds.get(index).map_or_else(|| "+Inf".to_owned(), |bound| number(*bound));
            let _ = write!(self.text, "{name}_bucket");
            write_labels(&mut self.text, labels, Some(&bound));
            let _ = writeln!(self.text, " {cumulative}");
        }
        let sum = histogram.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, cumulative as f64)
    }

    pub(crate) fn into_text(self) -> String {
        self.text
    }
}

/// `{a="1",le="0.5"}`, or nothing for no labels; values escaped as the format says.
fn write_labels(text: &mut String, labels: Labels<'_>, le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    text.push('{');
    let all = labels.iter().copied().chain(le.map(|bound| ("le", bound)));
    for (index, (name, value)) in all.enumerate() {
        if index > 0 {
            text.push(',');
        }
        let _ = write!(text, "{name}=\"");
        for character in value.chars() {
            match character {
                '\\' => text.push_str("\\\\"),
                '"' => text.push_str("\\\""),
                '\n' => text.push_str("\\n"),
                other => text.push(other),
            }
        }
        text.push('"');
    }
    text.push('}');
}

/// A sample value as Prometheus reads it: integers without a fraction.
fn number(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_with_escaped_labels() {
        let histogram = Histogram::new(&[0.5, 1.0]);
        histogram.observe(Duration::from_millis(250));
        histogram.observe(Duration::from_millis(750));
        histogram.observe(Duration::from_secs(3));
        let mut page = Page::default();
        page.family("x_seconds", "histogram", "A test.").histogram("x_seconds", &[("tool", "a\"b\\")], &histogram);
        assert_eq!(
            page.into_text(),
            "# HELP x_seconds A test.\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{tool=\"a\\\"b\\\\\",le=\"0.5\"} 1\n\
             x_seconds_bucket{tool=\"a\\\"b\\\\\",le=\"1\"} 2\n\
             x_seconds_bucket{tool=\"a\\\"b\\\\\",le=\"+Inf\"} 3\n\
             x_seconds_sum{tool=\"a\\\"b\\\\\"} 4\n\
             x_seconds_count{tool=\"a\\\"b\\\\\"} 3\n"
        );
    }
}
