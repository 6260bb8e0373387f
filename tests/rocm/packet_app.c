/* An HSA application in plain C, built against one ROCm release's headers
 * (tests/rocm_releases.rs, tests/tool_loading.rs): creates a queue on the
 * GPU agent, submits three barrier-AND packets, each with its own
 * completion signal, and waits for them. What it prints does not depend on
 * any tool loaded into it.
 *
 * `packet_app leave-queues` (tests/model_gpu_faults.rs) then submits a
 * fourth barrier-AND that waits on a signal nobody sets, and returns 3 from
 * main with that packet pending, its queue and signals alive and no
 * hsa_shut_down: an application that never cleans up. */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <string.h>

enum { PACKETS = 3 };

static hsa_status_t find_gpu(hsa_agent_t agent, void* data) {
  hsa_device_type_t type;
  if (hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) {
    return HSA_STATUS_ERROR;
  }
  if (type == HSA_DEVICE_TYPE_GPU) {
    *(hsa_agent_t*)data = agent;
    return HSA_STATUS_INFO_BREAK;
  }
  return HSA_STATUS_SUCCESS;
}

int main(int argc, char** argv) {
  const int leave_queues = argc > 1 && strcmp(argv[1], "leave-queues") == 0;
  if (hsa_init() != HSA_STATUS_SUCCESS) return 10;
  hsa_agent_t gpu = {0};
  if (hsa_iterate_agents(find_gpu, &gpu) != HSA_STATUS_INFO_BREAK) return 11;
  hsa_queue_t* queue = NULL;
  if (hsa_queue_create(gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX,
                       &queue) != HSA_STATUS_SUCCESS) {
    return 12;
  }
  hsa_signal_t done[PACKETS];
  for (int i = 0; i < PACKETS; ++i) {
    if (hsa_signal_create(1, 0, NULL, &done[i]) != HSA_STATUS_SUCCESS) return 13;
    uint64_t index = hsa_queue_add_write_index_screlease(queue, 1);
    hsa_barrier_and_packet_t* p =
        (hsa_barrier_and_packet_t*)queue->base_address + (index % queue->size);
    memset((char*)p + 2, 0, sizeof *p - 2);
    p->completion_signal = done[i];
    __atomic_store_n(&p->header,
                     (uint16_t)(HSA_PACKET_TYPE_BARRIER_AND | (1 << HSA_PACKET_HEADER_BARRIER)),
                     __ATOMIC_RELEASE);
    hsa_signal_store_screlease(queue->doorbell_signal, (hsa_signal_value_t)index);
  }
  int completed = 0;
  for (int i = 0; i < PACKETS; ++i) {
    hsa_signal_value_t v = hsa_signal_wait_scacquire(done[i], HSA_SIGNAL_CONDITION_EQ, 0,
                                                     UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    completed += v == 0;
    hsa_signal_destroy(done[i]);
  }
  printf("packet_app: %d of %d packets completed\n", completed, PACKETS);
  fflush(stdout);
  if (leave_queues) {
    hsa_signal_t never;
    if (hsa_signal_create(1, 0, NULL, &never) != HSA_STATUS_SUCCESS) return 13;
    uint64_t index = hsa_queue_add_write_index_screlease(queue, 1);
    hsa_barrier_and_packet_t* p =
        (hsa_barrier_and_packet_t*)queue->base_address + (index % queue->size);
    memset((char*)p + 2, 0, sizeof *p - 2);
    p->dep_signal[0] = never;
    __atomic_store_n(&p->header,
                     (uint16_t)(HSA_PACKET_TYPE_BARRIER_AND | (1 << HSA_PACKET_HEADER_BARRIER)),
                     __ATOMIC_RELEASE);
    hsa_signal_store_screlease(queue->doorbell_signal, (hsa_signal_value_t)index);
    printf("packet_app: leaving with a packet pending\n");
    fflush(stdout);
    return 3;
  }
  hsa_queue_destroy(queue);
  return hsa_shut_down() == HSA_STATUS_SUCCESS ? 0 : 14;
}
