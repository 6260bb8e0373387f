// cupti_empty_callback: a CUDA injection library (CUDA_INJECTION64_PATH)
// that subscribes to the same CUPTI driver-API launch callbacks as ditto's
// tool (cuLaunchKernel, cuLaunchKernelEx and their _ptsz variants) with a
// callback that does nothing. scripts/gpu-test runs launch_storm under it
// to time what CUPTI's callbacks cost by themselves, next to the same
// program plainly and under ditto.
#include <cupti.h>
#include <stdio.h>

static void CUPTIAPI do_nothing(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                const void* data) {
  (void)userdata;
  (void)domain;
  (void)id;
  (void)data;
}

int InitializeInjection(void) {
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)do_nothing, NULL) != CUPTI_SUCCESS) {
    fprintf(stderr, "cupti_empty_callback: cuptiSubscribe failed\n");
    return 1;
  }
  const CUpti_CallbackId launches[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
  };
  for (unsigned i = 0; i < sizeof launches / sizeof launches[0]; ++i) {
    if (cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, launches[i]) != CUPTI_SUCCESS) {
      fprintf(stderr, "cupti_empty_callback: cuptiEnableCallback(%u) failed\n", (unsigned)launches[i]);
    }
  }
  return 1;
}
