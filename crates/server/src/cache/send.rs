//! A stored response sent through a [`Downstream`] — to a client whose request was forwarded,
//! so whose connection waits for a relayed answer: a stale response standing in for the
//! upstream's (`tee`), or what a request that waited for another's fill finds (`collapse`).
//! A hit answered by the handler itself is written by `lookup` instead, straight into the
//! client's buffer.

use lowlat_http::cache::freshness::age_value;
use lowlat_http::cache::status::CacheStatus;
use lowlat_http::cache::Fields;
use lowlat_http::client::Header;

use super::object::Object;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::job::RelayBody;

/// Relays `object`, `age` seconds old, as the response's head and body: its stored fields
/// (`Age` computed now), the site's `added` lines and `Cache-Status` as `status` says, named
/// `name`. `not_modified`: the client's copy is current, a 304 goes instead (no body).
/// Returns the status sent.
#[allow(clippy::too_many_arguments)]
pub(crate) fn relay_object(
    down: &mut dyn Downstream,
    ctx: &mut WorkerCtx<'_>,
    object: &Object,
    age: u64,
    added: &[u8],
    status: &CacheStatus<'_>,
    name: &str,
    not_modified: bool,
) -> u16 {
    let mut lines = added.to_vec();
    lines.extend_from_slice(b"Age: ");
    lines.extend_from_slice(itoa::Buffer::new().format(age_value(age)).as_bytes());
    lines.extend_from_slice(b"\r\nCache-Status: ");
    status.write(name, &mut lines);
    lines.extend_from_slice(b"\r\n");
    let fields: Vec<Header<'_>> = (0..object.count())
        .map(|i| {
            let (name, value) = object.field(i);
            Header { name, value }
        })
        .filter(|h| !h.name.eq_ignore_ascii_case("age"))
        .collect();
    let (code, reason, body) = if not_modified {
        (304, "Not Modified", RelayBody::None { length: None })
    } else if object.body().is_empty() {
        (
            object.status,
            &*object.reason,
            RelayBody::None { length: Some(0) },
        )
    } else {
        (
            object.status,
            &*object.reason,
            RelayBody::Length(object.body().len() as u64),
        )
    };
    down.relay_head(ctx, code, reason, &fields, &|_| true, &lines, body);
    if matches!(body, RelayBody::Length(_)) {
        down.relay_body(ctx, object.body());
    }
    code
}
