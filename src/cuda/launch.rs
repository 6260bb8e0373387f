//! What a CUPTI driver-API callback says about a kernel launch: the
//! callback ids of the launch entry points ditto subscribes to, the C
//! layouts of `CUpti_CallbackData` and of the launch calls' parameter
//! structs, and the packing of a launch's arguments (`kernelParams`, or the
//! `extra` buffer) into one argument block laid out as the kernel's
//! parameters are (offsets from `cuFuncGetParamInfo`), which the
//! backend-neutral describe step reads like HSA kernarg bytes.
//! Pure reading of memory the driver hands the callback; no driver calls.

use std::ffi::{c_char, c_void};

/// `CUPTI_CB_DOMAIN_DRIVER_API`.
pub const DOMAIN_DRIVER_API: u32 = 1;
/// `CUPTI_API_ENTER` / `CUPTI_API_EXIT`.
pub const API_ENTER: u32 = 0;
pub const API_EXIT: u32 = 1;
/// `CUPTI_DRIVER_TRACE_CBID_*` of the launch calls (cupti_driver_cbid.h).
pub const CBID_LAUNCH_KERNEL: u32 = 307;
pub const CBID_LAUNCH_KERNEL_PTSZ: u32 = 442;
pub const CBID_LAUNCH_KERNEL_EX: u32 = 652;
pub const CBID_LAUNCH_KERNEL_EX_PTSZ: u32 = 653;
/// Every launch callback ditto enables.
pub const LAUNCH_CBIDS: [u32; 4] = [
    CBID_LAUNCH_KERNEL,
    CBID_LAUNCH_KERNEL_PTSZ,
    CBID_LAUNCH_KERNEL_EX,
    CBID_LAUNCH_KERNEL_EX_PTSZ,
];

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`,
/// `CU_LAUNCH_PARAM_BUFFER_SIZE`: the keys of a launch's `extra` array.
const PARAM_END: usize = 0x00;
const PARAM_BUFFER_POINTER: usize = 0x01;
const PARAM_BUFFER_SIZE: usize = 0x02;

/// `CUpti_CallbackData` (cupti_callbacks.h).
#[repr(C)]
pub struct CallbackData {
    pub callback_site: u32,
    pub function_name: *const c_char,
    pub function_params: *const c_void,
    pub function_return_value: *mut c_void,
    pub symbol_name: *const c_char,
    pub context: *mut c_void,
    pub context_uid: u32,
    pub correlation_data: *mut u64,
    pub correlation_id: u32,
}

/// `cuLaunchKernel_params` (generated_cuda_meta.h).
#[repr(C)]
pub struct LaunchKernelParams {
    pub f: *mut c_void,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub stream: *mut c_void,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// `cuLaunchKernelEx_params`.
#[repr(C)]
pub struct LaunchKernelExParams {
    pub config: *const LaunchConfig,
    pub f: *mut c_void,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// One kernel launch as the callback sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// The `CUfunction` (or `CUkernel`) handle.
    pub function: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory, in bytes.
    pub shared_mem_bytes: u32,
    /// The stream the kernel went to; `_ptsz` launches on stream 0 go to the
    /// per-thread default stream, already substituted here.
    pub stream: usize,
    pub kernel_params: usize,
    pub extra: usize,
}

/// The launch described by `params` for callback `cbid`; `None` for another
/// callback or a null parameter block.
///
/// # Safety
/// `params` is the `functionParams` of a driver-API callback with id `cbid`.
pub unsafe fn launch_of(cbid: u32, params: *const c_void) -> Option<Launch> {
    if params.is_null() {
        return None;
    }
    let per_thread = matches!(cbid, CBID_LAUNCH_KERNEL_PTSZ | CBID_LAUNCH_KERNEL_EX_PTSZ);
    let mut launch = match cbid {
        CBID_LAUNCH_KERNEL | CBID_LAUNCH_KERNEL_PTSZ => {
            // SAFETY: for these ids the block is a cuLaunchKernel_params.
            let p = unsafe { &*(params as *const LaunchKernelParams) };
            Launch {
                function: p.f as usize,
                grid: p.grid,
                block: p.block,
                shared_mem_bytes: p.shared_mem_bytes,
                stream: p.stream as usize,
                kernel_params: p.kernel_params as usize,
                extra: p.extra as usize,
            }
        }
        CBID_LAUNCH_KERNEL_EX | CBID_LAUNCH_KERNEL_EX_PTSZ => {
            // SAFETY: for these ids the block is a cuLaunchKernelEx_params.
            let p = unsafe { &*(params as *const LaunchKernelExParams) };
            if p.config.is_null() {
                return None;
            }
            // SAFETY: the launch's own configuration, live during the call.
            let c = unsafe { &*p.config };
            Launch {
                function: p.f as usize,
                grid: c.grid,
                block: c.block,
                shared_mem_bytes: c.shared_mem_bytes,
                stream: c.stream as usize,
                kernel_params: p.kernel_params as usize,
                extra: p.extra as usize,
            }
        }
        _ => return None,
    };
    if per_thread && launch.stream == 0 {
        launch.stream = cuda_abi::CU_STREAM_PER_THREAD;
    }
    Some(launch)
}

/// Why a launch's arguments could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("the launch's kernelParams[{0}] is null")]
    NullParam(usize),
    #[error("the launch passes neither kernelParams nor extra")]
    NoArguments,
    #[error("the launch's extra array has no CU_LAUNCH_PARAM_BUFFER_POINTER")]
    NoBufferPointer,
    #[error("the launch's argument buffer has {size} bytes, its parameters need {needed}")]
    ShortBuffer { size: usize, needed: usize },
}

/// The launch's arguments packed into one block, each parameter at its
/// `(offset, size)` from `layout`: read from `kernelParams[i]`, or from the
/// `extra` array's argument buffer when the launch has no `kernelParams`.
///
/// # Safety
/// `launch` comes from [`launch_of`] during the callback: `kernelParams`
/// holds one valid pointer per parameter of the kernel, each to at least
/// its size in bytes; `extra` is a `CU_LAUNCH_PARAM_END`-terminated array.
pub unsafe fn pack_arguments(launch: &Launch, layout: &[(u64, u64)]) -> Result<Vec<u8>, PackError> {
    let total = layout.iter().map(|(o, s)| o + s).max().unwrap_or(0) as usize;
    if launch.kernel_params != 0 {
        let params = launch.kernel_params as *const *const u8;
        let mut block = vec![0u8; total];
        for (i, &(offset, size)) in layout.iter().enumerate() {
            // SAFETY: one pointer per parameter (caller's contract).
            let arg = unsafe { *params.add(i) };
            if arg.is_null() {
                return Err(PackError::NullParam(i));
            }
            let (offset, size) = (offset as usize, size as usize);
            // SAFETY: the argument value has `size` bytes (caller's contract).
            let value = unsafe { std::slice::from_raw_parts(arg, size) };
            block[offset..offset + size].copy_from_slice(value);
        }
        return Ok(block);
    }
    if launch.extra == 0 {
        return if layout.is_empty() {
            Ok(Vec::new())
        } else {
            Err(PackError::NoArguments)
        };
    }
    let extra = launch.extra as *const usize;
    let (mut buffer, mut size) = (0usize, None::<usize>);
    for i in (0..64).step_by(2) {
        // SAFETY: an END-terminated key/value array (caller's contract).
        let key = unsafe { *extra.add(i) };
        if key == PARAM_END {
            break;
        }
        // SAFETY: every key but END is followed by its value.
        let value = unsafe { *extra.add(i + 1) };
        match key {
            PARAM_BUFFER_POINTER => buffer = value,
            // SAFETY: the value of BUFFER_SIZE points to a size_t.
            PARAM_BUFFER_SIZE if value != 0 => size = Some(unsafe { *(value as *const usize) }),
            _ => {}
        }
    }
    match (buffer, size) {
        (0, _) => Err(PackError::NoBufferPointer),
        (_, Some(n)) if n < total => Err(PackError::ShortBuffer {
            size: n,
            needed: total,
        }),
        (p, _) => {
            // SAFETY: the argument buffer holds the parameters (checked size).
            Ok(unsafe { std::slice::from_raw_parts(p as *const u8, total) }.to_vec())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn c_layouts_match_the_cuda_headers_on_x86_64() {
        assert_eq!(offset_of!(CallbackData, function_params), 16);
        assert_eq!(offset_of!(CallbackData, symbol_name), 32);
        assert_eq!(offset_of!(CallbackData, correlation_data), 56);
        assert_eq!(size_of::<CallbackData>(), 72);
        assert_eq!(offset_of!(LaunchKernelParams, stream), 40);
        assert_eq!(offset_of!(LaunchKernelParams, extra), 56);
        assert_eq!(offset_of!(LaunchConfig, stream), 32);
        assert_eq!(offset_of!(LaunchConfig, num_attrs), 48);
        assert_eq!(offset_of!(LaunchKernelExParams, extra), 24);
    }

    #[test]
    fn a_cu_launch_kernel_block_is_read_with_its_stream_and_arguments() {
        let mut a = 5u64;
        let mut args = [&mut a as *mut u64 as *mut c_void];
        let p = LaunchKernelParams {
            f: 0x1000 as *mut c_void,
            grid: [4, 2, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
            stream: std::ptr::null_mut(),
            kernel_params: args.as_mut_ptr(),
            extra: std::ptr::null_mut(),
        };
        let params = &p as *const LaunchKernelParams as *const c_void;
        // SAFETY: a live parameter block of the matching type.
        let legacy = unsafe { launch_of(CBID_LAUNCH_KERNEL, params) }.unwrap();
        assert_eq!(
            (legacy.function, legacy.grid, legacy.stream),
            (0x1000, [4, 2, 1], 0)
        );
        // SAFETY: as above.
        let ptsz = unsafe { launch_of(CBID_LAUNCH_KERNEL_PTSZ, params) }.unwrap();
        assert_eq!(ptsz.stream, cuda_abi::CU_STREAM_PER_THREAD);
        // SAFETY: as above.
        assert!(unsafe { launch_of(999, params) }.is_none());
    }

    #[test]
    fn a_cu_launch_kernel_ex_block_is_read_through_its_config() {
        let config = LaunchConfig {
            grid: [7, 1, 1],
            block: [64, 2, 1],
            shared_mem_bytes: 0,
            stream: 0x77 as *mut c_void,
            attrs: std::ptr::null_mut(),
            num_attrs: 0,
        };
        let p = LaunchKernelExParams {
            config: &config,
            f: 0x2000 as *mut c_void,
            kernel_params: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
        };
        // SAFETY: a live parameter block of the matching type.
        let l = unsafe {
            launch_of(
                CBID_LAUNCH_KERNEL_EX_PTSZ,
                &p as *const LaunchKernelExParams as *const c_void,
            )
        }
        .unwrap();
        assert_eq!(
            (l.function, l.grid, l.block, l.stream),
            (0x2000, [7, 1, 1], [64, 2, 1], 0x77)
        );
    }

    #[test]
    fn kernel_params_are_packed_at_the_driver_offsets() {
        // reduce_sum(const float*, float*, int): 0+8, 8+8, 16+4.
        let (mut input, mut output, mut n) = (0x1111u64, 0x2222u64, 65536i32);
        let mut args = [
            &mut input as *mut u64 as *mut c_void,
            &mut output as *mut u64 as *mut c_void,
            &mut n as *mut i32 as *mut c_void,
        ];
        let launch = Launch {
            function: 1,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            stream: 0,
            kernel_params: args.as_mut_ptr() as usize,
            extra: 0,
        };
        // SAFETY: one live pointer per parameter, each of its size.
        let block = unsafe { pack_arguments(&launch, &[(0, 8), (8, 8), (16, 4)]) }.unwrap();
        assert_eq!(block.len(), 20);
        assert_eq!(u64::from_le_bytes(block[8..16].try_into().unwrap()), 0x2222);
        assert_eq!(i32::from_le_bytes(block[16..20].try_into().unwrap()), 65536);
    }

    #[test]
    fn an_extra_argument_buffer_is_read_and_a_short_one_refused() {
        let buffer: Vec<u8> = (0..24).collect();
        let mut size = 24usize;
        let extra = [
            PARAM_BUFFER_POINTER,
            buffer.as_ptr() as usize,
            PARAM_BUFFER_SIZE,
            &mut size as *mut usize as usize,
            PARAM_END,
        ];
        let launch = Launch {
            function: 1,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            stream: 0,
            kernel_params: 0,
            extra: extra.as_ptr() as usize,
        };
        // SAFETY: an END-terminated array naming a live 24-byte buffer.
        let block = unsafe { pack_arguments(&launch, &[(0, 8), (8, 8), (16, 8)]) }.unwrap();
        assert_eq!(block, buffer);
        // SAFETY: as above.
        let err = unsafe { pack_arguments(&launch, &[(0, 8), (24, 8)]) }
            .unwrap_err()
            .to_string();
        assert!(err.contains("24 bytes"), "{err}");
    }
}
