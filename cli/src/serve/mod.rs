//! `ebbdb serve`: the Azure Cosmos DB gateway REST API over a directory of ebbdb databases.
//!
//! This file owns the server's life: open the [`catalog::Catalog`] (one ebbdb database per
//! sub-directory), bind, serve every request through one handler, and on Ctrl-C or SIGTERM
//! stop accepting, let requests in flight finish (at most [`DRAIN`]), sync every database and
//! close it. The handler's order is fixed: parse the path, check the master-key signature
//! (401 before anything else is looked at), read the body (bounded in size and time), then
//! run the ebbdb work on the blocking pool so a fsync never stalls the event loop. A panic in
//! a handler is a 500 for that request, never the end of the server.
//!
//! - `path.rs`: URL → resource, and the signed resource type and link;
//! - `auth.rs`: the HMAC-SHA256 master-key token;
//! - `reply.rs`: responses, Cosmos error bodies and headers;
//! - `request.rs`: the Cosmos request headers;
//! - `account.rs`, `containers.rs`, `items.rs`: the resources.

mod account;
mod auth;
mod batch;
mod catalog;
mod containers;
mod feed;
mod items;
mod path;
mod reply;
mod request;

use std::future::poll_fn;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::State;
use axum::http::{Response, StatusCode};
use axum::Router;
use tokio::net::TcpListener;

use crate::fail::{self, Failure};
use crate::open;

pub use auth::EMULATOR_KEY;

use self::catalog::Catalog;
use self::path::Resource;
use self::reply::Reply;
use self::request::Request;

/// The largest request body kept (an item is at most 2 MiB); a larger one is a 413.
const MAX_BODY: usize = 4 * 1024 * 1024;
/// How much of a too-large body is read (and dropped) before the 413, so the client reads the
/// answer instead of a broken pipe; a body declared larger is refused at once.
const MAX_DRAINED: usize = 64 * 1024 * 1024;
/// How long requests in flight may take to finish after the shutdown signal.
const DRAIN: Duration = Duration::from_secs(10);

struct App {
    catalog: Catalog,
    /// How long a client may take to send a request's headers, and then its body.
    timeout: Duration,
    key: auth::MasterKey,
    local: std::net::SocketAddr,
}

fn options() -> Result<ebbdb::Options, String> {
    open::options().map_err(|f| f.message)
}

/// Runs the server until Ctrl-C or SIGTERM.
///
/// # Errors
/// A bad key (exit 2), a directory that is itself a database or is locked, an address that
/// cannot be bound.
pub fn run(dir: &Path, addr: &str, key: &str, timeout: Duration) -> Result<(), Failure> {
    let key = auth::MasterKey::from_base64(key)
        .map_err(|m| Failure::new(fail::USAGE, format!("--key: {m}")))?;
    if dir.join("MANIFEST").is_file() {
        return Err(Failure::new(
            fail::OTHER,
            format!(
                "{} is an ebbdb database; `ebbdb serve` takes a directory that holds one \
                 database per sub-directory (move it to DIR/<database id>/ to serve it)",
                dir.display()
            ),
        ));
    }
    let catalog = Catalog::open(dir, options)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ebbdb-serve")
        .build()
        .map_err(|e| fail::io("the tokio runtime", e))?;
    let served = runtime.block_on(serve(dir, addr, catalog, key, timeout));
    // The runtime is gone once this returns, and with it every request's handle.
    drop(runtime);
    served
}

async fn serve(
    dir: &Path,
    addr: &str,
    catalog: Catalog,
    key: auth::MasterKey,
    timeout: Duration,
) -> Result<(), Failure> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| fail::io(format!("binding {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| fail::io(format!("binding {addr}"), e))?;
    let n = catalog.list().len();
    let app = Arc::new(App {
        catalog,
        timeout,
        key,
        local,
    });
    let router = Router::new().fallback(handle).with_state(Arc::clone(&app));
    println!(
        "ebbdb serve: listening on http://{local}/ ({n} database{} in {})",
        if n == 1 { "" } else { "s" },
        dir.display()
    );
    accept_until_shutdown(listener, router, timeout).await;
    let app = Arc::clone(&app);
    tokio::task::spawn_blocking(move || {
        let failures = app.catalog.sync_all();
        app.catalog.close();
        failures
    })
    .await
    .map_err(|e| Failure::new(fail::OTHER, format!("closing the databases: {e}")))
    .and_then(|failures| match failures.first() {
        None => {
            println!("ebbdb serve: databases synced and closed");
            Ok(())
        }
        Some((id, e)) => Err(Failure::new(
            fail::OTHER,
            format!("syncing database '{id}' at shutdown: {e}"),
        )),
    })
}

/// Serves connections until the shutdown signal, then lets them finish (at most [`DRAIN`]).
/// Each connection is HTTP/1.1 with keep-alive; a client that takes longer than
/// `timeout` to send a request's headers is disconnected.
async fn accept_until_shutdown(listener: TcpListener, router: Router, timeout: Duration) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(timeout)
        .keep_alive(true);
    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let service = hyper_util::service::TowerToHyperService::new(router.clone());
                    let conn = graceful.watch(http.serve_connection(io, service));
                    tokio::spawn(async move {
                        // A broken or timed-out connection ends here; the server goes on.
                        let _ = conn.await;
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: report, breathe, go on.
                    eprintln!("ebbdb serve: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = &mut signal => break,
        }
    }
    drop(listener);
    eprintln!("ebbdb serve: shutting down (finishing requests in flight)");
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN) => {
            eprintln!("ebbdb serve: requests still running after {DRAIN:?}; closing anyway");
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

async fn handle(State(app): State<Arc<App>>, req: axum::extract::Request) -> Response<Body> {
    let activity = reply::activity_id();
    one(&app, req).await.into_response(&activity)
}

async fn one(app: &Arc<App>, req: axum::extract::Request) -> Reply {
    let (parts, body) = req.into_parts();
    let Some(parsed) = path::parse(parts.uri.path()) else {
        return Reply::error(
            StatusCode::BAD_REQUEST,
            "the request path is not valid percent-encoded UTF-8",
        );
    };
    let text = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let signed = auth::Signed {
        verb: parts.method.as_str(),
        resource_type: &parsed.resource_type,
        resource_link: &parsed.resource_link,
        x_ms_date: text("x-ms-date"),
        date: text("date"),
    };
    let authorization = parts
        .headers
        .get("authorization")
        .map(|v| v.to_str().unwrap_or("%"));
    if let Err(message) = auth::check(&app.key, authorization, &signed)
        .and_then(|()| auth::check_date(&signed, std::time::SystemTime::now()))
    {
        return Reply::error(StatusCode::UNAUTHORIZED, message);
    }
    let declared = parts
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_DRAINED as u64) {
        return too_large();
    }
    let body = match tokio::time::timeout(app.timeout, read_body(body)).await {
        Err(_) => {
            return Reply::error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {:?}", app.timeout),
            )
        }
        Ok(Err(r)) => return r,
        Ok(Ok(b)) => b,
    };
    let request = Request {
        method: parts.method.clone(),
        resource: parsed.resource,
        endpoint: endpoint(text("host"), app.local),
        headers: parts.headers,
        body,
    };
    let app = Arc::clone(app);
    let path = parts.uri.path().to_owned();
    match tokio::task::spawn_blocking(move || dispatch(&app.catalog, &request, &path)).await {
        Ok(reply) => reply,
        Err(e) => Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the request failed inside the server: {e}"),
        ),
    }
}

fn too_large() -> Reply {
    Reply::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Request size is too large (the limit is {MAX_BODY} bytes)"),
    )
}

/// Reads the body; past [`MAX_BODY`] it keeps reading without keeping (up to
/// [`MAX_DRAINED`]) and then answers 413, so a client still sending its body gets the 413
/// rather than a broken pipe.
async fn read_body(mut body: Body) -> Result<Vec<u8>, Reply> {
    let mut out = Vec::new();
    let mut dropped = 0usize;
    loop {
        let frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None if dropped > 0 => return Err(too_large()),
            None => return Ok(out),
            Some(Err(e)) => {
                return Err(Reply::error(
                    StatusCode::BAD_REQUEST,
                    format!("the request body could not be read: {e}"),
                ))
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if dropped > 0 || out.len() + data.len() > MAX_BODY {
                        dropped += out.len() + data.len();
                        out = Vec::new();
                        if dropped > MAX_DRAINED {
                            return Err(too_large());
                        }
                    } else {
                        out.extend_from_slice(data);
                    }
                }
            }
        }
    }
}

/// `http://host:port/` as the client addressed this server (its `Host` header when that is a
/// plain host and port), else the bound address.
fn endpoint(host: &str, local: std::net::SocketAddr) -> String {
    let plain = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if plain {
        format!("http://{host}/")
    } else {
        format!("http://{local}/")
    }
}

fn dispatch(cat: &Catalog, req: &Request, path: &str) -> Reply {
    match &req.resource {
        Resource::Account => account::account(req),
        Resource::Databases => account::databases(cat, req),
        Resource::Database(db) => account::database(cat, req, db),
        Resource::Containers(db) => containers::containers(cat, req, db),
        Resource::Container(db, c) => containers::container(cat, req, db, c),
        Resource::PartitionKeyRanges(db, c) => containers::partition_key_ranges(cat, req, db, c),
        Resource::Documents(db, c) => match containers::open_container(cat, db, c) {
            Ok(coll) => items::documents(&coll, req, db),
            Err(r) => r,
        },
        Resource::Document(db, c, id) => match containers::open_container(cat, db, c) {
            Ok(coll) => items::document(&coll, req, id),
            Err(r) => r,
        },
        Resource::Unknown => Reply::error(
            StatusCode::NOT_FOUND,
            format!(
                "ebbdb serve has no resource at '{path}' (it serves /dbs, /dbs/{{db}}/colls, \
                 .../docs and .../pkranges)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_uses_a_plain_host_header_only() {
        let local: std::net::SocketAddr = "127.0.0.1:9".parse().expect("addr");
        assert_eq!(endpoint("localhost:8081", local), "http://localhost:8081/");
        assert_eq!(endpoint("[::1]:8081", local), "http://[::1]:8081/");
        assert_eq!(endpoint("", local), "http://127.0.0.1:9/");
        assert_eq!(endpoint("evil/x?y", local), "http://127.0.0.1:9/");
    }
}
