//! The app's bodies: the HTML page (a sailfish template compiled from `templates/app.stpl`, which
//! HTML-escapes every value), the JSON object of one call, and the `_stats` JSON.
//!
//! Each renders into a caller's buffer — the worker's reused scratch buffer — so a warm worker
//! renders without allocating.

use std::cell::Cell;

use sailfish::runtime::Buffer;
use sailfish::TemplateSimple;
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use super::responders::Responders;

/// What one response shows: the word, its count after this call, and the worker that served it.
#[derive(Debug, Clone, Copy, Serialize, TemplateSimple)]
#[template(path = "app.stpl")]
pub struct Call<'a> {
    pub word: &'a str,
    pub count: u64,
    pub worker: usize,
}

impl Call<'_> {
    /// Renders the HTML page into `buf`, replacing its contents.
    ///
    /// # Errors
    /// When the template fails (it cannot with these fields, but sailfish's signature says so).
    pub fn html(self, buf: &mut Vec<u8>) -> Result<(), sailfish::RenderError> {
        // Hand the buffer's allocation to sailfish's `Buffer` and take it back after: no copy,
        // no allocation. The cleared buffer is valid UTF-8, so the conversion cannot fail.
        buf.clear();
        let text = String::from_utf8(std::mem::take(buf)).unwrap_or_default();
        let mut out = Buffer::from(text);
        let rendered = self.render_once_to(&mut out);
        *buf = out.into_string().into_bytes();
        rendered
    }

    /// Renders the JSON object into `buf`, replacing its contents:
    /// `{"word":"apple","count":3,"worker":0}`.
    ///
    /// # Errors
    /// Never in practice (writing to a `Vec` cannot fail); serde's signature says it may.
    pub fn json(self, buf: &mut Vec<u8>) -> serde_json::Result<()> {
        buf.clear();
        serde_json::to_writer(buf, &self)
    }
}

/// The `_stats` document: `{"seed":..,"source":"..","words":N,"counters":{"word":count,..},
/// "total":T}`. The total is summed from the same reads the counters show, so the two agree.
pub struct Stats<'a> {
    pub seed: u64,
    pub source: &'a str,
    pub responders: &'a Responders,
}

impl Stats<'_> {
    /// Renders the JSON into `buf`, replacing its contents.
    ///
    /// # Errors
    /// Never in practice (writing to a `Vec` cannot fail); serde's signature says it may.
    pub fn json(&self, buf: &mut Vec<u8>) -> serde_json::Result<()> {
        buf.clear();
        serde_json::to_writer(buf, self)
    }
}

impl Serialize for Stats<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let total = Cell::new(0u64);
        let mut doc = serializer.serialize_struct("Stats", 5)?;
        doc.serialize_field("seed", &self.seed)?;
        doc.serialize_field("source", self.source)?;
        doc.serialize_field("words", &self.responders.len())?;
        doc.serialize_field(
            "counters",
            &Counters {
                responders: self.responders,
                total: &total,
            },
        )?;
        doc.serialize_field("total", &total.get())?;
        doc.end()
    }
}

/// The counters as a JSON object, adding up what it writes into `total`.
struct Counters<'a> {
    responders: &'a Responders,
    total: &'a Cell<u64>,
}

impl Serialize for Counters<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let counts = self.responders.counts();
        let mut map = serializer.serialize_map(Some(counts.len()))?;
        for (word, count) in counts {
            self.total.set(self.total.get() + count);
            map.serialize_entry(word, &count)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_the_word_and_shows_every_field() {
        let mut buf = b"old contents".to_vec();
        Call {
            word: "AT&T's <b>\"x\"",
            count: 42,
            worker: 3,
        }
        .html(&mut buf)
        .unwrap();
        let page = String::from_utf8(buf).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
        assert!(!page.contains("old contents"));
        assert!(
            page.contains("<h1 id=\"word\">AT&amp;T&#039;s &lt;b&gt;&quot;x&quot;</h1>"),
            "{page}"
        );
        assert!(page.contains("<span id=\"count\">42</span>"), "{page}");
        assert!(page.contains("<span id=\"worker\">3</span>"), "{page}");
    }

    #[test]
    fn json_call() {
        let mut buf = b"old".to_vec();
        Call {
            word: "caf\u{e9} \"q\"",
            count: 7,
            worker: 1,
        }
        .json(&mut buf)
        .unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"word\":\"caf\u{e9} \\\"q\\\"\",\"count\":7,\"worker\":1}"
        );
    }

    #[test]
    fn stats_counts_and_totals() {
        let responders = Responders::new(vec!["b".into(), "a".into()]);
        responders.call(0);
        responders.call(1);
        responders.call(1);
        let mut buf = Vec::new();
        Stats {
            seed: 9,
            source: "embedded",
            responders: &responders,
        }
        .json(&mut buf)
        .unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            r#"{"seed":9,"source":"embedded","words":2,"counters":{"a":1,"b":2},"total":3}"#
        );
    }

    #[test]
    fn rendering_reuses_the_buffer() {
        let mut buf = Vec::with_capacity(4096);
        let before = buf.as_ptr();
        for count in 0..100 {
            Call {
                word: "apple",
                count,
                worker: 0,
            }
            .html(&mut buf)
            .unwrap();
        }
        assert_eq!(
            buf.as_ptr(),
            before,
            "the allocation was kept, not replaced"
        );
    }
}
