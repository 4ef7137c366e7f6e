//! The requests a run sends, built once from the `LoadConfig` and a target's URL: HTTP/1.x
//! bytes, or HTTP/2 fields for `--h2`; and the smooth weighted order in which the URLs of one
//! host take turns.
//!
//! Building only: `prepare` lays the bytes out per host as a `plan::RequestBatch`, and no
//! request is built again once the threads start.

use lowlat_http::head::is_connection_specific;

use crate::config::LoadConfig;
use crate::error::LoadError;
use crate::plan::H2Request;
use crate::url::Url;

/// Longest weighted cycle of URLs on one host (sum of weights after dividing by their gcd).
const MAX_CYCLE: u64 = 10_000;

/// Whether the requests use `HEAD`, so that their responses have no body.
pub(crate) fn is_head(cfg: &LoadConfig) -> bool {
    cfg.method == "HEAD"
}

/// The bytes of one request, built once.
pub(crate) fn build_request(cfg: &LoadConfig, url: &Url) -> Result<Vec<u8>, LoadError> {
    let mut r = Vec::with_capacity(128);
    r.extend_from_slice(cfg.method.as_bytes());
    r.push(b' ');
    r.extend_from_slice(url.target.as_bytes());
    r.extend_from_slice(if cfg.http10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    push_fields(&mut r, cfg, url);
    if !sets(cfg, "connection") {
        if !cfg.keep_alive {
            r.extend_from_slice(b"Connection: close\r\n");
        } else if cfg.http10 {
            r.extend_from_slice(b"Connection: keep-alive\r\n");
        }
    }
    if let Some(body) = &cfg.body {
        r.extend_from_slice(b"Content-Length: ");
        r.extend_from_slice(body.len().to_string().as_bytes());
        r.extend_from_slice(b"\r\n\r\n");
        r.extend_from_slice(body);
    } else {
        r.extend_from_slice(b"\r\n");
    }
    if r.len() > 1 << 20 {
        return Err(LoadError::Config(
            "request larger than 1 MiB; use a smaller body".into(),
        ));
    }
    Ok(r)
}

/// Whether a `-H` sets field `name`.
fn sets(cfg: &LoadConfig, name: &str) -> bool {
    cfg.headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case(name))
}

/// `Host` (the URL's authority, unless a `-H` gives one) and the `-H` fields, each line ended.
fn push_fields(r: &mut Vec<u8>, cfg: &LoadConfig, url: &Url) {
    if !sets(cfg, "host") {
        r.extend_from_slice(b"Host: ");
        r.extend_from_slice(url.authority().as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    for (k, v) in &cfg.headers {
        r.extend_from_slice(k.as_bytes());
        r.extend_from_slice(b": ");
        r.extend_from_slice(v.trim().as_bytes());
        r.extend_from_slice(b"\r\n");
    }
}

/// `--ws`: the opening handshake's bytes up to its key (RFC 6455 §4.1), which each connection
/// appends (`Sec-WebSocket-Key: …` and the blank line): the same target, `Host` and `-H` fields
/// as an HTTP request would carry.
pub(crate) fn build_ws_handshake(cfg: &LoadConfig, url: &Url) -> Vec<u8> {
    let mut r = Vec::with_capacity(256);
    r.extend_from_slice(b"GET ");
    r.extend_from_slice(url.target.as_bytes());
    r.extend_from_slice(b" HTTP/1.1\r\n");
    push_fields(&mut r, cfg, url);
    r.extend_from_slice(
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n",
    );
    r
}

/// One request as HTTP/2 fields: `:method`, `:scheme`, `:authority` (the URL's, or a `Host`
/// given with `-H`), `:path`, then the other fields with their names in lower case, without
/// HTTP/1.1's connection-specific ones.
pub(crate) fn build_h2_request(cfg: &LoadConfig, url: &Url) -> H2Request {
    let authority = cfg
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or_else(|| url.authority(), |(_, v)| v.trim().to_owned());
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), cfg.method.as_bytes().to_vec()),
        (
            b":scheme".to_vec(),
            if url.tls { &b"https"[..] } else { b"http" }.to_vec(),
        ),
        (b":authority".to_vec(), authority.into_bytes()),
        (b":path".to_vec(), url.target.as_bytes().to_vec()),
    ];
    for (k, v) in &cfg.headers {
        let k = k.to_ascii_lowercase();
        // `Host` is `:authority`; `TE` is sent only as `trailers`.
        if k == "host"
            || is_connection_specific(k.as_bytes())
            || (k == "te" && !v.trim().eq_ignore_ascii_case("trailers"))
        {
            continue;
        }
        fields.push((k.into_bytes(), v.trim().as_bytes().to_vec()));
    }
    if let Some(body) = &cfg.body {
        fields.push((
            b"content-length".to_vec(),
            body.len().to_string().into_bytes(),
        ));
    }
    H2Request {
        fields,
        body: cfg.body.clone(),
    }
}

/// One request's bytes on an HTTP/3 request stream: a HEADERS frame (QPACK with the static
/// table and literals only, so the same bytes serve every connection and need no encoder
/// stream), then the body as one DATA frame.
pub(crate) fn build_h3_request(req: &H2Request) -> Vec<u8> {
    use lowlat_http::h3::{frame, head, qpack};
    let get = |name: &[u8]| {
        req.fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[][..], |(_, v)| &v[..])
    };
    let line = head::RequestLine {
        method: get(b":method"),
        scheme: get(b":scheme"),
        authority: get(b":authority"),
        path: get(b":path"),
        protocol: None,
    };
    let rest = req
        .fields
        .iter()
        .filter(|(n, _)| !n.starts_with(b":"))
        .map(|(n, v)| (&n[..], &v[..]));
    let mut out = Vec::new();
    head::write_request(&qpack::Encoder::new(true), &line, rest, &mut out);
    if let Some(body) = &req.body {
        frame::put_data_header(&mut out, body.len() as u64);
        out.extend_from_slice(body);
    }
    out
}

/// Smooth weighted round-robin (as nginx balances upstreams): `a@3, b@1` gives `a a b a`
/// rather than `a a a b`, so a short run still sees every URL in proportion.
pub(crate) fn weighted_cycle(weights: impl Iterator<Item = u32>) -> Result<Vec<usize>, LoadError> {
    let weights: Vec<u64> = weights.map(u64::from).collect();
    let g = weights.iter().copied().fold(0, gcd);
    let weights: Vec<i64> = weights.iter().map(|w| (w / g.max(1)) as i64).collect();
    let total: i64 = weights.iter().sum();
    if total as u64 > MAX_CYCLE {
        return Err(LoadError::Config(format!(
            "URL weights too fine: their sum (after dividing by their gcd) must be at most {MAX_CYCLE}"
        )));
    }
    let mut current = vec![0i64; weights.len()];
    let mut cycle = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in current.iter_mut().zip(&weights) {
            *c += w;
        }
        let (best, _) = current
            .iter()
            .enumerate()
            .max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i)))
            .unwrap_or((0, &0));
        current[best] -= total;
        cycle.push(best);
    }
    Ok(cycle)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::url::parse_url;

    #[test]
    fn requests_are_built_once_with_the_right_fields() {
        let url = parse_url("http://127.0.0.1:8080/x").unwrap();
        let cfg = LoadConfig::default();
        assert_eq!(
            build_request(&cfg, &url).unwrap(),
            b"GET /x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
        );
        let cfg = LoadConfig {
            method: "POST".into(),
            headers: vec![("X-A".into(), "1".into()), ("host".into(), "h".into())],
            body: Some(b"hi".to_vec()),
            keep_alive: false,
            ..LoadConfig::default()
        };
        assert_eq!(
            build_request(&cfg, &url).unwrap(),
            b"POST /x HTTP/1.1\r\nX-A: 1\r\nhost: h\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"
        );
        let cfg = LoadConfig {
            http10: true,
            ..LoadConfig::default()
        };
        let url = parse_url("http://a/").unwrap();
        assert_eq!(
            build_request(&cfg, &url).unwrap(),
            b"GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n"
        );
    }

    /// `--h2`: the pseudo-fields first, `Host` as `:authority`, the connection's own fields
    /// left out, `TE` only as `trailers`, the rest lower-cased.
    #[test]
    fn h2_requests_leave_the_connections_fields_out() {
        let url = parse_url("https://127.0.0.1:8443/x").unwrap();
        let cfg = LoadConfig {
            headers: [
                ("Host", "h"),
                ("Connection", "close"),
                ("Proxy-Connection", "x"),
                ("Keep-Alive", "5"),
                ("Transfer-Encoding", "chunked"),
                ("Upgrade", "h2c"),
                ("TE", "gzip"),
                ("X-A", "1"),
                ("TE", " Trailers "),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            ..LoadConfig::default()
        };
        let want: Vec<(Vec<u8>, Vec<u8>)> = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "h"),
            (":path", "/x"),
            ("x-a", "1"),
            ("te", "Trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        assert_eq!(build_h2_request(&cfg, &url).fields, want);
    }

    #[test]
    fn cycles_are_smooth() {
        assert_eq!(weighted_cycle([1].into_iter()).unwrap(), vec![0]);
        assert_eq!(
            weighted_cycle([3, 1].into_iter()).unwrap(),
            vec![0, 0, 1, 0]
        );
        assert_eq!(weighted_cycle([2, 2].into_iter()).unwrap(), vec![0, 1]);
        assert!(weighted_cycle([10_000, 1].into_iter()).is_err());
    }
}
