//! The built libhsa-runtime64.so.1 under a C program compiled against ROCm's
//! real headers and linked like HIP (-lhsa-runtime64: DT_NEEDED on the SONAME).

use crate::common::*;
use std::process::Command;

const APP_C: &str = r#"
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <string.h>
static hsa_status_t find_gpu(hsa_agent_t a, void* d) {
  hsa_device_type_t t; hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t);
  if (t == HSA_DEVICE_TYPE_GPU) { *(hsa_agent_t*)d = a; return HSA_STATUS_INFO_BREAK; }
  return HSA_STATUS_SUCCESS;
}
int main(void) {
  if (hsa_init() != HSA_STATUS_SUCCESS) return 10;
  hsa_agent_t gpu = {0};
  if (hsa_iterate_agents(find_gpu, &gpu) != HSA_STATUS_INFO_BREAK) return 11;
  hsa_queue_t* q;
  if (hsa_queue_create(gpu, 128, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q)) return 12;
  hsa_signal_t done; hsa_signal_create(1, 0, NULL, &done);
  uint64_t index = hsa_queue_add_write_index_screlease(q, 1);
  hsa_barrier_and_packet_t* p = (hsa_barrier_and_packet_t*)q->base_address + (index % q->size);
  memset((char*)p + 2, 0, 62);
  p->completion_signal = done;
  __atomic_store_n(&p->header, (uint16_t)(HSA_PACKET_TYPE_BARRIER_AND | (1 << HSA_PACKET_HEADER_BARRIER)), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, index);
  hsa_signal_value_t v = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  const char* s; hsa_status_string(HSA_STATUS_ERROR_INVALID_QUEUE, &s);
  printf("signal=%ld queue_size=%u status=%.30s\n", (long)v, q->size, s);
  /* A deprecated HSA 1.0 name and a function the CPU runtime does not implement. */
  hsa_signal_store_release(done, 5);
  void* p2 = NULL; hsa_region_t region = {0};
  printf("alias=%ld unimplemented=0x%x\n", (long)hsa_signal_load_acquire(done), hsa_memory_allocate(region, 64, &p2));
  hsa_queue_destroy(q);
  return hsa_shut_down() == HSA_STATUS_SUCCESS ? 0 : 13;
}
"#;

/// `source` compiled into `<tmp>/NAME`, linked against the built library
/// by its SONAME, as hipcc-built programs are (a temporary directory
/// holding the library's links, for LD_LIBRARY_PATH, and the program).
fn build_against_the_built_library(
    name: &str,
    source: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(built_library(), dir.path().join("libhsa-runtime64.so.1")).unwrap();
    std::os::unix::fs::symlink(
        "libhsa-runtime64.so.1",
        dir.path().join("libhsa-runtime64.so"),
    )
    .unwrap();
    let src = dir.path().join(format!("{name}.c"));
    let exe = dir.path().join(name);
    std::fs::write(&src, source).unwrap();
    let status = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.path().display()))
        .arg("-lhsa-runtime64")
        .status()
        .unwrap();
    assert!(status.success(), "compile the C application {name}");
    (dir, exe)
}

#[test]
fn c_program_built_against_rocm_headers_runs_on_the_built_library() {
    assert!(
        std::path::Path::new("/usr/include/hsa/hsa.h").exists(),
        "ROCm headers missing: install libhsa-runtime-dev"
    );
    let (dir, exe) = build_against_the_built_library("app", APP_C);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "app failed ({:?}): {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "signal=0 queue_size=128 status=HSA_STATUS_ERROR_INVALID_QUEUE\nalias=5 unimplemented=0x1000"
    );
    let needed = Command::new("objdump")
        .arg("-T")
        .arg(&exe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&needed.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("ROCR_1") && l.contains("hsa_queue_create")),
        "the app imports ROCR_1 symbols"
    );
}

/// A C program that exercises the runtime end to end, written only against
/// ROCm's headers: it reports which runtime library is mapped into it.
const REAL_LINKED_APP_C: &str = r#"
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <string.h>
#define CHECK(x) do { hsa_status_t s_ = (x); if (s_ != HSA_STATUS_SUCCESS) { \
  fprintf(stderr, "%s failed: 0x%x\n", #x, s_); return 1; } } while (0)
static hsa_status_t count_agent(hsa_agent_t a, void* d) { (void)a; ++*(int*)d; return HSA_STATUS_SUCCESS; }
static hsa_status_t find_gpu(hsa_agent_t a, void* d) {
  hsa_device_type_t t; hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t);
  if (t == HSA_DEVICE_TYPE_GPU) { *(hsa_agent_t*)d = a; return HSA_STATUS_INFO_BREAK; }
  return HSA_STATUS_SUCCESS;
}
static hsa_status_t find_coarse_pool(hsa_amd_memory_pool_t p, void* d) {
  hsa_amd_segment_t seg; uint32_t flags; bool alloc;
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg);
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
  if (seg == HSA_AMD_SEGMENT_GLOBAL && alloc && (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)) {
    *(hsa_amd_memory_pool_t*)d = p; return HSA_STATUS_INFO_BREAK;
  }
  return HSA_STATUS_SUCCESS;
}
int main(void) {
  CHECK(hsa_init());
  int agents = 0;
  CHECK(hsa_iterate_agents(count_agent, &agents));
  hsa_agent_t gpu = {0};
  if (hsa_iterate_agents(find_gpu, &gpu) != HSA_STATUS_INFO_BREAK) return 2;
  hsa_amd_memory_pool_t pool = {0};
  if (hsa_amd_agent_iterate_memory_pools(gpu, find_coarse_pool, &pool) != HSA_STATUS_INFO_BREAK) return 3;
  uint32_t* buf = NULL;
  CHECK(hsa_amd_memory_pool_allocate(pool, 4096 * sizeof(uint32_t), 0, (void**)&buf));
  /* A discrete GPU's memory: the host reaches it through copies only. */
  static uint32_t host_in[4096], host_out[4096];
  uint64_t sum = 0;
  for (uint32_t i = 0; i < 4096; i++) host_in[i] = i;
  CHECK(hsa_memory_copy(buf, host_in, sizeof host_in));
  CHECK(hsa_memory_copy(host_out, buf, sizeof host_out));
  for (uint32_t i = 0; i < 4096; i++) sum += host_out[i];
  hsa_signal_t dep, done;
  CHECK(hsa_signal_create(1, 0, NULL, &dep));
  CHECK(hsa_signal_create(1, 0, NULL, &done));
  hsa_queue_t* q = NULL;
  CHECK(hsa_queue_create(gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q));
  uint64_t index = hsa_queue_add_write_index_scacq_screl(q, 1);
  hsa_barrier_and_packet_t* p = (hsa_barrier_and_packet_t*)q->base_address + (index % q->size);
  memset((char*)p + 2, 0, 62);
  p->dep_signal[0] = dep;
  p->completion_signal = done;
  __atomic_store_n(&p->header, (uint16_t)(HSA_PACKET_TYPE_BARRIER_AND | (1 << HSA_PACKET_HEADER_BARRIER) |
      (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
      (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE)), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, index);
  /* The barrier waits for its dependency: 1 ms later it has not completed. */
  hsa_signal_value_t early = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ, 0, 1000000, HSA_WAIT_STATE_BLOCKED);
  hsa_signal_store_screlease(dep, 0);
  hsa_signal_value_t late = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  uint64_t read_index = hsa_queue_load_read_index_scacquire(q);
  CHECK(hsa_queue_destroy(q));
  CHECK(hsa_signal_destroy(dep));
  CHECK(hsa_signal_destroy(done));
  CHECK(hsa_amd_memory_pool_free(buf));
  CHECK(hsa_shut_down());
  printf("agents=%d sum=%llu early=%ld late=%ld read_index=%llu\n", agents, (unsigned long long)sum,
         (long)early, (long)late, (unsigned long long)read_index);
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) {
    char* path = strchr(line, '/');
    if (path && (strstr(path, "hsa-runtime64") || strstr(path, "hsa_runtime64"))) {
      printf("mapped %s", path);
      break;
    }
  }
  return 0;
}
"#;

const DEBIAN_RUNTIME: &str = "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1";

#[test]
fn c_program_linked_against_debians_real_runtime_runs_unchanged_on_ours() {
    assert!(
        std::path::Path::new("/usr/include/hsa/hsa.h").exists()
            && std::path::Path::new(DEBIAN_RUNTIME).exists(),
        "ROCm's headers or Debian's libhsa-runtime64.so.1 missing: run scripts/install-deps"
    );
    let ours = std::fs::canonicalize(built_library()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("app.c");
    let exe = dir.path().join("app");
    std::fs::write(&src, REAL_LINKED_APP_C).unwrap();
    // Linked against Debian's real ROCr, from its own directory only.
    let out = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(["-L/usr/lib/x86_64-linux-gnu", "-lhsa-runtime64"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compile against the real runtime: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The file ldd resolves libhsa-runtime64.so.1 to, symlinks followed.
    let ldd = |lib_path: Option<&std::path::Path>| {
        let mut c = Command::new("ldd");
        c.arg(&exe);
        if let Some(p) = lib_path {
            c.env("LD_LIBRARY_PATH", p);
        }
        let o = c.output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let path = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("libhsa-runtime64.so.1 => "))
            .and_then(|rest| rest.split(" (").next())
            .unwrap_or_else(|| panic!("ldd lists no libhsa-runtime64.so.1:\n{text}"));
        std::fs::canonicalize(path).unwrap()
    };
    // Without LD_LIBRARY_PATH the program resolves to the real runtime ...
    assert_eq!(ldd(None), std::fs::canonicalize(DEBIAN_RUNTIME).unwrap());
    // ... and with it, to ours, under the same SONAME.
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir(&lib_dir).unwrap();
    std::os::unix::fs::symlink(&ours, lib_dir.join("libhsa-runtime64.so.1")).unwrap();
    assert_eq!(ldd(Some(&lib_dir)), ours);
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "app failed ({:?}): {stdout} {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            // 2 agents; 0+1+...+4095; the barrier held until its dependency was
            // satisfied; one packet consumed.
            "agents=2 sum=8386560 early=1 late=0 read_index=1".to_string(),
            format!("mapped {}", ours.display()),
        ]
    );
}

/// Async handlers and the last `hsa_shut_down`, as ROCr's `Runtime::Unload`
/// has them: a handler running when the runtime shuts down finishes before
/// `hsa_shut_down` returns, and a handler still registered is never called
/// afterwards (HIP's exit handler calls `hsa_shut_down` and then frees the
/// objects its handlers touch).
const SHUTDOWN_APP_C: &str = r#"
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <unistd.h>
static volatile int slow_started, slow_finished, late_calls;
static bool slow(hsa_signal_value_t v, void* arg) {
  slow_started = 1; usleep(300000); slow_finished = 1; return false;
}
static bool late(hsa_signal_value_t v, void* arg) { late_calls++; return false; }
int main(void) {
  if (hsa_init() != HSA_STATUS_SUCCESS) return 10;
  hsa_signal_t a, b;
  hsa_signal_create(0, 0, NULL, &a); hsa_signal_create(0, 0, NULL, &b);
  if (hsa_amd_signal_async_handler(a, HSA_SIGNAL_CONDITION_EQ, 1, slow, NULL)) return 11;
  if (hsa_amd_signal_async_handler(b, HSA_SIGNAL_CONDITION_EQ, 1, late, NULL)) return 12;
  hsa_signal_store_screlease(a, 1);
  while (!slow_started) usleep(1000);
  if (hsa_shut_down() != HSA_STATUS_SUCCESS) return 13;
  int finished_at_shutdown = slow_finished;
  hsa_signal_store_screlease(b, 1);
  usleep(600000); /* past the end of `slow`, had it kept running */
  printf("finished_at_shutdown=%d late_calls=%d\n", finished_at_shutdown, late_calls);
  return 0;
}
"#;

#[test]
fn the_last_shut_down_waits_for_a_running_async_handler_and_calls_no_more() {
    let (dir, exe) = build_against_the_built_library("shutdown", SHUTDOWN_APP_C);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "finished_at_shutdown=1 late_calls=0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// At process exit: the handler in flight finishes, one still pending is
/// never called (it would run into objects the exiting libraries free).
const EXIT_APP_C: &str = r#"
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static volatile int a_started;
static bool a(hsa_signal_value_t v, void* arg) {
  a_started = 1; usleep(200000); printf("a-done\n"); fflush(stdout); return false;
}
static bool b(hsa_signal_value_t v, void* arg) { printf("b-ran\n"); fflush(stdout); return false; }
int main(void) {
  if (hsa_init() != HSA_STATUS_SUCCESS) return 10;
  hsa_signal_t sa, sb;
  hsa_signal_create(0, 0, NULL, &sa); hsa_signal_create(0, 0, NULL, &sb);
  if (hsa_amd_signal_async_handler(sa, HSA_SIGNAL_CONDITION_EQ, 1, a, NULL)) return 11;
  if (hsa_amd_signal_async_handler(sb, HSA_SIGNAL_CONDITION_EQ, 1, b, NULL)) return 12;
  hsa_signal_store_screlease(sa, 1);
  while (!a_started) usleep(1000);
  hsa_signal_store_screlease(sb, 1);
  exit(0); /* no hsa_shut_down, as many applications */
}
"#;

#[test]
fn at_exit_the_handler_in_flight_finishes_and_a_pending_one_is_never_called() {
    let (dir, exe) = build_against_the_built_library("exit", EXIT_APP_C);
    for _ in 0..3 {
        let out = Command::new(&exe)
            .env("LD_LIBRARY_PATH", dir.path())
            .output()
            .unwrap();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).as_ref()
            ),
            (Some(0), "a-done\n"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
