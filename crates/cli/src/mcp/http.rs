//! `ditto mcp --http ADDR`: MCP's streamable HTTP transport (revision
//! 2025-03-26 and later) at one endpoint, [`ENDPOINT`], serving the one
//! [`DittoServer`] that stdio serves.
//!
//! Owns the listener and its connections (hyper, HTTP/1.1), which requests
//! reach the endpoint, the transport's security settings, and stopping on
//! SIGINT/SIGTERM. The transport's own rules are rmcp's streamable HTTP
//! service: a POST of JSON-RPC answered as an event stream, the
//! `Mcp-Session-Id` issued at initialize and required after (an unknown
//! one is 404), DELETE ending a session (answered 204 here), GET opening
//! the server's stream, `Accept` checked (406). Set here: the `Host`
//! header must name a loopback host unless remote clients are allowed (so
//! that a DNS-rebound name gets nothing), and a request carrying an
//! `Origin` (a browser's) must come from a loopback origin, always (so
//! that no web page can drive the tools). Never handles a tool itself,
//! and passes rmcp no request for another path.
//!
//! Every connection, session and call is a task of one current-thread
//! runtime on the calling thread (the tools' children rely on that; see
//! `die_with_this_process`): a call waiting for its child waits without
//! holding the thread, so other requests are answered meanwhile. Stopping
//! ends every session, drops every call (killing its child) and returns
//! within about a second whatever the clients still hold open.

use super::DittoServer;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
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

/// The longest a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

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

/// One request: the endpoint's go to rmcp, any other path is 404; once
/// the server is stopping, every request is 503.
async fn route<B>(service: &McpService, request: Request<B>) -> Response<Body>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send + 'static,
    B::Error: std::fmt::Display,
{
    if service.config.cancellation_token.is_cancelled() {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable: the MCP server is stopping".into(),
        );
    }
    if request.uri().path() != ENDPOINT {
        let message = format!(
            "Not Found: {} is not an MCP endpoint; this server speaks MCP at {ENDPOINT}",
            request.uri().path()
        );
        return plain(StatusCode::NOT_FOUND, message);
    }
    let ends_a_session = request.method() == http::Method::DELETE;
    let mut response = service.handle(request).await;
    // rmcp answers a session ended with 202 and no body; clients (the
    // official Python SDK among them) expect 200 or 204 for it.
    if ends_a_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

fn plain(status: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(message)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Serves MCP over HTTP at `address` (checked by `address`) until SIGINT
/// or SIGTERM. Prints the endpoint's URL on stderr, one line, once
/// listening (port 0 gives the port the system picked).
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
    let listener = TcpListener::bind(address).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot serve MCP over HTTP on {address}: {e} (another server on that port? \
             --http 0 picks a free one)"
        )
    })?;
    let bound = listener.local_addr()?;
    eprintln!("ditto mcp: serving MCP over HTTP at http://{bound}{ENDPOINT}");
    if !bound.ip().to_canonical().is_loopback() {
        eprintln!(
            "ditto mcp: warning: {bound} is reachable from other machines (--allow-remote): \
             whoever reaches it can run programs here as this user"
        );
    }
    let stop = CancellationToken::new();
    let service = mcp_service(allow_remote, stop.clone());
    let why = loop {
        tokio::select! {
            _ = interrupt.recv() => break "SIGINT",
            _ = terminate.recv() => break "SIGTERM",
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    tokio::spawn(connection(stream, service.clone()));
                }
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
    Ok(())
}

/// Serves one client connection's requests until it closes.
async fn connection(stream: tokio::net::TcpStream, service: McpService) {
    let requests = hyper::service::service_fn(move |request| {
        let service = service.clone();
        async move { Ok::<_, Infallible>(route(&service, request).await) }
    });
    // A broken connection concerns that client only.
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), requests)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const SESSION: &str = "mcp-session-id";

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A POST of `message` to `path` as an MCP client sends it, with
    /// `extra` headers (a header given there replaces the default).
    fn post(path: &str, message: &Value, extra: &[(&str, &str)]) -> Request<Full<Bytes>> {
        let mut headers = vec![
            ("host", "127.0.0.1:8080"),
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
        ];
        for (name, value) in extra {
            headers.retain(|(n, _)| n != name);
            headers.push((name, value));
        }
        let mut request = Request::post(path);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request
            .body(Full::new(Bytes::from(message.to_string())))
            .unwrap()
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
    async fn open_session(service: &McpService) -> String {
        let response = route(service, post(ENDPOINT, &initialize(), &[])).await;
        assert_eq!(response.status(), StatusCode::OK);
        let session = response.headers()[SESSION].to_str().unwrap().to_string();
        let answer = message_with_id(response, 1).await;
        assert_eq!(answer["result"]["serverInfo"]["name"], "ditto", "{answer}");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = route(
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
            let service = mcp_service(false, CancellationToken::new());
            let session = open_session(&service).await;
            assert!(session.len() >= 16, "{session}");
            let response = route(
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
            let service = mcp_service(false, CancellationToken::new());
            let response = route(&service, post(ENDPOINT, &tools_list(2), &[])).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            assert!(text(response).await.contains("Session ID is required"));
            let unknown = [(SESSION, "no-such-session")];
            let response = route(&service, post(ENDPOINT, &tools_list(2), &unknown)).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn delete_ends_a_session_and_its_id_is_then_unknown() {
        runtime().block_on(async {
            let service = mcp_service(false, CancellationToken::new());
            let session = open_session(&service).await;
            let delete = Request::delete(ENDPOINT)
                .header("host", "localhost:8080")
                .header(SESSION, &session)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = route(&service, delete).await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT);
            let response = route(
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
            let service = mcp_service(false, CancellationToken::new());
            for accept in ["application/json", "text/event-stream", "*/*"] {
                let response = route(
                    &service,
                    post(ENDPOINT, &initialize(), &[("accept", accept)]),
                )
                .await;
                assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE, "{accept}");
                assert!(!response.headers().contains_key(SESSION), "{accept}");
            }
            let response = route(
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
                let service = mcp_service(allow_remote, CancellationToken::new());
                for origin in [
                    "http://evil.example",
                    "https://192.0.2.7:8080",
                    "null",
                    "not a url",
                ] {
                    let response = route(
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
                    let response = route(
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
            let local = mcp_service(false, CancellationToken::new());
            let response = route(&local, post(ENDPOINT, &initialize(), &rebinding)).await;
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            for host in ["localhost:8080", "[::1]:8080", "127.0.0.1"] {
                let response =
                    route(&local, post(ENDPOINT, &initialize(), &[("host", host)])).await;
                assert_eq!(response.status(), StatusCode::OK, "{host}");
            }
            let remote = mcp_service(true, CancellationToken::new());
            let response = route(&remote, post(ENDPOINT, &initialize(), &rebinding)).await;
            assert_eq!(response.status(), StatusCode::OK);
        });
    }

    #[test]
    fn only_the_endpoint_speaks_mcp() {
        runtime().block_on(async {
            let service = mcp_service(false, CancellationToken::new());
            for path in ["/", "/mcp/", "/sse", "/MCP"] {
                let response = route(&service, post(path, &initialize(), &[])).await;
                assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
                assert!(text(response).await.contains("MCP at /mcp"), "{path}");
            }
            let response = route(&service, post("/mcp?x=1", &initialize(), &[])).await;
            assert_eq!(response.status(), StatusCode::OK);
        });
    }

    #[test]
    fn other_methods_are_405_naming_the_allowed_ones() {
        runtime().block_on(async {
            let service = mcp_service(false, CancellationToken::new());
            let put = Request::put(ENDPOINT)
                .header("host", "127.0.0.1:8080")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = route(&service, put).await;
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
            let service = mcp_service(false, stop.clone());
            let session = open_session(&service).await;
            stop.cancel();
            let response = route(
                &service,
                post(ENDPOINT, &tools_list(4), &[(SESSION, &session)]),
            )
            .await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(text(response).await.contains("stopping"));
            let response = route(&service, post(ENDPOINT, &initialize(), &[])).await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        });
    }
}
