//! `ditto mcp --http` against clients it must refuse or outlast (issue
//! 45, item 1), over real sockets to the real server: another uid (run
//! as uid 65534, which needs root: CI runs as root) reads no token and
//! runs no program; a request without the token is 401; idle sockets
//! beyond the connection limit take no descriptors and keep no request
//! of the owner's waiting; a body that trickles in is cut at its
//! deadline; two `Host` or `Origin` headers, an absolute-form target and
//! a body that is not JSON are 400.

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const OTHER_UID: u32 = 65534;

/// The most connections the server holds at once (`http::MAX_CONNECTIONS`).
const MAX_CONNECTIONS: usize = 64;

/// `ditto mcp --http 0`, with what it printed when it started listening.
struct Server {
    child: Child,
    address: SocketAddr,
    /// The bearer token, as printed (None where the server prints none).
    token: Option<String>,
    /// The file the token is also in, as printed.
    token_file: Option<PathBuf>,
}

impl Server {
    /// Starts the server with `env` added; waits for its serving line.
    fn start(env: &[(&str, &Path)]) -> Server {
        let mut command = Command::new(ditto_bin());
        command
            .args(["mcp", "--http", "0"])
            .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
            .env("DITTO_TOOL_LIB", tool_lib())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("ditto mcp --http 0 starts");
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a serving line within 20 s");
        let url = first
            .strip_prefix("ditto mcp: serving MCP over HTTP at http://")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("the serving line is {first:?}"));
        let address: SocketAddr = url.parse().unwrap();
        // The token's line follows at once (where the server has one).
        let mut token = None;
        let mut token_file = None;
        if let Ok(line) = lines.recv_timeout(Duration::from_secs(2)) {
            token = line
                .split_once("Authorization: Bearer ")
                .map(|(_, rest)| rest.split(|c: char| !c.is_ascii_hexdigit()).next())
                .and_then(|t| t.map(str::to_string));
            token_file = line
                .split_once(" also in ")
                .map(|(_, rest)| PathBuf::from(rest.split(' ').next().unwrap()));
        }
        Server {
            child,
            address,
            token,
            token_file,
        }
    }

    fn bearer(&self) -> String {
        format!(
            "Bearer {}",
            self.token.as_deref().unwrap_or("the-server-printed-none")
        )
    }

    /// Descriptors the server holds open now.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    /// SIGTERM; the exit status.
    fn stop(&mut self) -> Option<i32> {
        // SAFETY: kill of our own child, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("ditto mcp did not stop within 10 s of SIGTERM");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer as read off the socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Header names in lower case, in the order sent.
    headers: Vec<(String, String)>,
    /// The body, de-chunked.
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message with id `id` in the body (an event stream's
    /// `data:` lines, or JSON).
    fn message(&self, id: u64) -> Value {
        self.body
            .lines()
            .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no message {id} in {self:?}"))
    }
}

/// Sends `request` (whole, as bytes) on a new connection and reads the
/// answer until the server closes it (requests say `Connection: close`).
fn exchange(address: SocketAddr, request: &[u8], limit: Duration) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(limit)).unwrap();
    stream.write_all(request).unwrap();
    let mut raw = Vec::new();
    if let Err(e) = stream.read_to_end(&mut raw) {
        panic!(
            "no complete answer within {limit:?} ({e}); got {:?}",
            String::from_utf8_lossy(&raw)
        );
    }
    parse_answer(&raw)
}

fn parse_answer(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Answer {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A POST to `target` of `body` with the headers an MCP client sends,
/// then `extra` (each a whole header line).
fn post(address: SocketAddr, target: &str, body: &str, extra: &[String]) -> Vec<u8> {
    let mut request = format!(
        "POST {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for line in extra {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    request.into_bytes()
}

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "ditto-test", "version": "0"}}})
    .to_string()
}

/// The owner's client: initializes a session with the token; its id.
fn owner_session(server: &Server) -> String {
    let auth = format!("Authorization: {}", server.bearer());
    let answer = exchange(
        server.address,
        &post(
            server.address,
            "/mcp",
            &initialize(),
            std::slice::from_ref(&auth),
        ),
        Duration::from_secs(20),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.message(1)["result"]["serverInfo"]["name"], "ditto");
    let session = answer.header("mcp-session-id").unwrap().to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = exchange(
        server.address,
        &post(
            server.address,
            "/mcp",
            &initialized.to_string(),
            &[auth, format!("Mcp-Session-Id: {session}")],
        ),
        Duration::from_secs(20),
    );
    assert_eq!(answer.status, 202, "{answer:?}");
    session
}

/// A `capture` call whose application writes the uid it runs as to `marker`.
fn capture_writing(marker: &Path, out: &Path) -> String {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
           "params": {"name": "capture", "arguments": {
               "kernel": "reduce_sum",
               "command": ["sh", "-c", format!("id -u > {}", marker.display())],
               "out": out.display().to_string()}}})
    .to_string()
}

/// What uid 65534 does: reads the token file, then tries initialize and
/// a `capture` call, with no token and with a made-up one. Prints one
/// JSON object: {"token_file": what reading it gave, "answers": [status, …]}.
const OTHER_USER: &str = r#"
import http.client, json, sys
host, port, token_file, call = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
result = {"answers": []}
try:
    with open(token_file) as f:
        result["token_file"] = "read: " + f.read().strip()
except OSError as e:
    result["token_file"] = type(e).__name__
init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "other-user", "version": "0"}}})
def post(body, headers):
    c = http.client.HTTPConnection(host, port, timeout=60)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers)
    c.request("POST", "/mcp", body, h)
    r = c.getresponse()
    session = r.getheader("mcp-session-id")
    r.read()
    c.close()
    result["answers"].append(r.status)
    return session
for auth in [{}, {"Authorization": "Bearer " + "0" * 64}]:
    session = post(init, auth)
    headers = dict(auth, **{"Mcp-Session-Id": session or "made-up"})
    post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), headers)
    post(call, headers)
print(json.dumps(result), flush=True)
"#;

#[test]
fn another_uid_reads_no_token_and_runs_no_program() {
    // SAFETY: getuid cannot fail.
    assert_eq!(
        unsafe { libc::getuid() },
        0,
        "this test runs a client as another uid, which needs root (CI runs as root)"
    );
    let runtime = tempfile::tempdir().unwrap();
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let markers = tempfile::tempdir().unwrap();
    std::fs::set_permissions(markers.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let token_file = server
        .token_file
        .clone()
        .unwrap_or_else(|| runtime.path().join("ditto").join("no-token-file"));

    let theirs = markers.path().join("ran-for-uid-65534");
    let python = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| !p.starts_with('/') || Path::new(p).exists())
        .unwrap();
    let out = Command::new(python)
        .args(["-c", OTHER_USER, "127.0.0.1"])
        .arg(server.address.port().to_string())
        .arg(&token_file)
        .arg(capture_writing(&theirs, &markers.path().join("their-snap")))
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tried: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let answers: Vec<u64> = tried["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(answers.len(), 6, "{tried}");
    assert!(
        !theirs.exists(),
        "uid {OTHER_UID}'s program ran: {theirs:?} holds {:?}",
        std::fs::read_to_string(&theirs)
    );
    // Refused by the peer check (403) before the token (401) is looked at.
    assert_eq!(answers, [403; 6], "uid {OTHER_UID} got {answers:?}");
    assert_eq!(tried["token_file"], "PermissionError", "{tried}");

    // The token file is the owner's only, and holds the printed token.
    let token = server.token.clone().expect("the server printed a token");
    assert_eq!(token.len(), 64, "{token}");
    let file = std::fs::symlink_metadata(&token_file).unwrap();
    assert_eq!((file.mode() & 0o777, file.uid()), (0o600, 0));
    let dir = std::fs::symlink_metadata(token_file.parent().unwrap()).unwrap();
    assert_eq!((dir.mode() & 0o777, dir.uid()), (0o700, 0));
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), token);

    // The owner, with the token, runs the same call.
    let ours = markers.path().join("ran-for-the-owner");
    let session = owner_session(&server);
    let answer = exchange(
        server.address,
        &post(
            server.address,
            "/mcp",
            &capture_writing(&ours, &markers.path().join("our-snap")),
            &[
                format!("Authorization: {}", server.bearer()),
                format!("Mcp-Session-Id: {session}"),
            ],
        ),
        Duration::from_secs(120),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.message(2);
    assert_eq!(std::fs::read_to_string(&ours).unwrap().trim(), "0");

    assert_eq!(server.stop(), Some(0));
    assert!(
        !token_file.exists(),
        "the token file outlived the server: {token_file:?}"
    );
}

#[test]
fn a_request_without_the_right_token_is_401_saying_where_the_token_is() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let wrong = format!("Bearer {}", "f".repeat(64));
    for auth in [
        vec![],
        vec![format!("Authorization: {wrong}")],
        vec!["Authorization: Bearer".to_string()],
        vec!["Authorization: Basic cm9vdDpyb290".to_string()],
    ] {
        let answer = exchange(
            server.address,
            &post(server.address, "/mcp", &initialize(), &auth),
            Duration::from_secs(20),
        );
        assert_eq!(answer.status, 401, "{auth:?}: {answer:?}");
        assert_eq!(
            answer.header("www-authenticate"),
            Some("Bearer"),
            "{auth:?}"
        );
        assert!(answer.header("mcp-session-id").is_none(), "{auth:?}");
        assert!(
            answer.body.contains("Authorization: Bearer") && answer.body.contains("token"),
            "{}",
            answer.body
        );
    }
    // Another path learns nothing either (not even that it is no endpoint).
    let answer = exchange(
        server.address,
        &post(server.address, "/other", &initialize(), &[]),
        Duration::from_secs(20),
    );
    assert_eq!(answer.status, 401, "{answer:?}");
}

#[test]
fn idle_sockets_beyond_the_limit_take_no_descriptors_and_the_owner_is_served() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let before = server.fds();
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS + 136)
        .map(|_| TcpStream::connect(server.address).unwrap())
        .collect();
    // The server closes what it has no room for as it gets to it.
    let bound = before + MAX_CONNECTIONS + 4;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut held = server.fds();
    while held > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        held = server.fds();
    }
    assert!(
        held <= bound,
        "{} idle sockets: the server went from {before} to {held} descriptors",
        idle.len()
    );
    let session = owner_session(&server);
    assert!(session.len() >= 16, "{session}");
    drop(idle);
}

#[test]
fn an_idle_connection_is_closed_at_the_header_deadline() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let mut stream = TcpStream::connect(server.address).unwrap();
    stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: ").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(40)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest);
    let took = started.elapsed();
    assert!(read.is_ok(), "still open after {took:?}: {read:?}");
    assert!(
        took >= Duration::from_secs(8) && took < Duration::from_secs(15),
        "closed after {took:?}"
    );
}

#[test]
fn a_body_that_trickles_in_is_cut_at_the_body_deadline() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let body = initialize();
    let request = post(
        server.address,
        "/mcp",
        &body,
        &[format!("Authorization: {}", server.bearer())],
    );
    let headers_end = request.len() - body.len();
    let mut stream = TcpStream::connect(server.address).unwrap();
    stream.write_all(&request[..headers_end]).unwrap();
    stream.set_nonblocking(true).unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut closed = false;
    // One byte a second, as long as the server takes them.
    for byte in request[headers_end..].iter() {
        if stream.write_all(&[*byte]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        let mut buf = [0u8; 4096];
        match stream.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(25) {
            break;
        }
    }
    let took = started.elapsed();
    assert!(
        closed,
        "the connection was still open after {took:?}, {} bytes of body sent",
        answer.len()
    );
    assert!(
        took >= Duration::from_secs(8) && took < Duration::from_secs(15),
        "closed after {took:?}"
    );
    let answer = parse_answer(&answer);
    assert_eq!(answer.status, 408, "{answer:?}");
    assert!(answer.body.contains("10 s"), "{}", answer.body);
}

#[test]
fn two_host_or_two_origin_headers_are_400() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let auth = format!("Authorization: {}", server.bearer());
    for (extra, named) in [
        (
            format!("Host: evil.example:{}", server.address.port()),
            "Host",
        ),
        ("Origin: http://localhost:3000".to_string(), "Origin"),
    ] {
        let mut headers = vec![auth.clone(), extra.clone()];
        if named == "Origin" {
            headers.push("Origin: http://evil.example".to_string());
        }
        let answer = exchange(
            server.address,
            &post(server.address, "/mcp", &initialize(), &headers),
            Duration::from_secs(20),
        );
        assert_eq!(answer.status, 400, "{extra}: {answer:?}");
        assert!(answer.header("mcp-session-id").is_none(), "{extra}");
        assert!(
            answer.body.contains(&format!("2 {named} headers")),
            "{}",
            answer.body
        );
    }
}

#[test]
fn an_absolute_form_target_is_400() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let auth = format!("Authorization: {}", server.bearer());
    for target in [
        "http://evil.example/mcp".to_string(),
        format!("http://{}/mcp", server.address),
    ] {
        let answer = exchange(
            server.address,
            &post(
                server.address,
                &target,
                &initialize(),
                std::slice::from_ref(&auth),
            ),
            Duration::from_secs(20),
        );
        assert_eq!(answer.status, 400, "{target}: {answer:?}");
        assert!(answer.header("mcp-session-id").is_none(), "{target}");
        assert!(answer.body.contains("origin-form"), "{}", answer.body);
    }
}

#[test]
fn a_body_that_is_not_json_is_400_with_a_parse_error() {
    let runtime = tempfile::tempdir().unwrap();
    let server = Server::start(&[("XDG_RUNTIME_DIR", runtime.path())]);
    let auth = format!("Authorization: {}", server.bearer());
    for body in ["{\"jsonrpc\": \"2.0\", \"id\": 1,", "not json", ""] {
        let answer = exchange(
            server.address,
            &post(server.address, "/mcp", body, std::slice::from_ref(&auth)),
            Duration::from_secs(20),
        );
        assert_eq!(answer.status, 400, "{body:?}: {answer:?}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
        let error: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(error["jsonrpc"], "2.0", "{error}");
        assert_eq!(error["id"], Value::Null, "{error}");
        assert_eq!(error["error"]["code"], -32700, "{error}");
    }
    // JSON that is no JSON-RPC message is an invalid request.
    let answer = exchange(
        server.address,
        &post(server.address, "/mcp", "{\"hello\": 1}", &[auth]),
        Duration::from_secs(20),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    let error: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(error["error"]["code"], -32600, "{error}");
}
