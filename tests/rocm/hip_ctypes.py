"""A Python driver of the real HIP runtime through ctypes, binding every
symbol at load (RTLD_NOW, as Python extension loaders and LD_BIND_NOW=1 do):
so each HSA function libamdhip64 imports must exist in the runtime under
it. Copies 256 floats to the device and back through hipMemcpy and prints
what came back. Usage: hip_ctypes.py LIBAMDHIP64 (a file name or path)."""
import ctypes
import os
import sys

HIP_MEMCPY_HOST_TO_DEVICE = 1
HIP_MEMCPY_DEVICE_TO_HOST = 2


def check(what, status):
    if status != 0:
        sys.exit(f"hip_ctypes: {what} failed with hipError {status}")


def main():
    hip = ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    count = ctypes.c_int(0)
    check("hipGetDeviceCount", hip.hipGetDeviceCount(ctypes.byref(count)))
    n = 256
    host = (ctypes.c_float * n)(*[i * 0.5 for i in range(n)])
    back = (ctypes.c_float * n)()
    device = ctypes.c_void_p()
    size = ctypes.c_size_t(n * 4)
    check("hipMalloc", hip.hipMalloc(ctypes.byref(device), size))
    check("hipMemcpy to device",
          hip.hipMemcpy(device, host, size, HIP_MEMCPY_HOST_TO_DEVICE))
    check("hipMemcpy to host",
          hip.hipMemcpy(back, device, size, HIP_MEMCPY_DEVICE_TO_HOST))
    check("hipFree", hip.hipFree(device))
    wrong = sum(1 for i in range(n) if back[i] != host[i])
    print(f"hip_ctypes: devices = {count.value}, back[255] = {back[255]}, wrong = {wrong}")


main()
