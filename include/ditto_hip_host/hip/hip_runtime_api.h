// include/ditto_hip_host/hip/hip_runtime_api.h — HIP's own host API header,
// with the platform macros of the device pass (ditto_hip_platform.h) set
// first: HIP's header serves g++ once the platform is named.
#ifndef DITTO_HIP_HOST_HIP_RUNTIME_API_H
#define DITTO_HIP_HOST_HIP_RUNTIME_API_H
#include "ditto_hip_platform.h"
#include_next <hip/hip_runtime_api.h>
#endif
