// may_minihttp TechEmpower-style peer for lowlat bench: /plaintext and /json, one may worker (MAY_WORKERS).
// Modeled on may_minihttp-0.1.11/examples/techempower_no_db.rs (serde_json instead of yarte).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io;

use bytes::BufMut;
use may_minihttp::{HttpService, HttpServiceFactory, Request, Response};
use serde::Serialize;

#[derive(Serialize)]
struct HelloMessage {
    message: &'static str,
}

struct Techempower;

impl HttpService for Techempower {
    fn call(&mut self, req: Request, rsp: &mut Response) -> io::Result<()> {
        match req.path() {
            "/json" => {
                rsp.header("Content-Type: application/json");
                serde_json::to_writer(
                    rsp.body_mut().writer(),
                    &HelloMessage { message: "Hello, World!" },
                )?;
            }
            "/plaintext" => {
                rsp.header("Content-Type: text/plain").body("Hello, World!");
            }
            _ => {
                rsp.status_code(404, "Not Found");
            }
        }
        Ok(())
    }
}

struct HttpServer;

impl HttpServiceFactory for HttpServer {
    type Service = Techempower;
    fn new_service(&self, _: usize) -> Self::Service {
        Techempower
    }
}

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8085".to_string());
    let workers: usize = std::env::var("MAY_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    may::config().set_workers(workers).set_pool_capacity(1000).set_stack_size(0x1000);
    may::config().set_worker_pin(false); // CPU placement is done by taskset
    let server = HttpServer.start(addr).unwrap();
    server.join().unwrap();
}
