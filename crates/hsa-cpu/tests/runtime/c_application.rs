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

#[test]
fn c_program_built_against_rocm_headers_runs_on_the_built_library() {
    assert!(
        std::path::Path::new("/usr/include/hsa/hsa.h").exists(),
        "ROCm headers missing: install libhsa-runtime-dev"
    );
    let lib = built_library();
    let dir = tempfile::tempdir().unwrap();
    // Link against the SONAME, as hipcc-built programs do.
    std::os::unix::fs::symlink(&lib, dir.path().join("libhsa-runtime64.so.1")).unwrap();
    std::os::unix::fs::symlink(
        "libhsa-runtime64.so.1",
        dir.path().join("libhsa-runtime64.so"),
    )
    .unwrap();
    let src = dir.path().join("app.c");
    let exe = dir.path().join("app");
    std::fs::write(&src, APP_C).unwrap();
    let status = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.path().display()))
        .arg("-lhsa-runtime64")
        .status()
        .unwrap();
    assert!(status.success(), "compile the C application");
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
