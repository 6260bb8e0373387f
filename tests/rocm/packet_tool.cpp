// An HSA tool as other tools are written: built against one ROCm release's
// hsa_api_trace.h and using its structs as they are declared there
// (tests/rocm_releases.rs, tests/tool_loading.rs). OnLoad checks that the
// tables are of its header's major version and large enough, then wraps
// hsa_queue_create: every queue the application creates becomes an
// intercept queue whose handler counts the packets and writes them on
// unchanged. OnUnload prints what it saw. Exports HSA_AMD_TOOL_PRIORITY
// so a runtime that discovers preloaded tools finds it.
#include <hsa/hsa_api_trace.h>
#include <atomic>
#include <cstdio>

extern "C" {
extern const uint32_t HSA_AMD_TOOL_PRIORITY;
const uint32_t HSA_AMD_TOOL_PRIORITY = 50;
}

static CoreApiTable* core;
static AmdExtTable* amd;
static std::atomic<unsigned> queues{0};
static std::atomic<unsigned long> packets{0};

static void count_and_write(const void* pkts, uint64_t count, uint64_t, void*,
                            hsa_amd_queue_intercept_packet_writer writer) {
  packets += count;
  writer(pkts, count);
}

static hsa_status_t intercepting_queue_create(hsa_agent_t agent, uint32_t size,
                                              hsa_queue_type32_t type,
                                              void (*callback)(hsa_status_t, hsa_queue_t*, void*),
                                              void* data, uint32_t private_size,
                                              uint32_t group_size, hsa_queue_t** queue) {
  hsa_status_t s = amd->hsa_amd_queue_intercept_create_fn(agent, size, type, callback, data,
                                                           private_size, group_size, queue);
  if (s != HSA_STATUS_SUCCESS) return s;
  s = amd->hsa_amd_queue_intercept_register_fn(*queue, count_and_write, nullptr);
  if (s == HSA_STATUS_SUCCESS) ++queues;
  return s;
}

extern "C" bool OnLoad(HsaApiTable* table, uint64_t runtime_version, uint64_t, const char* const*) {
  std::printf("packet_tool: OnLoad runtime=%llu core=%u/%u amd=%u/%u\n",
              (unsigned long long)runtime_version, table->core_->version.major_id,
              table->core_->version.minor_id, table->amd_ext_->version.major_id,
              table->amd_ext_->version.minor_id);
  std::fflush(stdout);
  if (table->core_->version.major_id != HSA_CORE_API_TABLE_MAJOR_VERSION ||
      table->amd_ext_->version.major_id != HSA_AMD_EXT_API_TABLE_MAJOR_VERSION ||
      table->amd_ext_->version.minor_id <
          offsetof(AmdExtTable, hsa_amd_queue_intercept_register_fn) + sizeof(void*)) {
    std::printf("packet_tool: tables of another ROCm; not loading\n");
    return false;
  }
  core = table->core_;
  amd = table->amd_ext_;
  core->hsa_queue_create_fn = intercepting_queue_create;
  return true;
}

extern "C" void OnUnload() {
  std::printf("packet_tool: %u intercept queue(s), %lu packet(s) seen\n", queues.load(),
              packets.load());
  std::fflush(stdout);
}
