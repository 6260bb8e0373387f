// include/ditto_hip_host/hip/ditto_hip_platform.h — the macros of hipcc's
// device pass, for the host build.
//
// A host build compiles a HIP source the way hipcc's DEVICE pass sees it, so
// that every `#if` picks the code the GPU would run: the AMD platform, the
// device-compilation flag, the target's architecture and its wavefront size.
// Code that only the GPU can run (GCN inline assembly, __builtin_amdgcn_*)
// then reaches g++ and fails the build (`ditto hipcc` names the kernel and
// line) instead of compiling to a different path that computes something
// else. The target is gfx90a unless DITTO_HIP_HOST_ARCH_GFX942 is defined
// (`ditto hipcc` defines it for --offload-arch=gfx942): the GPU agents of
// ditto's CPU runtime report gfx90a.
#ifndef DITTO_HIP_HOST_PLATFORM_H
#define DITTO_HIP_HOST_PLATFORM_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#ifndef __HIP_PLATFORM_HCC__
#define __HIP_PLATFORM_HCC__ 1
#endif
#ifndef __HIPCC__
#define __HIPCC__ 1
#endif
#ifndef __HIP__
#define __HIP__ 1
#endif
#ifndef __HIP_DEVICE_COMPILE__
#define __HIP_DEVICE_COMPILE__ 1
#endif
#ifndef __AMDGCN__
#define __AMDGCN__ 1
#endif
#ifndef __AMDGPU__
#define __AMDGPU__ 1
#endif
#ifndef __AMDGCN_WAVEFRONT_SIZE
#define __AMDGCN_WAVEFRONT_SIZE 64
#endif
#ifndef __AMDGCN_WAVEFRONT_SIZE__
#define __AMDGCN_WAVEFRONT_SIZE__ 64
#endif
#ifndef __GFX9__
#define __GFX9__ 1
#endif
#if defined(DITTO_HIP_HOST_ARCH_GFX942)
#define __gfx942__ 1
#else
#define __gfx90a__ 1
#endif

// What the device pass of HIP's own headers advertises for gfx90a.
#define __HIP_ARCH_HAS_GLOBAL_INT32_ATOMICS__ (1)
#define __HIP_ARCH_HAS_GLOBAL_FLOAT_ATOMIC_EXCH__ (1)
#define __HIP_ARCH_HAS_SHARED_INT32_ATOMICS__ (1)
#define __HIP_ARCH_HAS_SHARED_FLOAT_ATOMIC_EXCH__ (1)
#define __HIP_ARCH_HAS_FLOAT_ATOMIC_ADD__ (1)
#define __HIP_ARCH_HAS_GLOBAL_INT64_ATOMICS__ (1)
#define __HIP_ARCH_HAS_SHARED_INT64_ATOMICS__ (1)
#define __HIP_ARCH_HAS_DOUBLES__ (1)
#define __HIP_ARCH_HAS_WARP_VOTE__ (1)
#define __HIP_ARCH_HAS_WARP_BALLOT__ (1)
#define __HIP_ARCH_HAS_WARP_SHUFFLE__ (1)
#define __HIP_ARCH_HAS_WARP_FUNNEL_SHIFT__ (0)
#define __HIP_ARCH_HAS_THREAD_FENCE_SYSTEM__ (1)
#define __HIP_ARCH_HAS_SYNC_THREAD_EXT__ (0)
#define __HIP_ARCH_HAS_SURFACE_FUNCS__ (0)
#define __HIP_ARCH_HAS_3DGRID__ (1)
#define __HIP_ARCH_HAS_DYNAMIC_PARALLEL__ (0)

#endif  // DITTO_HIP_HOST_PLATFORM_H
