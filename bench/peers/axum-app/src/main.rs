//! lowlat's dynamic app written the way an axum user would write it: the comparison peer for
//! `lowlat serve`'s `/app` in `bench/specs/dynamic.toml`.
//!
//! At start it picks N words (default 1000) with a seedable RNG from /usr/share/dict/words, or
//! from an embedded list when that file is absent; each word is a responder with a call counter.
//! `GET /app/` draws a random key and routes to the responder found by ordered prefix lookup
//! (binary search over the sorted words), `GET /app/{prefix}` to the first word with that
//! prefix (404 if none), `GET /app/_stats` returns every counter. Responses are JSON when the
//! Accept header contains application/json, else an askama HTML template; both show the word,
//! its count after this call, and the worker thread that served it. `/plaintext` and `/json`
//! are the TechEmpower endpoints.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use clap::Parser;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(name = "lowlat-axum-peer", about = "lowlat's dynamic app, written with axum")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8086")]
    listen: SocketAddr,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Words (responders) to pick.
    #[arg(long, default_value_t = 1000)]
    app_words: usize,
    /// Seed of the word choice and of the request routing.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Word list to pick from [default: /usr/share/dict/words, else the embedded list].
    #[arg(long)]
    words: Option<std::path::PathBuf>,
}

/// One word and its call counter.
struct Responder {
    word: String,
    calls: AtomicU64,
}

/// Shared state: responders sorted by word, so that lookups are binary searches.
struct App {
    responders: Vec<Responder>,
    seed: u64,
}

const EMBEDDED_WORDS: &str = include_str!("words.txt");

thread_local! {
    /// Index of the tokio worker thread, set when the thread starts.
    static WORKER: Cell<usize> = const { Cell::new(0) };
    /// Per-thread RNG for routing `/app/`, seeded from `--seed` and the worker index.
    static RNG: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

impl App {
    fn new(text: &str, n: usize, seed: u64) -> Self {
        // Only words that are safe in a URL path segment without escaping.
        let mut all: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphabetic()))
            .collect();
        all.sort_unstable();
        all.dedup();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut words: Vec<&str> = all.choose_multiple(&mut rng, n.min(all.len())).copied().collect();
        words.sort_unstable();
        let responders = words
            .into_iter()
            .map(|w| Responder { word: w.to_owned(), calls: AtomicU64::new(0) })
            .collect();
        Self { responders, seed }
    }

    /// The first responder whose word is ≥ `key`, wrapping to the first one.
    fn at_or_after(&self, key: &str) -> &Responder {
        let i = self.responders.partition_point(|r| r.word.as_str() < key);
        &self.responders[i % self.responders.len()]
    }

    /// The first responder whose word starts with `prefix`.
    fn with_prefix(&self, prefix: &str) -> Option<&Responder> {
        let i = self.responders.partition_point(|r| r.word.as_str() < prefix);
        self.responders.get(i).filter(|r| r.word.starts_with(prefix))
    }
}

#[derive(Serialize)]
struct WordJson<'a> {
    word: &'a str,
    count: u64,
    worker: usize,
}

#[derive(Template)]
#[template(path = "word.html")]
struct WordPage<'a> {
    word: &'a str,
    count: u64,
    worker: usize,
}

#[derive(Serialize)]
struct Message {
    message: &'static str,
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("application/json"))
}

fn respond(r: &Responder, headers: &HeaderMap) -> Response {
    let count = r.calls.fetch_add(1, Ordering::Relaxed) + 1;
    let worker = WORKER.with(Cell::get);
    if wants_json(headers) {
        return Json(WordJson { word: &r.word, count, worker }).into_response();
    }
    match (WordPage { word: &r.word, count, worker }).render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn random_word(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    // A random two-letter key, looked up in the ordered words: the seed app's random routing.
    let key: String = RNG.with(|cell| {
        let mut slot = cell.borrow_mut();
        let rng = slot.get_or_insert_with(|| SmallRng::seed_from_u64(app.seed ^ (WORKER.with(Cell::get) as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        (0..2).map(|_| char::from(b'a' + rng.random_range(0..26u8))).collect()
    });
    respond(app.at_or_after(&key), &headers)
}

async fn prefix_word(State(app): State<Arc<App>>, Path(prefix): Path<String>, headers: HeaderMap) -> Response {
    if prefix == "_stats" {
        let stats: serde_json::Map<String, serde_json::Value> = app
            .responders
            .iter()
            .map(|r| (r.word.clone(), r.calls.load(Ordering::Relaxed).into()))
            .collect();
        return Json(stats).into_response();
    }
    match app.with_prefix(&prefix) {
        Some(r) => respond(r, &headers),
        None => (StatusCode::NOT_FOUND, "no word with that prefix\n").into_response(),
    }
}

async fn plaintext() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain")], "Hello, World!")
}

async fn json() -> impl IntoResponse {
    Json(Message { message: "Hello, World!" })
}

fn main() {
    let args = Args::parse();
    let text = match &args.words {
        Some(p) => std::fs::read_to_string(p).unwrap_or_else(|e| exit(&format!("{}: {e}", p.display()))),
        None => std::fs::read_to_string("/usr/share/dict/words").unwrap_or_else(|_| EMBEDDED_WORDS.to_owned()),
    };
    let app = App::new(&text, args.app_words, args.seed);
    if app.responders.is_empty() {
        exit("the word list has no usable words");
    }
    let app = Arc::new(app);
    let next_worker = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.max(1))
        .enable_all()
        .on_thread_start(move || {
            let id = next_worker.fetch_add(1, Ordering::Relaxed);
            WORKER.with(|w| w.set(id));
        })
        .build()
        .unwrap_or_else(|e| exit(&format!("cannot start the runtime: {e}")));
    runtime.block_on(async move {
        let router = Router::new()
            .route("/plaintext", get(plaintext))
            .route("/json", get(json))
            .route("/app/", get(random_word))
            .route("/app/{prefix}", get(prefix_word))
            .with_state(app);
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .unwrap_or_else(|e| exit(&format!("cannot listen on {}: {e}", args.listen)));
        eprintln!("lowlat-axum-peer: listening on {} ({} worker{})", args.listen, args.workers, if args.workers == 1 { "" } else { "s" });
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            exit(&format!("server error: {e}"));
        }
    });
}

fn exit(msg: &str) -> ! {
    eprintln!("lowlat-axum-peer: {msg}");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_and_prefix_lookup() {
        let app = App::new("pear\napple\nbanana\nap<ple\n", 10, 7);
        let words: Vec<&str> = app.responders.iter().map(|r| r.word.as_str()).collect();
        assert_eq!(words, ["apple", "banana", "pear"]);
        assert_eq!(app.with_prefix("ba").map(|r| r.word.as_str()), Some("banana"));
        assert!(app.with_prefix("z").is_none());
        assert_eq!(app.at_or_after("b").word, "banana");
        assert_eq!(app.at_or_after("zz").word, "apple", "wraps around");
    }

    #[test]
    fn seeded_choice_is_repeatable() {
        let a = App::new(EMBEDDED_WORDS, 1000, 42);
        let b = App::new(EMBEDDED_WORDS, 1000, 42);
        assert_eq!(a.responders.len(), 1000);
        assert!(a.responders.iter().zip(&b.responders).all(|(x, y)| x.word == y.word));
    }
}
