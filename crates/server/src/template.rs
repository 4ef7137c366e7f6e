//! Text with nginx-style variables (`https://$host$request_uri`, `${uri}.html`), split once at
//! config load into literal pieces and variables, and expanded per request by walking the pieces:
//! no parsing, no lookup by name and no allocation on the request path (the caller owns the
//! output buffer).
//!
//! [`split`] only finds the `$name` / `${name}` places; each user maps names to its own
//! variables: [`Template`] (for `return` rules and `try_files`) knows the request's
//! `$scheme $host $request_uri $uri $args $query_string $server_port`; compiled with
//! [`Template::compile_request`] (the cache's key and conditions) it also knows the request's
//! fields, cookies and query arguments (`$request_method $is_args $http_NAME $cookie_NAME
//! $arg_NAME`), which a `Location` must not carry; the access log's `log_format`
//! (`crate::log_format`) knows more. `$$` is a literal `$`.

use lowlat_http::request::Request;

/// One piece of a text: literal bytes, or a variable's name (without `$` and braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    Literal(String),
    Var(&'a str),
}

/// Splits `text` into literal pieces and variable names. A name is `[A-Za-z0-9_]+` after `$`
/// (nginx's rule), or anything up to `}` in `${…}` (so `${uri}.html` ends the name where `$uri.html`
/// would too, and `${uri}x` where `$urix` would not).
///
/// # Errors
/// A `$` with no name after it, or a `${` without its `}`.
pub fn split(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut lit = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        lit.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            lit.push('$');
            rest = more;
            continue;
        }
        let (name, next) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("{text:?}: `${{` without its `}}`"))?;
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "{text:?}: `$` must name a variable (`$$` for a dollar sign)"
            ));
        }
        if !lit.is_empty() {
            out.push(Piece::Literal(std::mem::take(&mut lit)));
        }
        out.push(Piece::Var(name));
        rest = next;
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        out.push(Piece::Literal(lit));
    }
    Ok(out)
}

/// A variable of a `return` rule or a `try_files` entry (and, the last five, of a template
/// compiled with [`Template::compile_request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `http` or `https`.
    Scheme,
    /// The request's host, lower-cased and without a port (`Host`, or HTTP/2's `:authority`),
    /// else the site's first server name.
    Host,
    /// The request-target as received: path and query, percent-encoding kept.
    RequestUri,
    /// The path without the query, percent-encoding kept (unlike nginx's decoded `$uri`, so a
    /// `%0d%0a` in it cannot become a line break in a `Location` field).
    Uri,
    /// The query without its `?` (`$args`, `$query_string`); empty when there is none.
    Args,
    /// The port of the listener of the request's scheme.
    ServerPort,
    /// `GET`, `HEAD`, … as received.
    Method,
    /// `?` when the request has a query, else nothing.
    IsArgs,
    /// A request field by its lower-case name, `_` read as `-` (`$http_accept_language`);
    /// several lines of it joined with `,`.
    Http(Box<str>),
    /// A cookie's value, by its name as written (`$cookie_session`).
    Cookie(Box<str>),
    /// A query argument's value, as written (`$arg_page`), the first when repeated.
    Arg(Box<str>),
}

impl Var {
    /// The variables these templates know, by name.
    pub const NAMES: [(&'static str, Var); 7] = [
        ("scheme", Var::Scheme),
        ("host", Var::Host),
        ("request_uri", Var::RequestUri),
        ("uri", Var::Uri),
        ("args", Var::Args),
        ("query_string", Var::Args),
        ("server_port", Var::ServerPort),
    ];
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(Box<[u8]>),
    Var(Var),
}

/// A text compiled once: literal bytes and [`Var`]s in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What a template's variables are expanded from, beside the request itself.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub tls: bool,
    /// The port of the first clear-text and the first TLS listener, when the settings know it.
    pub ports: Ports,
    /// The site's first server name: `$host` when the request names none.
    pub server_name: Option<&'a str>,
}

/// The listening ports, for `$server_port` and the HTTPS redirect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ports {
    pub clear: Option<u16>,
    pub tls: Option<u16>,
}

/// Why a template cannot be expanded for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpandError {
    /// `$host` is needed and the request names no valid host (and the site has no name): 400.
    NoHost,
}

impl Template {
    /// Compiles `text`.
    ///
    /// # Errors
    /// A malformed `$`, or a variable these templates do not know (named, with the known ones).
    pub fn compile(text: &str) -> Result<Self, String> {
        Self::compile_with(text, false)
    }

    /// Compiles `text`, which may also name the request's method, fields, cookies and query
    /// arguments (`$request_method $is_args $http_NAME $cookie_NAME $arg_NAME`): for what is
    /// matched or keyed on, never written into a response.
    ///
    /// # Errors
    /// As [`Template::compile`].
    pub fn compile_request(text: &str) -> Result<Self, String> {
        Self::compile_with(text, true)
    }

    fn compile_with(text: &str, request: bool) -> Result<Self, String> {
        let parts = split(text)?
            .into_iter()
            .map(|p| match p {
                Piece::Literal(l) => Ok(Part::Literal(l.into_bytes().into_boxed_slice())),
                Piece::Var(name) => {
                    let found = Var::NAMES
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| v.clone())
                        .or_else(|| request.then(|| request_var(name)).flatten());
                    found.map(Part::Var).ok_or_else(|| {
                        let extra = if request {
                            " $request_method $is_args $http_NAME $cookie_NAME $arg_NAME"
                        } else {
                            ""
                        };
                        format!(
                            "unknown variable ${name} (known: {}{extra})",
                            Var::NAMES.map(|(n, _)| format!("${n}")).join(" ")
                        )
                    })
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { parts })
    }

    /// Whether the template uses `v`.
    #[must_use]
    pub fn uses(&self, v: &Var) -> bool {
        self.parts.contains(&Part::Var(v.clone()))
    }

    /// The literal text of a template without variables.
    #[must_use]
    pub fn literal(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for p in &self.parts {
            match p {
                Part::Literal(l) => out.extend_from_slice(l),
                Part::Var(_) => return None,
            }
        }
        Some(out)
    }

    /// Appends the template expanded for `req` to `out`.
    ///
    /// # Errors
    /// [`ExpandError::NoHost`] when `$host` is used and there is no valid host to put there.
    pub fn expand(
        &self,
        req: &Request<'_, '_>,
        cx: &Context<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), ExpandError> {
        for p in &self.parts {
            match p {
                Part::Literal(l) => out.extend_from_slice(l),
                Part::Var(v) => expand_var(v, req, cx, out)?,
            }
        }
        Ok(())
    }
}

/// The request-only variable `name` (`$http_…`, `$cookie_…`, `$arg_…`, …), if it is one.
fn request_var(name: &str) -> Option<Var> {
    let named = |prefix: &str| name.strip_prefix(prefix).filter(|n| !n.is_empty());
    if let Some(field) = named("http_") {
        return Some(Var::Http(
            field.to_ascii_lowercase().replace('_', "-").into(),
        ));
    }
    if let Some(cookie) = named("cookie_") {
        return Some(Var::Cookie(cookie.into()));
    }
    if let Some(arg) = named("arg_") {
        return Some(Var::Arg(arg.into()));
    }
    match name {
        "request_method" => Some(Var::Method),
        "is_args" => Some(Var::IsArgs),
        _ => None,
    }
}

/// The value of cookie `name` in the request's `Cookie` fields (`a=1; b=2`).
#[must_use]
pub fn cookie<'b>(req: &Request<'_, 'b>, name: &str) -> Option<&'b [u8]> {
    req.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        .flat_map(|h| h.value.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|&b| b == b'=')?;
            (pair[..eq].trim_ascii() == name.as_bytes()).then(|| pair[eq + 1..].trim_ascii())
        })
}

/// The value of query argument `name` (`a=1&b=2`): the first, as written; empty for `?a`.
fn arg<'b>(query: Option<&'b str>, name: &str) -> Option<&'b [u8]> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v.as_bytes())
    })
}

fn expand_var(
    v: &Var,
    req: &Request<'_, '_>,
    cx: &Context<'_>,
    out: &mut Vec<u8>,
) -> Result<(), ExpandError> {
    match v {
        Var::Method => out.extend_from_slice(req.method_token.as_bytes()),
        Var::IsArgs => {
            if req.query.is_some() {
                out.push(b'?');
            }
        }
        Var::Http(name) => {
            let mut first = true;
            for h in req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
            {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(h.value);
            }
        }
        Var::Cookie(name) => out.extend_from_slice(cookie(req, name).unwrap_or_default()),
        Var::Arg(name) => out.extend_from_slice(arg(req.query, name).unwrap_or_default()),
        Var::Scheme => out.extend_from_slice(if cx.tls { b"https" } else { b"http" }),
        Var::Host => match req.header("host").and_then(host_name) {
            Some(h) => out.extend(h.iter().map(u8::to_ascii_lowercase)),
            None => match cx.server_name {
                Some(n) if !n.starts_with('*') => out.extend_from_slice(n.as_bytes()),
                _ => return Err(ExpandError::NoHost),
            },
        },
        Var::RequestUri => out.extend_from_slice(req.target.as_bytes()),
        Var::Uri => out.extend_from_slice(req.path.as_bytes()),
        Var::Args => out.extend_from_slice(req.query.unwrap_or("").as_bytes()),
        Var::ServerPort => {
            let port = if cx.tls { cx.ports.tls } else { cx.ports.clear };
            if let Some(p) = port {
                out.extend_from_slice(itoa::Buffer::new().format(p).as_bytes());
            }
        }
    }
    Ok(())
}

/// The host name of a `Host` value without its port (`example.com:8080` → `example.com`,
/// `[::1]:8080` → `[::1]`), when it is a valid one (RFC 3986 reg-name or IP literal characters
/// only): anything else must not reach a `Location` field or a file path.
#[must_use]
pub fn host_name(value: &[u8]) -> Option<&[u8]> {
    let name = if value.first() == Some(&b'[') {
        let end = value.iter().position(|&b| b == b']')?;
        let (name, rest) = value.split_at(end + 1);
        if !(rest.is_empty() || rest[0] == b':' && rest[1..].iter().all(u8::is_ascii_digit)) {
            return None;
        }
        if !name[1..end]
            .iter()
            .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        name
    } else {
        let name = match value.iter().rposition(|&b| b == b':') {
            Some(at) if value[at + 1..].iter().all(u8::is_ascii_digit) => &value[..at],
            Some(_) => return None,
            None => value,
        };
        if !name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return None;
        }
        name
    };
    let name = name.strip_suffix(b".").unwrap_or(name);
    (!name.is_empty() && name.len() <= 253).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::Status;

    #[test]
    fn splitting() {
        let cases: &[(&str, Result<Vec<Piece<'_>>, ()>)] = &[
            ("plain", Ok(vec![Piece::Literal("plain".into())])),
            (
                "https://$host$request_uri",
                Ok(vec![
                    Piece::Literal("https://".into()),
                    Piece::Var("host"),
                    Piece::Var("request_uri"),
                ]),
            ),
            (
                "${uri}x.html",
                Ok(vec![Piece::Var("uri"), Piece::Literal("x.html".into())]),
            ),
            (
                "$uri.html",
                Ok(vec![Piece::Var("uri"), Piece::Literal(".html".into())]),
            ),
            ("a$$b", Ok(vec![Piece::Literal("a$b".into())])),
            ("a$", Err(())),
            ("a$-", Err(())),
            ("${uri", Err(())),
            ("${u-ri}", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(split(text).map_err(|_| ()), *want, "{text}");
        }
    }

    #[test]
    fn unknown_variables_are_named() {
        let e = Template::compile("https://$hots/").unwrap_err();
        assert!(e.contains("$hots") && e.contains("$host"), "{e}");
    }

    #[test]
    fn expansion() {
        let t = Template::compile("$scheme://$host:$server_port$uri?$args|$request_uri").unwrap();
        let raw = b"GET /a%20b/c?x=1&y HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\n";
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
        else {
            panic!()
        };
        let cx = Context {
            tls: true,
            ports: Ports {
                clear: Some(80),
                tls: Some(8443),
            },
            server_name: None,
        };
        let mut out = Vec::new();
        t.expand(&req, &cx, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "https://example.com:8443/a%20b/c?x=1&y|/a%20b/c?x=1&y"
        );
    }

    /// The request's method, fields, cookies and arguments: only in a template compiled for
    /// matching, never in one whose text reaches a response.
    #[test]
    fn request_variables() {
        assert!(Template::compile("$cookie_a").is_err());
        assert!(Template::compile_request("$cookie_").is_err());
        let t = Template::compile_request(
            "$request_method|$uri$is_args$args|$http_x_user|$cookie_sid|$arg_b|$arg_none|$cookie_none",
        )
        .unwrap();
        let raw = b"GET /p?a=1&b=2&b=3 HTTP/1.1\r\nHost: h\r\nX-User: u1\r\nCookie: x=0; sid=s 1 \r\nx-user: u2\r\n\r\n";
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
        else {
            panic!()
        };
        let cx = Context {
            tls: false,
            ports: Ports::default(),
            server_name: None,
        };
        let mut out = Vec::new();
        t.expand(&req, &cx, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET|/p?a=1&b=2&b=3|u1,u2|s 1|2||"
        );
        assert_eq!(cookie(&req, "x"), Some(&b"0"[..]));
    }

    #[test]
    fn host_names() {
        let cases: &[(&str, Option<&str>)] = &[
            ("example.com", Some("example.com")),
            ("example.com:8080", Some("example.com")),
            ("example.com.", Some("example.com")),
            ("[::1]:8080", Some("[::1]")),
            ("[::1]", Some("[::1]")),
            ("a b", None),
            ("a\"b", None),
            ("ex/ample", None),
            ("example.com:x", None),
            ("[::1]x", None),
            ("", None),
            (":80", None),
        ];
        for &(value, want) in cases {
            assert_eq!(
                host_name(value.as_bytes()),
                want.map(str::as_bytes),
                "{value}"
            );
        }
    }
}
