//! Tool loading in a fresh child process: HSA_TOOLS_LIB and
//! HSA_AMD_TOOL_PRIORITY discovery, order, dedup, failures, wraps, OnUnload.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::mem::offset_of;

const TOOL_C: &str = r#"
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static void log_line(const char* fmt, ...) {
  char buf[512]; va_list ap; va_start(ap, fmt); vsnprintf(buf, sizeof buf, fmt, ap); va_end(ap);
  FILE* f = fopen(getenv("DITTO_TEST_TOOL_LOG"), "a"); fputs(buf, f); fclose(f);
}
#ifdef PRIORITY
uint32_t HSA_AMD_TOOL_PRIORITY = PRIORITY;
#endif
typedef uint32_t (*signal_create_t)(int64_t, uint32_t, const void*, uint64_t*);
static signal_create_t next_signal_create;
static uint32_t my_signal_create(int64_t v, uint32_t n, const void* c, uint64_t* out) {
  log_line("%s wrap\n", TOOL_NAME);
  return next_signal_create(v, n, c, out);
}
static uint32_t count_agent(uint64_t agent, void* data) { (void)agent; (*(int*)data)++; return 0; }
static char* saved_core;
#ifndef NO_ONLOAD
bool OnLoad(void* table, uint64_t runtime_version, uint64_t failed_count, const char* const* failed_names) {
  char* core = *(char**)((char*)table + 16);
  saved_core = core;
  int agents = 0;
  ((uint32_t (*)(uint32_t (*)(uint64_t, void*), void*))*(void**)(core + ITERATE_AGENTS_OFF))(count_agent, &agents);
  char failed[256] = "";
  for (uint64_t i = 0; i < failed_count; i++) {
    const char* slash = failed_names[i];
    for (const char* p = failed_names[i]; *p; p++) if (*p == '/') slash = p + 1;
    snprintf(failed + strlen(failed), sizeof failed - strlen(failed), " %s", slash);
  }
  log_line("%s onload version=%llu agents=%d failed=%llu%s\n", TOOL_NAME, (unsigned long long)runtime_version, agents,
           (unsigned long long)failed_count, failed);
#ifdef NESTED_INIT
  uint32_t init = ((uint32_t (*)(void))*(void**)(core + INIT_OFF))();
  uint32_t shut = ((uint32_t (*)(void))*(void**)(core + SHUT_DOWN_OFF))();
  log_line("%s nested init=%u shut_down=%u\n", TOOL_NAME, init, shut);
#endif
  if (!RETURN_VALUE) return false;
  void** slot = (void**)(core + SIGNAL_CREATE_OFF);
  next_signal_create = (signal_create_t)*slot;
  *slot = (void*)my_signal_create;
  return true;
}
#endif
void OnUnload(void) {
  log_line("%s unload\n", TOOL_NAME);
#ifdef UNLOAD_CREATES_SIGNAL
  uint64_t s = 0;
  uint32_t rc = ((signal_create_t)*(void**)(saved_core + SIGNAL_CREATE_OFF))(0, 0, 0, &s);
  log_line("%s unload signal_create=%u\n", TOOL_NAME, rc);
#endif
}
"#;

/// Builds test tool `name` (libtool_<name>.so) from TOOL_C with `extra` defines.
fn build_tool(dir: &std::path::Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let mut defs = vec![
        format!(
            "-DITERATE_AGENTS_OFF={}",
            offset_of!(CoreApiTable, hsa_iterate_agents_fn)
        ),
        format!(
            "-DSIGNAL_CREATE_OFF={}",
            offset_of!(CoreApiTable, hsa_signal_create_fn)
        ),
        format!("-DINIT_OFF={}", offset_of!(CoreApiTable, hsa_init_fn)),
        format!(
            "-DSHUT_DOWN_OFF={}",
            offset_of!(CoreApiTable, hsa_shut_down_fn)
        ),
        "-include".to_string(),
        "string.h".to_string(),
        format!("-DTOOL_NAME=\"{name}\""),
    ];
    defs.extend(extra.iter().map(|s| s.to_string()));
    if !extra.iter().any(|e| e.starts_with("-DRETURN_VALUE")) {
        defs.push("-DRETURN_VALUE=1".into());
    }
    let refs: Vec<&str> = defs.iter().map(|s| s.as_str()).collect();
    compile_shared(dir, &format!("tool_{name}"), TOOL_C, &refs)
}

/// Tools A–E (A in HSA_TOOLS_LIB and also preloaded with a priority, D in
/// HSA_TOOLS_LIB without OnLoad, B, C and E only preloaded with
/// priorities, E's OnLoad refusing), loaded by the runtime serving `abi`
/// (None: the default); what they logged.
fn load_tools_scenario(abi: Option<&str>) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let build = |name: &str, extra: &[&str]| build_tool(dir.path(), name, extra);
    let a = build("A", &["-DPRIORITY=0", "-DNESTED_INIT"]);
    let b = build("B", &["-DPRIORITY=5"]);
    let c = build("C", &["-DPRIORITY=1"]);
    let d = build("D", &["-DNO_ONLOAD"]);
    let e = build("E", &["-DPRIORITY=2", "-DRETURN_VALUE=0"]);
    let log = dir.path().join("tools.log");
    let path = |p: &std::path::Path| p.display().to_string();
    let mut env = vec![
        ("HSA_TOOLS_LIB", format!("{} {}", path(&a), path(&d))),
        (
            "DITTO_TEST_PRELOAD",
            [path(&b), path(&c), path(&e), path(&a)].join(":"),
        ),
        ("DITTO_TEST_TOOL_LOG", path(&log)),
    ];
    if let Some(abi) = abi {
        env.push(("DITTO_HSA_CPU_ABI", abi.to_string()));
    }
    run_child("tools::child_scenario_load_tools", &env);
    let text = std::fs::read_to_string(&log).unwrap();
    text.lines().map(str::to_string).collect()
}

#[test]
fn tools_load_in_rocr_order_once_each_and_unload_in_reverse() {
    // A is loaded once, at order 0; D (no OnLoad) and E (OnLoad false) fail
    // and are named to later tools; the runtime's major is ROCm 7.2's (3).
    assert_eq!(
        load_tools_scenario(None),
        [
            "A onload version=3 agents=2 failed=0",
            "A nested init=0 shut_down=0",
            "C onload version=3 agents=2 failed=1 libtool_D.so",
            "E onload version=3 agents=2 failed=1 libtool_D.so",
            "B onload version=3 agents=2 failed=2 libtool_D.so libtool_E.so",
            "B wrap",
            "C wrap",
            "A wrap",
            "B unload",
            "C unload",
            "A unload",
        ]
    );
}

#[test]
fn rocm_5_2_loads_only_hsa_tools_lib_and_keeps_a_library_without_on_load() {
    // ROCr 5.2.3 has no HSA_AMD_TOOL_PRIORITY discovery (B, C, E stay
    // unloaded although preloaded), keeps D loaded although it has no
    // OnLoad (it is not failed, and its OnUnload runs), and passes major 1.
    assert_eq!(
        load_tools_scenario(Some("5.2")),
        [
            "A onload version=1 agents=2 failed=0",
            "A nested init=0 shut_down=0",
            "A wrap",
            "D unload",
            "A unload",
        ]
    );
}

#[test]
#[ignore = "child process of tools_load_in_rocr_order_once_each_and_unload_in_reverse"]
fn child_scenario_load_tools() {
    for lib in std::env::var("DITTO_TEST_PRELOAD").unwrap().split(':') {
        let c = std::ffi::CString::new(lib).unwrap();
        // SAFETY: loading a test tool; it runs nothing until OnLoad.
        assert!(
            !unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) }.is_null(),
            "dlopen {lib}"
        );
    }
    // SAFETY: plain API calls.
    unsafe {
        assert_eq!(rt::hsa_init(), 0);
        assert_eq!(
            rt::runtime::reference_count(),
            1,
            "the nested init/shut_down of tool A balanced"
        );
        let mut s = hsa_signal_t::default();
        assert_eq!(rt::hsa_signal_create(1, 0, std::ptr::null(), &mut s), 0);
        assert_eq!(rt::hsa_shut_down(), 0);
    }
}

#[test]
fn tool_unloaded_first_stays_mapped_until_every_on_unload_ran() {
    let dir = tempfile::tempdir().unwrap();
    // Only the runtime holds these libraries: dlclose really unmaps them.
    let x = build_tool(dir.path(), "X", &["-DUNLOAD_CREATES_SIGNAL"]);
    let y = build_tool(dir.path(), "Y", &[]);
    let log = dir.path().join("tools.log");
    let path = |p: &std::path::Path| p.display().to_string();
    run_child(
        "tools::child_scenario_init_and_shut_down",
        &[
            ("HSA_TOOLS_LIB", format!("{} {}", path(&x), path(&y))),
            ("DITTO_TEST_TOOL_LOG", path(&log)),
        ],
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // X's OnUnload runs after Y's and calls through the table, where Y's
    // wrap is still the outermost: Y must not be closed yet.
    assert_eq!(
        lines,
        [
            "X onload version=3 agents=2 failed=0",
            "Y onload version=3 agents=2 failed=0",
            "Y unload",
            "X unload",
            "Y wrap",
            "X wrap",
            "X unload signal_create=0",
        ]
    );
}

#[test]
#[ignore = "child process of tool_unloaded_first_stays_mapped_until_every_on_unload_ran"]
fn child_scenario_init_and_shut_down() {
    // SAFETY: plain API calls.
    unsafe {
        assert_eq!(rt::hsa_init(), 0);
        assert_eq!(rt::hsa_shut_down(), 0);
        assert_eq!(rt::runtime::reference_count(), 0);
        assert!(
            rt::runtime::loaded_tool_names().is_empty(),
            "tools released at the last hsa_shut_down"
        );
    }
}

/// A tool written against ROCm's real hsa_api_trace.h (C++, as rocprofiler
/// and friends are): it checks each table's header before touching it, then
/// wraps hsa_signal_create and logs around the call it forwards.
const CHAIN_TOOL_CPP: &str = r#"
#include <hsa/hsa_api_trace.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
static void log_line(const char* fmt, ...) {
  char buf[512]; va_list ap; va_start(ap, fmt); vsnprintf(buf, sizeof buf, fmt, ap); va_end(ap);
  FILE* f = fopen(getenv("DITTO_TEST_TOOL_LOG"), "a"); fputs(buf, f); fclose(f);
}
static decltype(hsa_signal_create)* next_signal_create;
static decltype(hsa_signal_load_relaxed)* load_relaxed;
static hsa_status_t my_signal_create(hsa_signal_value_t v, uint32_t n, const hsa_agent_t* c, hsa_signal_t* s) {
  log_line("%s enter\n", TOOL_NAME);
  hsa_status_t status = next_signal_create(v, n, c, s);
  log_line("%s leave status=%u value=%ld\n", TOOL_NAME, status, status == HSA_STATUS_SUCCESS ? (long)load_relaxed(*s) : -1L);
  return status;
}
extern "C" bool OnLoad(HsaApiTable* table, uint64_t runtime_version, uint64_t failed_count, const char* const* failed) {
  (void)failed_count; (void)failed;
  log_line("%s onload runtime=%llu root=%u.%u.%u/%zu core=%u.%u.%u/%zu amd=%u.%u.%u/%zu\n", TOOL_NAME,
           (unsigned long long)runtime_version,
           table->version.major_id, table->version.minor_id, table->version.step_id, sizeof(HsaApiTable),
           table->core_->version.major_id, table->core_->version.minor_id, table->core_->version.step_id, sizeof(CoreApiTable),
           table->amd_ext_->version.major_id, table->amd_ext_->version.minor_id, table->amd_ext_->version.step_id, sizeof(AmdExtTable));
  if (table->version.minor_id < offsetof(HsaApiTable, core_) + sizeof(void*)) return false;
  CoreApiTable* core = table->core_;
  if (core->version.major_id != HSA_CORE_API_TABLE_MAJOR_VERSION ||
      core->version.minor_id < offsetof(CoreApiTable, hsa_signal_create_fn) + sizeof(void*)) return false;
  load_relaxed = core->hsa_signal_load_relaxed_fn;
  next_signal_create = core->hsa_signal_create_fn;
  core->hsa_signal_create_fn = my_signal_create;
  return true;
}
"#;

fn build_chain_tool(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let src = dir.join(format!("chain_{name}.cpp"));
    let out = dir.join(format!("libchain_{name}.so"));
    std::fs::write(&src, CHAIN_TOOL_CPP).unwrap();
    let o = std::process::Command::new("g++")
        .args(["-shared", "-fPIC", "-O1", "-DAMD_INTERNAL_BUILD"])
        .arg(format!("-DTOOL_NAME=\"{name}\""))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .expect("run g++ (run scripts/install-deps)");
    assert!(
        o.status.success(),
        "g++ failed for chain tool {name} (ROCm headers missing? run scripts/install-deps):\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Two chain tools built against Debian 12's ROCm 5.2 headers, both in
/// HSA_TOOLS_LIB, on the runtime serving `abi`; what they and the
/// application logged.
fn chain_scenario(abi: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let first = build_chain_tool(dir.path(), "first");
    let second = build_chain_tool(dir.path(), "second");
    let log = dir.path().join("chain.log");
    let path = |p: &std::path::Path| p.display().to_string();
    run_child(
        "tools::child_scenario_chain",
        &[
            (
                "HSA_TOOLS_LIB",
                format!("{} {}", path(&first), path(&second)),
            ),
            ("DITTO_TEST_TOOL_LOG", path(&log)),
            ("DITTO_HSA_CPU_ABI", abi.to_string()),
        ],
    );
    let text = std::fs::read_to_string(&log).unwrap();
    text.lines().map(str::to_string).collect()
}

#[test]
fn two_tools_chain_later_wraps_earlier_and_see_rocm_table_headers() {
    // Headers {major, minor = sizeof as ROCm's header declares it, step};
    // the app's call enters the later tool first, then the earlier, then the
    // runtime (whose signal holds the initial value 7), and unwinds in reverse.
    let headers = "runtime=1 root=1.48.0/48 core=1.1016.0/1016 amd=1.400.0/400";
    assert_eq!(
        chain_scenario("5.2"),
        [
            format!("first onload {headers}").as_str(),
            format!("second onload {headers}").as_str(),
            "second enter",
            "first enter",
            "first leave status=0 value=7",
            "second leave status=0 value=7",
            "app signal_create=0 value=7",
        ]
    );
}

#[test]
fn a_tool_built_for_rocm_5_2_declines_rocm_7_2s_tables_and_the_application_runs_on() {
    // The tool checks the core table's major (1 in its header, 2 served)
    // and returns false from OnLoad: nothing is wrapped.
    let headers = "runtime=3 root=3.64.1/48 core=2.1016.0/1016 amd=2.624.8/400";
    assert_eq!(
        chain_scenario("7.2"),
        [
            format!("first onload {headers}").as_str(),
            format!("second onload {headers}").as_str(),
            "app signal_create=0 value=7",
        ]
    );
}

#[test]
#[ignore = "child process of two_tools_chain_later_wraps_earlier_and_see_rocm_table_headers"]
fn child_scenario_chain() {
    use std::io::Write;
    // SAFETY: plain API calls.
    unsafe {
        assert_eq!(rt::hsa_init(), 0);
        let mut s = hsa_signal_t::default();
        let status = rt::hsa_signal_create(7, 0, std::ptr::null(), &mut s);
        let value = rt::hsa_signal_load_relaxed(s);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(std::env::var("DITTO_TEST_TOOL_LOG").unwrap())
            .unwrap();
        writeln!(f, "app signal_create={status} value={value}").unwrap();
        assert_eq!(rt::hsa_shut_down(), 0);
    }
}
