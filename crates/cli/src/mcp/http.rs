//! `ditto mcp --http ADDR`: MCP's streamable HTTP transport (revision
//! 2025-03-26 and later) at one endpoint, [`ENDPOINT`], serving the one
//! [`DittoServer`] that stdio serves, to its owner only.
//!
//! Owns the listener and its connections (hyper, HTTP/1.1), who is
//! served, which requests reach the endpoint, the transport's security
//! settings, and stopping on SIGINT/SIGTERM. The transport's own rules
//! are rmcp's streamable HTTP service: a POST of JSON-RPC answered as an
//! event stream, the `Mcp-Session-Id` issued at initialize and required
//! after (an unknown one is 404), DELETE ending a session (answered 204
//! here), GET opening the server's stream, `Accept` checked (406).
//!
//! Set here, in this order: a connection from a loopback client of
//! another uid (`peer`) is answered 403 and closed; a request target must
//! be a path (absolute-form is 400) and `Host`, `Origin` and
//! `Authorization` come at most once each (400); every request carries
//! the server's bearer token (`token`; 401 otherwise); a POST's body
//! arrives whole within [`BODY_READ_TIMEOUT`] (408) and at most
//! [`MAX_BODY_BYTES`] (413), and is JSON (400 with JSON-RPC's -32700
//! otherwise). Then rmcp's checks: the `Host` header must name a loopback
//! host unless remote clients are allowed (so that a DNS-rebound name
//! gets nothing), and a request carrying an `Origin` (a browser's) must
//! come from a loopback origin, always (so that no web page can drive the
//! tools). At most [`MAX_CONNECTIONS`] connections are held: beyond it
//! the oldest one that never sent the token is closed to make room (503
//! when every one has). Never handles a tool itself, and passes rmcp no
//! request for another path.
//!
//! Every connection, session and call is a task of one current-thread
//! runtime on the calling thread (the tools' children rely on that; see
//! `die_with_this_process`): a call waiting for its child waits without
//! holding the thread, so other requests are answered meanwhile. Stopping
//! ends every session, drops every call (killing its child) and returns
//! within about a second whatever the clients still hold open.

use super::DittoServer;
use super::peer;
use super::token::{Token, TokenFile};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// The one path that speaks MCP.
pub const ENDPOINT: &str = "/mcp";

/// Browser origins that may call the endpoint: pages served from this
/// machine's loopback names, on any port.
const LOCAL_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// The most connections held at once.
pub const MAX_CONNECTIONS: usize = 64;

/// The longest a client may take to send a request's headers, and the
/// longest a connection may stay idle between requests.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a client may take to send a POST's whole body once its
/// headers are in.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest body a POST may carry.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// How long stopping waits for tasks still running (open streams) before
/// dropping them.
const STOP_GRACE: Duration = Duration::from_secs(1);

type Body = BoxBody<Bytes, Infallible>;

/// rmcp's streamable HTTP service around [`DittoServer`], with sessions
/// kept in memory.
type McpService = StreamableHttpService<DittoServer, LocalSessionManager>;

/// The transport's settings: Origin always loopback, Host loopback unless
/// `allow_remote`; `stop` ends every session.
fn config(allow_remote: bool, stop: CancellationToken) -> StreamableHttpServerConfig {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_allowed_origins(LOCAL_ORIGINS)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(stop);
    if allow_remote {
        // Clients name the server by whatever name reaches this machine.
        config.disable_allowed_hosts()
    } else {
        config
    }
}

/// Sessions in memory, never ended for being quiet: rmcp would end a
/// session with no message either way for its idle time (5 minutes), and
/// a `validate` call is exactly that while its application runs, for as
/// long as the application runs; ending the session would kill the call.
/// A session ends when its client ends it (DELETE), or with the server.
fn sessions() -> LocalSessionManager {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = None;
    sessions
}

/// The endpoint's service: a new [`DittoServer`] per session.
fn mcp_service(allow_remote: bool, stop: CancellationToken) -> McpService {
    StreamableHttpService::new(
        || Ok(DittoServer::default()),
        Arc::new(sessions()),
        config(allow_remote, stop),
    )
}

/// What every request is checked against, and the service it then goes to.
struct Endpoint {
    service: McpService,
    token: Token,
    /// Where the token is stored, for the 401's message.
    token_file: Option<PathBuf>,
    /// The uid served (this process's).
    owner: u32,
    body_read_timeout: Duration,
}

impl Endpoint {
    fn new(service: McpService, token: Token, token_file: Option<PathBuf>) -> Endpoint {
        Endpoint {
            service,
            token,
            token_file,
            // SAFETY: getuid cannot fail.
            owner: unsafe { libc::getuid() },
            body_read_timeout: BODY_READ_TIMEOUT,
        }
    }

    fn unauthorized(&self) -> Response<Body> {
        let stored = match &self.token_file {
            Some(path) => format!(
                "; it is also in {}, which only the user running the server can read",
                path.display()
            ),
            None => String::new(),
        };
        let message = format!(
            "Unauthorized: send the header `Authorization: Bearer TOKEN` with the token \
             `ditto mcp --http` printed when it started{stored}\n"
        );
        let mut response = plain(StatusCode::UNAUTHORIZED, message);
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
        response
    }
}

/// Headers a request may carry once at most: with two, a check could read
/// one and a later reader the other.
const SINGLE_HEADERS: [HeaderName; 3] = [header::HOST, header::ORIGIN, header::AUTHORIZATION];

/// The 400 for a request that repeats one of [`SINGLE_HEADERS`], if it does.
fn repeated_header(headers: &HeaderMap) -> Option<Response<Body>> {
    SINGLE_HEADERS.iter().find_map(|name| {
        let count = headers.get_all(name).iter().count();
        (count > 1).then(|| {
            let name = canonical_name(name);
            plain(
                StatusCode::BAD_REQUEST,
                format!("Bad Request: {count} {name} headers; send one"),
            )
        })
    })
}

fn canonical_name(name: &HeaderName) -> &'static str {
    match *name {
        header::HOST => "Host",
        header::ORIGIN => "Origin",
        _ => "Authorization",
    }
}

/// One request: the checks of this module, then the endpoint's go to
/// rmcp, any other path is 404; once the server is stopping, every
/// request is 503. `trusted` is set once the request has shown the token.
async fn route<B>(endpoint: &Endpoint, request: Request<B>, trusted: &AtomicBool) -> Response<Body>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send + 'static,
    B::Error: std::fmt::Display,
{
    let service = &endpoint.service;
    if service.config.cancellation_token.is_cancelled() {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable: the MCP server is stopping".into(),
        );
    }
    if request.uri().scheme().is_some() || request.uri().authority().is_some() {
        return plain(
            StatusCode::BAD_REQUEST,
            format!(
                "Bad Request: the request target must be a path (origin-form, e.g. POST \
                 {ENDPOINT}), not an absolute URL"
            ),
        );
    }
    if let Some(response) = repeated_header(request.headers()) {
        return response;
    }
    if !endpoint
        .token
        .admits(request.headers().get(header::AUTHORIZATION))
    {
        return endpoint.unauthorized();
    }
    trusted.store(true, Ordering::Relaxed);
    if request.uri().path() != ENDPOINT {
        let message = format!(
            "Not Found: {} is not an MCP endpoint; this server speaks MCP at {ENDPOINT}",
            request.uri().path()
        );
        return plain(StatusCode::NOT_FOUND, message);
    }
    let ends_a_session = request.method() == http::Method::DELETE;
    let mut response = if request.method() == http::Method::POST {
        let (parts, body) = request.into_parts();
        let body = match read_body(&parts.headers, body, endpoint.body_read_timeout).await {
            Ok(body) => body,
            Err(response) => return response,
        };
        if let Some(response) = not_json_rpc(&parts.headers, &body) {
            return response;
        }
        service
            .handle(Request::from_parts(parts, Full::new(body)))
            .await
    } else {
        service.handle(request).await
    };
    // rmcp answers a session ended with 202 and no body; clients (the
    // official Python SDK among them) expect 200 or 204 for it.
    if ends_a_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// A POST's whole body, read within `deadline` and at most
/// [`MAX_BODY_BYTES`]; else the answer (and the connection closes).
async fn read_body<B>(
    headers: &HeaderMap,
    body: B,
    deadline: Duration,
) -> Result<Bytes, Response<Body>>
where
    B: hyper::body::Body + Send + 'static,
    B::Error: std::fmt::Display,
{
    let too_large = || {
        closing(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Payload Too Large: a request body is at most {MAX_BODY_BYTES} bytes"),
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let read = async {
        let mut body = std::pin::pin!(body);
        let mut collected = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                closing(plain(
                    StatusCode::BAD_REQUEST,
                    format!("Bad Request: cannot read the request body: {e}"),
                ))
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.remaining() > MAX_BODY_BYTES - collected.len() {
                return Err(too_large());
            }
            collected.put(data);
        }
        Ok(collected.freeze())
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(read) => read,
        Err(_) => Err(closing(plain(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "Request Timeout: the request body did not arrive within {} s",
                deadline.as_secs_f64()
            ),
        ))),
    }
}

/// The JSON-RPC error answering a POST whose body, declared JSON, is not
/// JSON (-32700) or not a JSON-RPC message (-32600); None when it is one
/// or is declared something else (rmcp answers that with 415).
fn not_json_rpc(headers: &HeaderMap, body: &[u8]) -> Option<Response<Body>> {
    let declared_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        });
    if !declared_json {
        return None;
    }
    let (code, message) = match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Err(e) => (
            -32700,
            format!("Parse error: the request body is not JSON: {e}"),
        ),
        Ok(_) => match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
            Ok(_) => return None,
            Err(e) => (
                -32600,
                format!("Invalid Request: the body is not a JSON-RPC message: {e}"),
            ),
        },
    };
    let error = json!({"jsonrpc": "2.0", "id": null,
                       "error": {"code": code, "message": message}});
    let mut response = Response::new(Full::new(Bytes::from(error.to_string())).boxed());
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Some(response)
}

fn plain(status: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(message)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// `response`, closing its connection after it.
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

/// The connections held: at most [`MAX_CONNECTIONS`]. Room for a new one
/// is made by closing the oldest that has not shown the token (an idle
/// socket, a slow sender of headers, another user's); one that has is
/// never closed for room, so only the owner can fill the server.
#[derive(Default)]
struct Connections {
    open: Mutex<BTreeMap<u64, Slot>>,
    next: AtomicU64,
}

struct Slot {
    trusted: Arc<AtomicBool>,
    close: CancellationToken,
}

/// A connection's place among [`Connections`], given up when dropped.
struct Admitted {
    id: u64,
    connections: Arc<Connections>,
    /// Set once a request on it has shown the token.
    trusted: Arc<AtomicBool>,
    /// Cancelled when the connection is closed to make room.
    close: CancellationToken,
}

impl Connections {
    /// A place for a new connection, or None when all
    /// `limit` are held by connections that showed the token.
    fn admit(self: &Arc<Self>, limit: usize) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= limit {
            let oldest_untrusted = open
                .iter()
                .find(|(_, slot)| !slot.trusted.load(Ordering::Relaxed))
                .map(|(&id, _)| id)?;
            if let Some(slot) = open.remove(&oldest_untrusted) {
                slot.close.cancel();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let trusted = Arc::new(AtomicBool::new(false));
        let close = CancellationToken::new();
        open.insert(
            id,
            Slot {
                trusted: trusted.clone(),
                close: close.clone(),
            },
        );
        Some(Admitted {
            id,
            connections: self.clone(),
            trusted,
            close,
        })
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self
            .connections
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        open.remove(&self.id);
    }
}

/// Serves MCP over HTTP at `address` (checked by `address`) until SIGINT
/// or SIGTERM. Prints the endpoint's URL on stderr, one line, once
/// listening (port 0 gives the port the system picked), then a line with
/// the token and the file that also holds it.
pub fn serve(address: SocketAddr, allow_remote: bool) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(listen(address, allow_remote));
    runtime.shutdown_timeout(STOP_GRACE);
    served
}

async fn listen(address: SocketAddr, allow_remote: bool) -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("cannot catch SIGINT to stop the MCP server: {e}"))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("cannot catch SIGTERM to stop the MCP server: {e}"))?;
    let token = Token::generate()
        .map_err(|e| anyhow::anyhow!("cannot draw a token for the MCP server: {e}"))?;
    let listener = TcpListener::bind(address).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot serve MCP over HTTP on {address}: {e} (another server on that port? \
             --http 0 picks a free one)"
        )
    })?;
    let bound = listener.local_addr()?;
    // Removed when this returns, however it returns.
    let token_file = TokenFile::write(&token, bound)?;
    eprintln!("ditto mcp: serving MCP over HTTP at http://{bound}{ENDPOINT}");
    eprintln!(
        "ditto mcp: every request needs the header Authorization: Bearer {}; the token is also \
         in {} (only you can read it)",
        token.as_str(),
        token_file.path().display()
    );
    if !bound.ip().to_canonical().is_loopback() {
        eprintln!(
            "ditto mcp: warning: {bound} is reachable from other machines (--allow-remote): \
             whoever reaches it and learns the token can run programs here as this user, and \
             HTTP carries the token unencrypted"
        );
    }
    let stop = CancellationToken::new();
    let endpoint = Arc::new(Endpoint::new(
        mcp_service(allow_remote, stop.clone()),
        token,
        Some(token_file.path().to_path_buf()),
    ));
    let connections = Arc::new(Connections::default());
    let why = loop {
        tokio::select! {
            _ = interrupt.recv() => break "SIGINT",
            _ = terminate.recv() => break "SIGTERM",
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match connections.admit(MAX_CONNECTIONS) {
                    Some(admitted) => {
                        tokio::spawn(connection(stream, peer, endpoint.clone(), admitted));
                    }
                    None => refuse_for_now(stream),
                },
                // Out of descriptors and the like: the next accept may
                // succeed once a connection has closed.
                Err(e) => {
                    eprintln!("ditto mcp: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    };
    eprintln!("ditto mcp: {why}: stopping");
    stop.cancel();
    drop(token_file);
    Ok(())
}

/// Answers 503 on a connection there is no room for, as far as the
/// socket takes it without waiting, and closes it.
fn refuse_for_now(stream: TcpStream) {
    let message = format!(
        "Service Unavailable: {MAX_CONNECTIONS} connections are open; retry when one closes\n"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{message}",
        message.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// Serves one client connection's requests until it closes or is closed
/// to make room. At its first request, a loopback client's uid is looked
/// up (not before: an idle socket costs no lookup); a client of another
/// uid is answered 403 on every request, and the connection closed.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    endpoint: Arc<Endpoint>,
    admitted: Admitted,
) {
    let local = stream.local_addr().ok();
    let foreign = Arc::new(tokio::sync::OnceCell::<Option<u32>>::new());
    let trusted = admitted.trusted.clone();
    let requests = hyper::service::service_fn(move |request| {
        let endpoint = endpoint.clone();
        let trusted = trusted.clone();
        let foreign = foreign.clone();
        async move {
            let foreign = *foreign
                .get_or_init(|| other_uid(local, peer, endpoint.owner))
                .await;
            let response = match foreign {
                Some(uid) => closing(plain(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Forbidden: this MCP server serves uid {} only; this connection is \
                         from uid {uid}\n",
                        endpoint.owner
                    ),
                )),
                None => route(&endpoint, request, &trusted).await,
            };
            Ok::<_, Infallible>(response)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), requests);
    // A broken connection concerns that client only.
    tokio::select! {
        _ = served => {}
        () = admitted.close.cancelled() => {}
    }
}

/// The uid of a loopback client that is not `owner`; None for the
/// owner's, a remote client or one the kernel does not list.
async fn other_uid(local: Option<SocketAddr>, peer: SocketAddr, owner: u32) -> Option<u32> {
    let local = local.filter(|_| peer.ip().to_canonical().is_loopback())?;
    tokio::task::spawn_blocking(move || peer::uid_of_peer(local, peer))
        .await
        .ok()
        .flatten()
        .filter(|&uid| uid != owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const SESSION: &str = "mcp-session-id";

    /// The token of [`endpoint`]'s servers, as clients send it.
    fn bearer() -> String {
        format!("Bearer {}", "07".repeat(32))
    }

    /// An endpoint as `listen` makes it, with a known token.
    fn endpoint(allow_remote: bool, stop: CancellationToken) -> Endpoint {
        Endpoint::new(
            mcp_service(allow_remote, stop),
            Token::from_bytes(&[7; 32]),
            Some(PathBuf::from("/run/user/0/ditto/mcp-127.0.0.1:8080.token")),
        )
    }

    /// `request` through [`route`], on a connection of its own.
    async fn ask<B>(endpoint: &Endpoint, request: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send + 'static,
        B::Error: std::fmt::Display,
    {
        route(endpoint, request, &AtomicBool::new(false)).await
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A POST of `message` to `path` as an MCP client sends it, with
    /// `extra` headers (a header given there replaces the default).
    fn post(path: &str, message: &Value, extra: &[(&str, &str)]) -> Request<Full<Bytes>> {
        post_raw(path, Bytes::from(message.to_string()), extra)
    }

    /// A POST of `body` to `path`, as [`post`] sends it.
    fn post_raw(path: &str, body: Bytes, extra: &[(&str, &str)]) -> Request<Full<Bytes>> {
        let bearer = bearer();
        let mut headers = vec![
            ("host", "127.0.0.1:8080"),
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ];
        for (name, value) in extra {
            headers.retain(|(n, _)| n != name);
            headers.push((name, value));
        }
        let mut request = Request::post(path);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.body(Full::new(body)).unwrap()
    }

    fn initialize() -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "ditto-test", "version": "0"}}})
    }

    /// The JSON-RPC message with id `id` in a response's body (an event
    /// stream's `data:` lines, or JSON), read until it comes.
    async fn message_with_id(response: Response<Body>, id: u64) -> Value {
        let mut body = response.into_body();
        let mut text = String::new();
        let read = async {
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame.unwrap().into_data() else {
                    continue;
                };
                text.push_str(&String::from_utf8_lossy(&data));
                let found = text
                    .lines()
                    .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find(|m| m["id"] == json!(id));
                if let Some(m) = found {
                    return m;
                }
            }
            panic!("the body ended without message {id}: {text}")
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("message within 10 s")
    }

    async fn text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Initializes a session on `service`; gives its id.
    async fn open_session(service: &Endpoint) -> String {
        let response = ask(service, post(ENDPOINT, &initialize(), &[])).await;
        assert_eq!(response.status(), StatusCode::OK);
        let session = response.headers()[SESSION].to_str().unwrap().to_string();
        let answer = message_with_id(response, 1).await;
        assert_eq!(answer["result"]["serverInfo"]["name"], "ditto", "{answer}");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = ask(
            service,
            post(ENDPOINT, &initialized, &[(SESSION, &session)]),
        )
        .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        session
    }

    fn tools_list(id: u64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}})
    }

    #[test]
    fn initialize_issues_a_session_that_lists_the_five_tools() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            let session = open_session(&service).await;
            assert!(session.len() >= 16, "{session}");
            let response = ask(
                &service,
                post(ENDPOINT, &tools_list(2), &[(SESSION, &session)]),
            )
            .await;
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()["content-type"], "text/event-stream");
            let list = message_with_id(response, 2).await;
            let mut names: Vec<&str> = list["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap())
                .collect();
            names.sort_unstable();
            assert_eq!(
                names,
                ["capture", "compare", "kernels", "replay", "validate"]
            );
        });
    }

    #[test]
    fn a_request_without_a_session_is_400_and_an_unknown_session_404() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            let response = ask(&service, post(ENDPOINT, &tools_list(2), &[])).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            assert!(text(response).await.contains("Session ID is required"));
            let unknown = [(SESSION, "no-such-session")];
            let response = ask(&service, post(ENDPOINT, &tools_list(2), &unknown)).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn delete_ends_a_session_and_its_id_is_then_unknown() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            let session = open_session(&service).await;
            let delete = Request::delete(ENDPOINT)
                .header("host", "localhost:8080")
                .header("authorization", bearer())
                .header(SESSION, &session)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = ask(&service, delete).await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT);
            let response = ask(
                &service,
                post(ENDPOINT, &tools_list(3), &[(SESSION, &session)]),
            )
            .await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn a_post_that_does_not_accept_an_event_stream_is_406() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            for accept in ["application/json", "text/event-stream", "*/*"] {
                let response = ask(
                    &service,
                    post(ENDPOINT, &initialize(), &[("accept", accept)]),
                )
                .await;
                assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE, "{accept}");
                assert!(!response.headers().contains_key(SESSION), "{accept}");
            }
            let response = ask(
                &service,
                post(ENDPOINT, &initialize(), &[("content-type", "text/plain")]),
            )
            .await;
            assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        });
    }

    #[test]
    fn a_non_local_origin_is_403_and_a_loopback_one_is_served() {
        runtime().block_on(async {
            for allow_remote in [false, true] {
                let service = endpoint(allow_remote, CancellationToken::new());
                for origin in [
                    "http://evil.example",
                    "https://192.0.2.7:8080",
                    "null",
                    "not a url",
                ] {
                    let response = ask(
                        &service,
                        post(ENDPOINT, &initialize(), &[("origin", origin)]),
                    )
                    .await;
                    assert_eq!(response.status(), StatusCode::FORBIDDEN, "{origin}");
                    assert!(!response.headers().contains_key(SESSION), "{origin}");
                }
                for origin in [
                    "http://localhost:3000",
                    "http://127.0.0.1",
                    "https://[::1]:8443",
                ] {
                    let response = ask(
                        &service,
                        post(ENDPOINT, &initialize(), &[("origin", origin)]),
                    )
                    .await;
                    assert_eq!(response.status(), StatusCode::OK, "{origin}");
                    assert!(response.headers().contains_key(SESSION), "{origin}");
                }
            }
        });
    }

    #[test]
    fn a_remote_host_header_is_403_unless_remote_clients_are_allowed() {
        runtime().block_on(async {
            let rebinding = [("host", "attacker.example:8080")];
            let local = endpoint(false, CancellationToken::new());
            let response = ask(&local, post(ENDPOINT, &initialize(), &rebinding)).await;
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            for host in ["localhost:8080", "[::1]:8080", "127.0.0.1"] {
                let response = ask(&local, post(ENDPOINT, &initialize(), &[("host", host)])).await;
                assert_eq!(response.status(), StatusCode::OK, "{host}");
            }
            let remote = endpoint(true, CancellationToken::new());
            let response = ask(&remote, post(ENDPOINT, &initialize(), &rebinding)).await;
            assert_eq!(response.status(), StatusCode::OK);
        });
    }

    #[test]
    fn only_the_endpoint_speaks_mcp() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            for path in ["/", "/mcp/", "/sse", "/MCP"] {
                let response = ask(&service, post(path, &initialize(), &[])).await;
                assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
                assert!(text(response).await.contains("MCP at /mcp"), "{path}");
            }
            let response = ask(&service, post("/mcp?x=1", &initialize(), &[])).await;
            assert_eq!(response.status(), StatusCode::OK);
        });
    }

    #[test]
    fn other_methods_are_405_naming_the_allowed_ones() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            let put = Request::put(ENDPOINT)
                .header("host", "127.0.0.1:8080")
                .header("authorization", bearer())
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = ask(&service, put).await;
            assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
            assert_eq!(response.headers()["allow"], "GET, POST, DELETE");
        });
    }

    #[test]
    fn a_quiet_session_is_kept_while_a_long_call_runs() {
        let sessions = sessions();
        assert_eq!(sessions.session_config.keep_alive, None);
        // What does end a session that never said initialize stays.
        assert!(sessions.session_config.init_timeout.is_some());
    }

    #[test]
    fn once_stopping_every_request_is_503() {
        runtime().block_on(async {
            let stop = CancellationToken::new();
            let service = endpoint(false, stop.clone());
            let session = open_session(&service).await;
            stop.cancel();
            let response = ask(
                &service,
                post(ENDPOINT, &tools_list(4), &[(SESSION, &session)]),
            )
            .await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(text(response).await.contains("stopping"));
            let response = ask(&service, post(ENDPOINT, &initialize(), &[])).await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        });
    }

    #[test]
    fn a_request_without_the_token_is_401_saying_where_the_token_is() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            let wrong = format!("Bearer {}", "08".repeat(32));
            let basic = "Basic cm9vdDpyb290";
            for auth in [None, Some(wrong.as_str()), Some(basic), Some("Bearer")] {
                let mut request = post(ENDPOINT, &initialize(), &[]);
                request.headers_mut().remove("authorization");
                if let Some(auth) = auth {
                    request
                        .headers_mut()
                        .insert("authorization", auth.parse().unwrap());
                }
                let trusted = AtomicBool::new(false);
                let response = route(&service, request, &trusted).await;
                assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
                assert_eq!(response.headers()["www-authenticate"], "Bearer");
                assert!(!response.headers().contains_key(SESSION), "{auth:?}");
                assert!(!trusted.load(Ordering::Relaxed), "{auth:?}");
                let message = text(response).await;
                assert!(
                    message.contains("Authorization: Bearer TOKEN")
                        && message.contains("/run/user/0/ditto/mcp-127.0.0.1:8080.token"),
                    "{message}"
                );
            }
            // Off the endpoint too: nothing is said without the token.
            let mut request = post("/elsewhere", &initialize(), &[]);
            request.headers_mut().remove("authorization");
            let response = ask(&service, request).await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            // With it, the connection is trusted.
            let trusted = AtomicBool::new(false);
            let response = route(&service, post(ENDPOINT, &initialize(), &[]), &trusted).await;
            assert_eq!(response.status(), StatusCode::OK);
            assert!(trusted.load(Ordering::Relaxed));
        });
    }

    #[test]
    fn a_repeated_host_origin_or_authorization_header_is_400() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            for (name, second, named) in [
                ("host", "attacker.example:8080", "Host"),
                ("origin", "http://evil.example", "Origin"),
                ("authorization", "Bearer 00", "Authorization"),
            ] {
                let mut request = post(
                    ENDPOINT,
                    &initialize(),
                    &[("origin", "http://localhost:3000")],
                );
                request.headers_mut().append(name, second.parse().unwrap());
                let response = ask(&service, request).await;
                assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{name}");
                assert!(!response.headers().contains_key(SESSION), "{name}");
                assert_eq!(
                    text(response).await,
                    format!("Bad Request: 2 {named} headers; send one")
                );
            }
        });
    }

    #[test]
    fn an_absolute_form_target_is_400() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            for target in ["http://evil.example/mcp", "http://127.0.0.1:8080/mcp"] {
                let response = ask(&service, post(target, &initialize(), &[])).await;
                assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{target}");
                assert!(text(response).await.contains("origin-form"), "{target}");
            }
        });
    }

    #[test]
    fn a_body_that_is_not_json_is_400_with_a_json_rpc_parse_error() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            for (body, code) in [
                ("{\"jsonrpc\": \"2.0\", \"id\": 1,", -32700),
                ("not json", -32700),
                ("", -32700),
                ("{\"hello\": 1}", -32600),
                ("[]", -32600),
            ] {
                let request = post_raw(ENDPOINT, Bytes::from(body), &[]);
                let response = ask(&service, request).await;
                assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body:?}");
                assert_eq!(response.headers()["content-type"], "application/json");
                let error: Value = serde_json::from_str(&text(response).await).unwrap();
                assert_eq!(error["jsonrpc"], "2.0", "{error}");
                assert_eq!(error["id"], Value::Null, "{error}");
                assert_eq!(error["error"]["code"], code, "{body:?}: {error}");
            }
            // A body declared as something else is still rmcp's 415.
            let request = post_raw(
                ENDPOINT,
                Bytes::from("x"),
                &[("content-type", "text/plain")],
            );
            let response = ask(&service, request).await;
            assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        });
    }

    /// A body that never arrives.
    struct Trickle;

    impl hyper::body::Body for Trickle {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
            std::task::Poll::Pending
        }
    }

    #[test]
    fn a_body_still_coming_at_its_deadline_is_408_and_closes_the_connection() {
        runtime().block_on(async {
            let mut service = endpoint(false, CancellationToken::new());
            service.body_read_timeout = Duration::from_millis(200);
            let (parts, _) = post(ENDPOINT, &initialize(), &[]).into_parts();
            let started = std::time::Instant::now();
            let response = ask(&service, Request::from_parts(parts, Trickle)).await;
            assert!(started.elapsed() < Duration::from_secs(5));
            assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
            assert_eq!(response.headers()["connection"], "close");
            assert!(text(response).await.contains("within 0.2 s"));
        });
    }

    #[test]
    fn a_body_over_four_mib_is_413_however_it_comes() {
        runtime().block_on(async {
            let service = endpoint(false, CancellationToken::new());
            let big = Bytes::from(vec![b' '; MAX_BODY_BYTES + 1]);
            let response = ask(&service, post_raw(ENDPOINT, big, &[])).await;
            assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
            // Declared too large: refused before a byte of it is read.
            let (parts, _) =
                post(ENDPOINT, &initialize(), &[("content-length", "4194305")]).into_parts();
            let response = ask(&service, Request::from_parts(parts, Trickle)).await;
            assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
            assert_eq!(response.headers()["connection"], "close");
        });
    }

    #[test]
    fn room_is_made_by_closing_the_oldest_connection_that_never_showed_the_token() {
        let connections = Arc::new(Connections::default());
        let first = connections.admit(3).unwrap();
        let second = connections.admit(3).unwrap();
        let third = connections.admit(3).unwrap();
        first.trusted.store(true, Ordering::Relaxed);
        // Full: the oldest untrusted (the second) makes room.
        let fourth = connections.admit(3).unwrap();
        assert!(second.close.is_cancelled());
        assert!(!first.close.is_cancelled() && !third.close.is_cancelled());
        assert_eq!(connections.held(), 3);
        drop(second);
        assert_eq!(connections.held(), 3);
        third.trusted.store(true, Ordering::Relaxed);
        fourth.trusted.store(true, Ordering::Relaxed);
        // Every one trusted: no room.
        assert!(connections.admit(3).is_none());
        drop(first);
        assert_eq!(connections.held(), 2);
        assert!(connections.admit(3).is_some());
    }
}
