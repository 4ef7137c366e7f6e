//! Whether a shared cache may store a response (RFC 9111 §3), and the reason when it may not,
//! named so that `Cache-Status`'s `detail` and the metrics can say it.
//!
//! Beyond the RFC, two defaults that every shared cache in front of applications keeps: a
//! response carrying `Set-Cookie` is not stored (it is one user's; varnish and most CDNs
//! refuse it too) unless the policy allows it, and a `Vary: *` response, which no later
//! request can match (§4.1), is not stored.

use super::directives::names_field;
use super::directives::Directives;
use super::fields::{first, list_elements, values, Fields};
use super::freshness::heuristically_cacheable;

/// What the storing decision may be told beyond the two messages.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Store responses that carry `Set-Cookie` (the field itself is kept with them).
    pub store_set_cookie: bool,
    /// Honour the request's `no-store`.
    pub honour_request_no_store: bool,
    /// The configuration gives this response's status a lifetime (nginx's `proxy_cache_valid`):
    /// without explicit freshness it is stored as if it had one. Set by the caller per response.
    pub configured_lifetime: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            store_set_cookie: false,
            honour_request_no_store: true,
            configured_lifetime: false,
        }
    }
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// Only `GET` responses are stored (`HEAD` is answered from them).
    Method,
    /// 1xx, 206 (partial content is not assembled) and 304 (it only refreshes), or a status
    /// this cache does not know with `must-understand`.
    Status,
    /// `no-store` in the response.
    NoStore,
    /// `no-store` in the request.
    RequestNoStore,
    /// `private`.
    Private,
    /// The request carried `Authorization` and no directive allows sharing (§3.5).
    Authorization,
    /// `Set-Cookie`, not allowed by the policy.
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// Nothing makes it cacheable: no explicit freshness and a status not cacheable by default.
    NoFreshness,
}

impl NotStored {
    /// A token for `Cache-Status`'s `detail` and for logs.
    #[must_use]
    pub fn token(self) -> &'static str {
        match self {
            NotStored::Method => "method",
            NotStored::Status => "status",
            NotStored::NoStore => "no-store",
            NotStored::RequestNoStore => "request-no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::SetCookie => "set-cookie",
            NotStored::VaryStar => "vary-star",
            NotStored::NoFreshness => "no-freshness",
        }
    }
}

/// The facts about the request that storing depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    /// The method is `GET`.
    pub get: bool,
    /// The request carried `Authorization`.
    pub authorization: bool,
    /// Its `Cache-Control` directives (default when they are not honoured).
    pub cc: Directives<'a>,
}

/// Status codes whose rules this cache follows (for `must-understand`, §5.2.2.3): the final
/// ones RFC 9110 defines.
#[must_use]
pub fn understood(status: u16) -> bool {
    matches!(
        status,
        200..=206 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// Decides whether a response may be stored (RFC 9111 §3). `cc` are the response's directives
/// as [`Directives::for_response`] chose them; `fields` its header fields.
///
/// # Errors
/// The first reason, in §3's order, that forbids storing it.
pub fn storable<F: Fields + ?Sized>(
    req: &RequestFacts<'_>,
    status: u16,
    fields: &F,
    cc: &Directives<'_>,
    policy: &Policy,
) -> Result<(), NotStored> {
    if !req.get {
        return Err(NotStored::Method);
    }
    if status < 200 || status == 206 || status == 304 {
        return Err(NotStored::Status);
    }
    if cc.must_understand {
        if !understood(status) {
            return Err(NotStored::Status);
        }
        // Understood: `no-store` was only there for caches that do not know the directive.
    } else if cc.no_store {
        return Err(NotStored::NoStore);
    }
    if req.cc.no_store && policy.honour_request_no_store {
        return Err(NotStored::RequestNoStore);
    }
    if cc.private {
        return Err(NotStored::Private);
    }
    // §3.5: shared only when the origin says so explicitly.
    if req.authorization && !(cc.must_revalidate || cc.public || cc.s_maxage.is_some()) {
        return Err(NotStored::Authorization);
    }
    let private_cookie = cc
        .private_fields
        .is_some_and(|list| names_field(list, "set-cookie"));
    let no_cache_cookie = cc
        .no_cache_fields
        .is_some_and(|list| names_field(list, "set-cookie"));
    if !policy.store_set_cookie
        && !private_cookie
        && !no_cache_cookie
        && first(fields, "set-cookie").is_some()
    {
        return Err(NotStored::SetCookie);
    }
    if values(fields, "vary").any(|v| list_elements(v).any(|e| e == b"*")) {
        return Err(NotStored::VaryStar);
    }
    let explicit = cc.public
        || cc.max_age.is_some()
        || cc.s_maxage.is_some()
        || first(fields, "expires").is_some();
    if !explicit && !heuristically_cacheable(status) && !policy.configured_lifetime {
        return Err(NotStored::NoFreshness);
    }
    Ok(())
}

/// Whether a field is kept in a stored response (§3.1): not hop-by-hop, not named by
/// `Connection`, not one `private="…"` or `no-cache="…"` names (a shared cache may store the
/// response without them, §5.2.2.4, §5.2.2.7), and not `Age` (recomputed when sent).
#[must_use]
pub fn field_kept(name: &str, connection: &[&[u8]], cc: &Directives<'_>) -> bool {
    // By length first: asked of every field of every response stored.
    let is = |h: &str| name.eq_ignore_ascii_case(h);
    let not_kept = match name.len() {
        3 => is("age"),
        18 => is("proxy-authenticate"),
        19 => is("proxy-authorization"),
        _ => crate::fields::is_hop_by_hop(name),
    };
    if not_kept {
        return false;
    }
    if connection
        .iter()
        .any(|v| list_elements(v).any(|e| e.eq_ignore_ascii_case(name.as_bytes())))
    {
        return false;
    }
    let listed = |list: Option<&[u8]>| list.is_some_and(|l| names_field(l, name));
    !(listed(cc.private_fields) || listed(cc.no_cache_fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(
        get: bool,
        auth: bool,
        req_cc: &str,
        status: u16,
        fields: &[(&str, &str)],
    ) -> Result<(), NotStored> {
        let fields: Vec<(&str, &[u8])> = fields.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        let (cc, _) = Directives::for_response::<_, &str>(&fields[..], &[]);
        let mut rcc = Directives::default();
        rcc.add(req_cc.as_bytes());
        let req = RequestFacts {
            get,
            authorization: auth,
            cc: rcc,
        };
        storable(&req, status, &fields[..], &cc, &Policy::default())
    }

    #[test]
    fn storable_table() {
        use NotStored as N;
        let ok = Ok(());
        // (GET, Authorization, request CC, status, response fields, decision)
        type Case = (bool, bool, &'static str, u16, Pairs, Result<(), NotStored>);
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[Case] = &[
            (true, false, "", 200, &[("Cache-Control", "max-age=60")], ok),
            (
                false,
                false,
                "",
                200,
                &[("Cache-Control", "max-age=60")],
                Err(N::Method),
            ),
            (
                true,
                false,
                "",
                206,
                &[("Cache-Control", "max-age=60")],
                Err(N::Status),
            ),
            (
                true,
                false,
                "",
                304,
                &[("Cache-Control", "max-age=60")],
                Err(N::Status),
            ),
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "max-age=60, no-store")],
                Err(N::NoStore),
            ),
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "no-store, must-understand, max-age=60")],
                ok,
            ),
            (
                true,
                false,
                "",
                299,
                &[("Cache-Control", "must-understand, no-store, max-age=60")],
                Err(N::Status),
            ),
            (
                true,
                false,
                "no-store",
                200,
                &[("Cache-Control", "max-age=60")],
                Err(N::RequestNoStore),
            ),
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "private, max-age=60")],
                Err(N::Private),
            ),
            // A qualified private only removes fields.
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "private=\"x-user\", max-age=60")],
                ok,
            ),
            (
                true,
                true,
                "",
                200,
                &[("Cache-Control", "max-age=60")],
                Err(N::Authorization),
            ),
            (
                true,
                true,
                "",
                200,
                &[("Cache-Control", "max-age=60, public")],
                ok,
            ),
            (true, true, "", 200, &[("Cache-Control", "s-maxage=60")], ok),
            (
                true,
                true,
                "",
                200,
                &[("Cache-Control", "max-age=60, must-revalidate")],
                ok,
            ),
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")],
                Err(N::SetCookie),
            ),
            (
                true,
                false,
                "",
                200,
                &[
                    ("Cache-Control", "max-age=60, no-cache=\"set-cookie\""),
                    ("Set-Cookie", "a=b"),
                ],
                ok,
            ),
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "max-age=60"), ("Vary", "Accept, *")],
                Err(N::VaryStar),
            ),
            (
                true,
                false,
                "",
                200,
                &[("Cache-Control", "max-age=60"), ("Vary", "Accept")],
                ok,
            ),
            // Cacheable by default: stored (perhaps stale at once, to be revalidated).
            (true, false, "", 200, &[], ok),
            (true, false, "", 404, &[("ETag", "\"a\"")], ok),
            (true, false, "", 302, &[], Err(N::NoFreshness)),
            (true, false, "", 302, &[("Cache-Control", "max-age=10")], ok),
            (
                true,
                false,
                "",
                500,
                &[("Expires", "Tue, 14 Nov 2023 23:13:20 GMT")],
                ok,
            ),
            (true, false, "", 500, &[], Err(N::NoFreshness)),
        ];
        for (get, auth, req_cc, status, fields, want) in cases {
            assert_eq!(
                decide(*get, *auth, req_cc, *status, fields),
                *want,
                "{get} {auth} {req_cc} {status} {fields:?}"
            );
        }
    }

    #[test]
    fn cookies_when_allowed_and_valid_statuses() {
        let fields: &[(&str, &[u8])] = &[("Set-Cookie", b"a=b"), ("Cache-Control", b"max-age=5")];
        let (cc, _) = Directives::for_response::<_, &str>(fields, &[]);
        let req = RequestFacts {
            get: true,
            ..RequestFacts::default()
        };
        let policy = Policy {
            store_set_cookie: true,
            ..Policy::default()
        };
        assert_eq!(storable(&req, 200, fields, &cc, &policy), Ok(()));
        let policy = Policy {
            configured_lifetime: true,
            ..Policy::default()
        };
        let none: &[(&str, &[u8])] = &[];
        assert_eq!(
            storable(&req, 302, none, &Directives::default(), &policy),
            Ok(())
        );
    }

    #[test]
    fn kept_fields() {
        let mut cc = Directives::default();
        cc.add(b"private=\"x-user\", no-cache=\"set-cookie\"");
        let conn: &[&[u8]] = &[b"close, x-hop"];
        for (name, kept) in [
            ("Content-Type", true),
            ("ETag", true),
            ("Connection", false),
            ("Transfer-Encoding", false),
            ("Age", false),
            ("X-Hop", false),
            ("X-User", false),
            ("Set-Cookie", false),
            ("TE", false),
            ("keep-alive", false),
            ("Proxy-Connection", false),
            ("Proxy-Authenticate", false),
            ("proxy-authorization", false),
            ("Upgrade", false),
            ("Ages", true),
            ("Proxy-Status", true),
        ] {
            assert_eq!(field_kept(name, conn, &cc), kept, "{name}");
        }
    }
}
