//! The CGI response head (RFC 3875 §6) an application writes first on `FCGI_STDOUT`: header
//! lines (CRLF or LF), an empty line, then the body. `Status` gives the status (200 when
//! absent); a `Location` with a local path and nothing else is a local redirect the server
//! follows itself (§6.2.2), one with an absolute URL a redirect for the client (302 unless
//! `Status` says otherwise, §6.2.3–6.2.4).

use httparse::Header;
use smallvec::SmallVec;

use super::FastCgiError;
use crate::Status;

/// Most fields a CGI head may hold (PHP applications send a dozen at most).
pub const MAX_FIELDS: usize = 100;

/// Fields a [`CgiHead`] holds without allocating (a PHP page sends a few).
pub const INLINE_FIELDS: usize = 8;

/// A CGI response head, borrowing the application's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgiHead<'a> {
    /// From `Status` (its code), else 302 for a client redirect, else 200.
    pub status: u16,
    /// `Status`'s reason phrase, when it gave one.
    pub reason: Option<&'a str>,
    /// The fields to send to the client: every one but `Status` (names as the application
    /// wrote them). Inline up to [`INLINE_FIELDS`]: a PHP response sends a few, and their
    /// `Vec` was one of a PHP request's five allocations.
    pub fields: SmallVec<[Header<'a>; INLINE_FIELDS]>,
    /// `Location` was a local path (starting with `/`) and the only field: the server serves
    /// that path instead (RFC 3875 §6.2.2).
    pub local_redirect: Option<&'a [u8]>,
    /// Bytes of the input the head took (the body follows).
    pub len: usize,
}

impl CgiHead<'_> {
    /// The value of the first field named `name` (case-insensitive).
    #[must_use]
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// Reads the CGI head at the start of `input`, whose length may not pass `limit`.
///
/// # Errors
/// Lines that are not fields, more than [`MAX_FIELDS`] of them, a head longer than `limit`, a
/// `Status` that is not a three-digit code.
pub fn parse_head(input: &[u8], limit: usize) -> Result<Status<CgiHead<'_>>, FastCgiError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let window = &input[..input.len().min(limit)];
    let (len, parsed) = match httparse::parse_headers(window, &mut headers) {
        Ok(httparse::Status::Complete((len, parsed))) => (len, parsed),
        Ok(httparse::Status::Partial) if input.len() >= limit => {
            return Err(FastCgiError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(Status::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(FastCgiError::HeadTooLarge),
        Err(_) => return Err(FastCgiError::Head),
    };
    let mut status = None;
    let mut reason = None;
    let mut location = None;
    let mut fields = SmallVec::with_capacity(parsed.len());
    for h in parsed.iter() {
        if h.name.eq_ignore_ascii_case("status") {
            let (code, text) = parse_status(h.value)?;
            status = Some(code);
            reason = text;
            continue;
        }
        if h.name.eq_ignore_ascii_case("location") {
            location = Some(h.value);
        }
        fields.push(*h);
    }
    let local_redirect = location.filter(|l| {
        l.first() == Some(&b'/') && !l.starts_with(b"//") && fields.len() == 1 && status.is_none()
    });
    let status = status.unwrap_or(if location.is_some() && local_redirect.is_none() {
        302
    } else {
        200
    });
    Ok(Status::Complete(CgiHead {
        status,
        reason,
        fields,
        local_redirect,
        len,
    }))
}

/// `Status: 404 Not Found` → (404, "Not Found").
fn parse_status(value: &[u8]) -> Result<(u16, Option<&str>), FastCgiError> {
    let text = std::str::from_utf8(value).map_err(|_| FastCgiError::Status)?;
    let text = text.trim();
    let (code, reason) = text.split_once(' ').unwrap_or((text, ""));
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FastCgiError::Status);
    }
    let code: u16 = code.parse().map_err(|_| FastCgiError::Status)?;
    if code < 100 {
        return Err(FastCgiError::Status);
    }
    let reason = reason.trim();
    Ok((code, (!reason.is_empty()).then_some(reason)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(input: &[u8]) -> CgiHead<'_> {
        match parse_head(input, 8192).unwrap() {
            Status::Complete(h) => h,
            Status::Partial => panic!("partial"),
        }
    }

    #[test]
    fn fields_status_and_body() {
        let input = b"X-Powered-By: PHP/8.2\r\nContent-type: text/html; charset=UTF-8\r\n\r\n<p>hi";
        let h = head(input);
        assert_eq!(h.status, 200);
        assert_eq!(
            h.field("content-type"),
            Some(&b"text/html; charset=UTF-8"[..])
        );
        assert_eq!(&input[h.len..], b"<p>hi");
        let h = head(b"Status: 404 Not Found\nContent-Type: text/plain\n\n");
        assert_eq!((h.status, h.reason), (404, Some("Not Found")));
        assert_eq!(h.fields.len(), 1);
        assert_eq!(head(b"Status: 201\r\n\r\n").reason, None);
    }

    #[test]
    fn redirects_local_and_for_the_client() {
        let h = head(b"Location: /wp-admin/\r\n\r\n");
        assert_eq!(h.local_redirect, Some(&b"/wp-admin/"[..]));
        let h = head(b"Location: https://example.com/\r\n\r\n");
        assert_eq!((h.status, h.local_redirect), (302, None));
        let h = head(b"Status: 301 Moved Permanently\r\nLocation: /new\r\n\r\n");
        assert_eq!((h.status, h.local_redirect), (301, None));
        // With other fields it is the client's redirect (§6.2.4), as PHP's header() sends it.
        let h = head(b"Location: /x\r\nContent-Type: text/html\r\n\r\n");
        assert_eq!((h.status, h.local_redirect), (302, None));
        let h = head(b"Location: //evil.example/\r\n\r\n");
        assert_eq!((h.status, h.local_redirect), (302, None));
    }

    #[test]
    fn partial_bad_and_too_large() {
        assert_eq!(
            parse_head(b"Content-Type: text/html\r\n", 100),
            Ok(Status::Partial)
        );
        assert_eq!(
            parse_head(b"no colon here\r\n\r\n", 100),
            Err(FastCgiError::Head)
        );
        assert_eq!(
            parse_head(b"Status: abc\r\n\r\n", 100),
            Err(FastCgiError::Status)
        );
        assert_eq!(
            parse_head(b"Status: 42\r\n\r\n", 100),
            Err(FastCgiError::Status)
        );
        let long = [b"X-A: ".as_slice(), &[b'a'; 200]].concat();
        assert_eq!(parse_head(&long, 100), Err(FastCgiError::HeadTooLarge));
        let many: Vec<u8> = (0..=MAX_FIELDS)
            .flat_map(|i| format!("X-{i}: v\r\n").into_bytes())
            .chain(*b"\r\n")
            .collect();
        assert_eq!(parse_head(&many, 1 << 20), Err(FastCgiError::HeadTooLarge));
    }
}
