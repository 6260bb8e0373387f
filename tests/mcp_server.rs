//! `ditto mcp` driven as an MCP client drives it: newline-delimited
//! JSON-RPC on the server's stdin/stdout (initialize, initialized,
//! tools/list, tools/call), with real applications on the CPU runtime; and
//! what a client cannot see: the server's children end with the server and
//! with a cancelled call (found through /proc).

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Client {
    child: Child,
    /// None once closed (the client is done).
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(ditto_bin())
            .arg("mcp")
            .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
            .env("DITTO_TOOL_LIB", tool_lib())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ditto mcp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut c = Client {
            child,
            stdin: Some(stdin),
            lines,
            next_id: 1,
        };
        let init = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "ditto-test", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "ditto", "{init}");
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, message: &Value) {
        self.send_raw(format!("{message}\n").as_bytes());
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request without waiting for its answer; gives its id.
    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next line the server wrote, as JSON.
    fn next_line(&mut self, timeout: Duration, waiting_for: &str) -> Value {
        let line = self
            .lines
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("no answer to {waiting_for} within {timeout:?}"));
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the server wrote a line that is not JSON ({e}): {line}"))
    }

    /// Sends a request and returns the response with its id and every
    /// line the server wrote before it.
    fn request_after(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.send_request(method, params);
        let mut before = Vec::new();
        loop {
            let v = self.next_line(Duration::from_secs(120), method);
            if v["id"] == json!(id) {
                return (v, before);
            }
            before.push(v);
        }
    }

    /// Sends a request and returns the response with its id (notifications
    /// in between are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_after(method, params).0
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert!(r["error"].is_null(), "{tool}: protocol error {r}");
        r["result"].clone()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn app_path(name: &str) -> String {
    app(name).display().to_string()
}

#[test]
fn an_mcp_client_replays_a_captured_dispatch_with_a_replacement() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut c = Client::start();
    let captured = c.call(
        "capture",
        json!({"kernel": "reduce_sum",
               "command": [hip_app("reduce_sum_baseline").display().to_string()],
               "out": snap.display().to_string(),
               "capture": "replay",
               "hsa_runtime": "cpu"}),
    );
    assert_eq!(captured["isError"], false, "{captured}");
    let wrong = c.call(
        "replay",
        json!({"snapshot": snap.display().to_string(),
               "from": hip_app("reduce_sum_wrong").display().to_string(),
               "hsa_runtime": "cpu"}),
    );
    assert_eq!(wrong["isError"], false, "{wrong}");
    let v = &wrong["structuredContent"];
    assert_eq!(v["valid"], false, "{wrong}");
    assert_eq!(v["mismatches"][0]["max_abs_diff"], 98301.5);
    assert_eq!(v["replay"]["original_reproduced"], true, "{wrong}");
    let fast = c.call(
        "replay",
        json!({"snapshot": snap.display().to_string(),
               "from": hip_app("reduce_sum_optimized").display().to_string(),
               "iterations": 2,
               "hsa_runtime": "cpu"}),
    );
    let v = &fast["structuredContent"];
    assert_eq!(v["valid"], true, "{fast}");
    assert_eq!(v["replay"]["times_ns"].as_array().map(Vec::len), Some(2));
    let text = fast["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("speedup"), "{fast}");
    let missing = c.call("replay", json!({"snapshot": "/nonexistent/snap"}));
    assert_eq!(missing["isError"], true, "{missing}");
}

#[test]
fn an_mcp_client_lists_the_five_tools_and_validates_reduce_sum() {
    let mut c = Client::start();
    let list = c.request("tools/list", json!({}));
    let mut names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["capture", "compare", "kernels", "replay", "validate"]
    );
    let validate = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "validate")
        .unwrap();
    let required = validate["inputSchema"]["required"].as_array().unwrap();
    for field in ["kernel", "reference", "optimized"] {
        assert!(required.contains(&json!(field)), "{validate}");
    }

    let ok = c.call(
        "validate",
        json!({"kernel": "reduce_sum",
               "reference": [app_path("reduce_sum_baseline")],
               "optimized": [app_path("reduce_sum_optimized")]}),
    );
    assert_eq!(ok["isError"], false, "{ok}");
    assert_eq!(ok["structuredContent"]["valid"], true, "{ok}");
    assert!(
        ok["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("PASS"),
        "{ok}"
    );

    let bad = c.call(
        "validate",
        json!({"kernel": "reduce_sum",
               "reference": [app_path("reduce_sum_baseline")],
               "optimized": [app_path("reduce_sum_wrong")]}),
    );
    assert_eq!(
        bad["isError"], false,
        "a mismatch is an answer, not an error: {bad}"
    );
    let s = &bad["structuredContent"];
    assert_eq!(s["valid"], false);
    assert_eq!(s["mismatches"][0]["arg"], 1);
    assert_eq!(s["mismatches"][0]["max_abs_diff"], 98301.5);
    let summary = bad["content"][0]["text"].as_str().unwrap();
    assert!(summary.contains("Mismatched elements: 1 / 1"), "{summary}");

    // A renamed optimized kernel, and the times beside the verdict.
    let renamed = c.call(
        "validate",
        json!({"kernel": "reduce_sum", "opt_kernel": "reduce_sum_v2",
               "reference": [app_path("reduce_sum_baseline")],
               "optimized": [app_path("reduce_sum_renamed")]}),
    );
    let s = &renamed["structuredContent"];
    assert_eq!(s["valid"], true, "{renamed}");
    assert_eq!(
        s["optimized_kernel"],
        "reduce_sum_v2(float const*, float*, int)"
    );
    assert!(s["timing"]["speedup"].as_f64().unwrap() > 0.0, "{renamed}");
}

#[test]
fn capture_then_compare_through_mcp_and_errors_carry_the_cli_message() {
    let mut c = Client::start();
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().display().to_string();
    for (out, ty) in [("a", "float"), ("b", "float")] {
        let r = c.call(
            "capture",
            json!({"kernel": "scale_values<float>", "out": out, "working_directory": dir_text,
                   "command": [app_path("scale_values"), ty, "32"]}),
        );
        assert_eq!(r["isError"], false, "{r}");
        let d = &r["structuredContent"]["dispatches"][0];
        assert_eq!(d["arrays"][1]["elements"], 32, "{r}");
        assert_eq!(d["arrays"][1]["max"], 62.0, "{r}");
    }
    let same = c.call(
        "compare",
        json!({"reference": format!("{dir_text}/a"), "optimized": format!("{dir_text}/b")}),
    );
    assert_eq!(same["structuredContent"]["valid"], true, "{same}");
    assert_eq!(same["structuredContent"]["arrays_compared"], 2, "{same}");

    let never = c.call(
        "capture",
        json!({"kernel": "scale_valuez", "out": "c", "working_directory": dir_text,
               "command": [app_path("scale_values"), "float", "8"]}),
    );
    assert_eq!(never["isError"], true, "{never}");
    let message = never["structuredContent"]["error"].as_str().unwrap();
    assert!(
        message.contains("never dispatched") && message.contains("scale_values<float>"),
        "{message}"
    );

    let empty = c.call(
        "validate",
        json!({"kernel": "reduce_sum", "reference": [], "optimized": [app_path("reduce_sum_wrong")]}),
    );
    assert_eq!(empty["isError"], true, "{empty}");
    assert!(
        empty["structuredContent"]["error"]
            .as_str()
            .unwrap()
            .contains("reference is empty"),
        "{empty}"
    );
}

#[test]
fn kernels_through_mcp_lists_a_fat_binary() {
    let mut c = Client::start();
    let fixture = repo_root().join("crates/kernels/tests/fixtures/fatbin-app");
    let r = c.call("kernels", json!({"file": fixture.display().to_string()}));
    assert_eq!(r["isError"], false, "{r}");
    let kernels = r["structuredContent"]["kernels"].as_array().unwrap();
    assert!(
        kernels
            .iter()
            .any(|k| k["name"].as_str().unwrap().contains("scale_values")),
        "{r}"
    );
    let missing = c.call("kernels", json!({"file": "/nonexistent/app"}));
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(
        missing["structuredContent"]["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/app"),
        "{missing}"
    );
}

/// A process as /proc shows it: its pid, its start time (so that a reused
/// pid is not taken for it) and its command line.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    start: u64,
    cmdline: String,
}

/// (state, parent pid, start time) of `pid` from /proc/PID/stat.
fn proc_stat(pid: u32) -> Option<(char, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(1)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
    ))
}

/// Every process below `pid` (children, their children, ...).
fn descendants_of(pid: u32) -> Vec<Proc> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((_, parent, start)) = proc_stat(p) {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            all.push((
                parent,
                Proc {
                    pid: p,
                    start,
                    cmdline,
                },
            ));
        }
    }
    let mut found: Vec<Proc> = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for (_, p) in all.iter().filter(|(pp, _)| *pp == parent) {
            parents.push(p.pid);
            found.push(p.clone());
        }
    }
    found
}

/// Whether `p` still runs (a zombie waiting for its new parent to reap it
/// has ended).
fn running(p: &Proc) -> bool {
    matches!(proc_stat(p.pid), Some((state, _, start)) if start == p.start && !matches!(state, 'Z' | 'X'))
}

/// Kills (SIGKILL) whatever of its processes still runs when dropped, so
/// that a failing test leaves none behind.
struct KillOnDrop(Vec<Proc>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for p in self.0.iter().filter(|p| running(p)) {
            // SAFETY: plain kill(2) of a process this test started (its
            // start time checked just now).
            unsafe { libc::kill(p.pid as i32, libc::SIGKILL) };
        }
    }
}

/// Waits (60 s at most) until the server's processes satisfy `ready`
/// (answers that arrive meanwhile are kept in `answers`); gives them.
fn wait_for_processes(
    c: &mut Client,
    answers: &mut Vec<Value>,
    ready: impl Fn(&[Proc], &[Value]) -> bool,
    what: &str,
) -> Vec<Proc> {
    let server = c.child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        while let Ok(line) = c.lines.try_recv() {
            answers.push(serde_json::from_str(&line).unwrap());
        }
        let procs = descendants_of(server);
        if ready(&procs, answers) {
            return procs;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not seen within 60 s; the server's processes: {procs:#?}; answers: {answers:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts that every one of `procs` has ended within 10 s.
fn assert_all_end(procs: &[Proc], after: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<&Proc> = procs.iter().filter(|p| running(p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{after}, these processes of the server still run 10 s later: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_run_of_sleep(p: &Proc) -> bool {
    p.cmdline.contains(" run ") && p.cmdline.contains("sleep 600")
}

fn is_sleep(p: &Proc) -> bool {
    p.cmdline.starts_with("sleep 600")
}

/// A `capture` call whose child `ditto run` runs until it is stopped (its
/// application sleeps 10 minutes): a child that outlives nothing by itself.
fn start_a_long_capture(c: &mut Client, dir: &std::path::Path) -> u64 {
    c.send_request(
        "tools/call",
        json!({"name": "capture", "arguments": {"kernel": "scale_values", "out": "never",
               "working_directory": dir.display().to_string(), "command": ["sleep", "600"]}}),
    )
}

#[test]
fn the_servers_children_end_with_it_killed_or_with_its_input_closed() {
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().display().to_string();
    // A snapshot, and a copy of it whose dispatch file is a FIFO: a
    // `ditto compare` that opens dispatch files waiting for a writer hangs
    // on it.
    let mut c = Client::start();
    let r = c.call(
        "capture",
        json!({"kernel": "scale_values<float>", "out": "ref", "working_directory": dir_text,
               "command": [app_path("scale_values"), "float", "8"]}),
    );
    assert_eq!(r["isError"], false, "{r}");
    drop(c);
    let fifo_snapshot = dir.path().join("fifo");
    std::fs::create_dir(&fifo_snapshot).unwrap();
    for f in ["manifest.json", "dispatches.jsonl"] {
        std::fs::copy(dir.path().join("ref").join(f), fifo_snapshot.join(f)).unwrap();
    }
    let fifo = std::ffi::CString::new(
        fifo_snapshot
            .join("dispatch-0-00000.safetensors")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

    for ending in ["killed (SIGKILL)", "its input closed"] {
        let mut c = Client::start();
        start_a_long_capture(&mut c, dir.path());
        let compare = c.send_request(
            "tools/call",
            json!({"name": "compare", "arguments": {"reference": format!("{dir_text}/ref"),
                   "optimized": fifo_snapshot.display().to_string()}}),
        );
        let mut answers = Vec::new();
        // The run and its application, and the compare child unless the
        // comparison already answered (a CLI that refuses the FIFO).
        let procs = wait_for_processes(
            &mut c,
            &mut answers,
            |procs, answers| {
                procs.iter().any(is_run_of_sleep)
                    && procs.iter().any(is_sleep)
                    && (procs.iter().any(|p| p.cmdline.contains(" compare "))
                        || answers.iter().any(|a| a["id"] == json!(compare)))
            },
            "the capture's `ditto run` and `sleep`, and the compare child or its answer",
        );
        let _cleanup = KillOnDrop(procs.clone());
        if ending.starts_with("killed") {
            c.child.kill().unwrap();
            c.child.wait().unwrap();
        } else {
            drop(c.stdin.take());
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.child.try_wait().unwrap().is_none() {
                assert!(
                    Instant::now() < deadline,
                    "the server did not end within 30 s of its input closing"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        assert_all_end(&procs, &format!("the server {ending}"));
    }
}

#[test]
fn compare_of_a_snapshot_whose_dispatch_file_is_a_fifo_answers_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().display().to_string();
    let mut c = Client::start();
    let r = c.call(
        "capture",
        json!({"kernel": "scale_values<float>", "out": "ref", "working_directory": dir_text,
               "command": [app_path("scale_values"), "float", "8"]}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let file = dir.path().join("ref").join("dispatch-0-00000.safetensors");
    std::fs::remove_file(&file).unwrap();
    let fifo = std::ffi::CString::new(file.into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let reference = format!("{dir_text}/ref");
    let r = c.call(
        "compare",
        json!({"reference": reference, "optimized": reference}),
    );
    assert_eq!(r["isError"], true, "{r}");
    let message = r["structuredContent"]["error"].as_str().unwrap();
    assert!(
        message.contains("dispatch-0-00000.safetensors: not read: it is a FIFO"),
        "{message}"
    );
}

#[test]
fn a_cancelled_call_stops_its_child_and_the_server_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start();
    let id = start_a_long_capture(&mut c, dir.path());
    let mut answers = Vec::new();
    let procs = wait_for_processes(
        &mut c,
        &mut answers,
        |procs, _| procs.iter().any(is_run_of_sleep) && procs.iter().any(is_sleep),
        "the capture's `ditto run` and `sleep`",
    );
    let _cleanup = KillOnDrop(procs.clone());
    c.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": id, "reason": "the client gave up"}}),
    );
    assert_all_end(&procs, "the call cancelled");
    let list = c.request("tools/list", json!({}));
    assert_eq!(
        list["result"]["tools"].as_array().map(Vec::len),
        Some(5),
        "{list}"
    );
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_and_the_next_request_its_answer() {
    let mut c = Client::start();
    let bad: [&[u8]; 3] = [
        b"this is not json\n",
        b"{\"jsonrpc\": \"2.0\", \"id\": 99, \"method\": \n",
        b"\xff\xfe{}\n",
    ];
    for line in bad {
        c.send_raw(line);
    }
    let (list, before) = c.request_after("tools/list", json!({}));
    assert_eq!(
        list["result"]["tools"].as_array().map(Vec::len),
        Some(5),
        "{list}"
    );
    assert_eq!(before.len(), 3, "one reply per bad line: {before:?}");
    for (n, reply) in before.iter().enumerate() {
        assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
        assert_eq!(reply["id"], Value::Null, "{reply}");
        assert_eq!(reply["error"]["code"], -32700, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains("not JSON"), "{reply}");
        // Lines are counted from 1, the initialize request and the
        // initialized notification before them.
        assert!(message.contains(&format!("line {}", n + 3)), "{reply}");
    }
    // JSON that is no JSON-RPC message is rmcp's to answer (-32600,
    // Invalid Request), and a tool call after everything still works.
    c.send_raw(b"{\"jsonrpc\": \"2.0\", \"colour\": 1}\n");
    let (kernels, before) = c.request_after(
        "tools/call",
        json!({"name": "kernels", "arguments": {"file": "/nonexistent/app"}}),
    );
    assert_eq!(kernels["result"]["isError"], true, "{kernels}");
    let codes: Vec<&Value> = before.iter().map(|r| &r["error"]["code"]).collect();
    assert_eq!(codes, [&json!(-32600)], "{before:?}");
}
