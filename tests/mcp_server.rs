//! `ditto mcp` driven as an MCP client drives it: newline-delimited
//! JSON-RPC on the server's stdin/stdout (initialize, initialized,
//! tools/list, tools/call), with real applications on the CPU runtime.

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

struct Client {
    child: Child,
    stdin: ChildStdin,
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
            stdin,
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
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and returns the response with its id (notifications
    /// in between are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no answer to {method} within 120 s"));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("the server wrote a line that is not JSON ({e}): {line}")
            });
            if v["id"] == json!(id) {
                return v;
            }
        }
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
fn an_mcp_client_lists_the_four_tools_and_validates_reduce_sum() {
    let mut c = Client::start();
    let list = c.request("tools/list", json!({}));
    let mut names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["capture", "compare", "kernels", "validate"]);
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
