//! The built-in endpoints, TechEmpower-compatible so lowlat can be set beside any entry of that
//! benchmark: `GET /plaintext` and `GET /json`.

use lowlat_http::request::Method;
use serde::Serialize;

use crate::handler::{Req, Response};
use crate::router::{RouteError, Router};

/// The `/json` body: serialised per request, as TechEmpower requires, not a constant.
#[derive(Serialize)]
struct Message {
    message: &'static str,
}

/// The built-in routes, by path.
pub const PATHS: [&str; 2] = ["/plaintext", "/json"];

/// Mounts `/plaintext` and `/json` on `router`.
///
/// # Errors
/// When those paths are already routed.
pub fn mount(router: &mut Router) -> Result<(), RouteError> {
    mount_some(router, true, true)
}

/// Mounts the built-in routes asked for.
///
/// # Errors
/// When those paths are already routed.
pub fn mount_some(
    router: &mut Router,
    plaintext_on: bool,
    json_on: bool,
) -> Result<(), RouteError> {
    if plaintext_on {
        router.route(PATHS[0], &[Method::Get], plaintext)?;
    }
    if json_on {
        router.route(PATHS[1], &[Method::Get], json)?;
    }
    Ok(())
}

fn plaintext(_req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
    res.send(200, b"text/plain", b"Hello, World!");
}

fn json(_req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
    let rendered = res.render(200, b"application/json", b"", |buf| {
        serde_json::to_writer(
            buf,
            &Message {
                message: "Hello, World!",
            },
        )
    });
    if rendered.is_err() {
        res.send_status(500);
    }
}
