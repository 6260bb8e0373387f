//! The replay process of a CUDA dispatch (a captured cubin): the driver
//! loaded at run time, each captured range reserved with
//! `cuMemAddressReserve` at its address as the hint (elsewhere when the
//! driver gives another address, or fails the hint: the range is then
//! relocated), backed by `cuMemCreate`, mapped and opened to the device;
//! the images copied in and into pristine copies; the cubin loaded with
//! `cuModuleLoadData`; the argument block given through
//! `CU_LAUNCH_PARAM_BUFFER_POINTER`, its 8-byte words pointing into a
//! relocated range rewritten; each launch timed with events and waited
//! for with a deadline. Writes what `child` writes for HSA.
//!
//! No placeholders hold the captured ranges before the driver starts: a
//! device's addresses lie in the range the driver reserves at `cuInit`,
//! which a placeholder would push elsewhere.

use super::outcome::{ChildArgs, Placed, relocate};
use super::plan::DispatchPlan;
use crate::store::Array;
use anyhow::{Context, Result, anyhow, bail};
use cuda_abi::{Library, as_fn};
use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::time::{Duration, Instant};

type CuResult = c_int;
type Ptr = u64;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// `CUmemAllocationProp` (cuda.h, CUDA 10.2 and later).
#[repr(C)]
struct AllocationProp {
    kind: c_int,
    requested_handle_types: c_int,
    location: MemLocation,
    win32_handle_meta_data: *mut c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `CUmemAccessDesc`.
#[repr(C)]
struct AccessDesc {
    location: MemLocation,
    flags: c_int,
}

const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;
const CUDA_ERROR_NOT_READY: CuResult = 600;
const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
const CU_LAUNCH_PARAM_END: usize = 0;

/// The driver entries a CUDA replay calls.
struct Driver {
    error_string: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    granularity: unsafe extern "C" fn(*mut usize, *const AllocationProp, c_int) -> CuResult,
    reserve: unsafe extern "C" fn(*mut Ptr, usize, usize, Ptr, u64) -> CuResult,
    create: unsafe extern "C" fn(*mut u64, usize, *const AllocationProp, u64) -> CuResult,
    map: unsafe extern "C" fn(Ptr, usize, usize, u64, u64) -> CuResult,
    set_access: unsafe extern "C" fn(Ptr, usize, *const AccessDesc, usize) -> CuResult,
    alloc: unsafe extern "C" fn(*mut Ptr, usize) -> CuResult,
    htod: unsafe extern "C" fn(Ptr, *const c_void, usize) -> CuResult,
    dtoh: unsafe extern "C" fn(*mut c_void, Ptr, usize) -> CuResult,
    dtod: unsafe extern "C" fn(Ptr, Ptr, usize) -> CuResult,
    module_load: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> CuResult,
    get_function: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    event_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(*mut c_void, *mut c_void) -> CuResult,
    event_query: unsafe extern "C" fn(*mut c_void) -> CuResult,
    elapsed: unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> CuResult,
}

impl Driver {
    fn load(library: &std::path::Path) -> Result<Driver> {
        let name = library.display().to_string();
        let lib =
            Library::open(&name).map_err(|e| anyhow!("cannot load the CUDA driver {name}: {e}"))?;
        let sym = |names: &[&str]| -> Result<*mut c_void> {
            names
                .iter()
                .find_map(|n| lib.symbol(n))
                .ok_or_else(|| anyhow!("the CUDA driver {name} lacks {}", names[0]))
        };
        macro_rules! entry {
            ($($n:literal),+) => {
                // SAFETY: the driver's function of that name, whose C
                // signature is the field's (cuda.h).
                unsafe { as_fn(sym(&[$($n),+])?) }
            };
        }
        Ok(Driver {
            // SAFETY: as in `entry!`.
            error_string: lib.symbol("cuGetErrorString").map(|p| unsafe { as_fn(p) }),
            init: entry!("cuInit"),
            device_get: entry!("cuDeviceGet"),
            primary_ctx_retain: entry!("cuDevicePrimaryCtxRetain"),
            ctx_set_current: entry!("cuCtxSetCurrent"),
            granularity: entry!("cuMemGetAllocationGranularity"),
            reserve: entry!("cuMemAddressReserve"),
            create: entry!("cuMemCreate"),
            map: entry!("cuMemMap"),
            set_access: entry!("cuMemSetAccess"),
            alloc: entry!("cuMemAlloc_v2"),
            htod: entry!("cuMemcpyHtoD_v2"),
            dtoh: entry!("cuMemcpyDtoH_v2"),
            dtod: entry!("cuMemcpyDtoD_v2"),
            module_load: entry!("cuModuleLoadData"),
            get_function: entry!("cuModuleGetFunction"),
            launch: entry!("cuLaunchKernel"),
            event_create: entry!("cuEventCreate"),
            event_record: entry!("cuEventRecord"),
            event_query: entry!("cuEventQuery"),
            elapsed: entry!("cuEventElapsedTime_v2", "cuEventElapsedTime"),
        })
    }

    fn check(&self, call: &str, r: CuResult) -> Result<()> {
        if r == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        let words = match self.error_string {
            // SAFETY: the driver's entry with a valid out-pointer; a static string.
            Some(f) if unsafe { f(r, &mut text) } == 0 && !text.is_null() => {
                unsafe { std::ffi::CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => "unknown error".into(),
        };
        bail!("{call} failed: CUDA error {r} ({words})")
    }
}

/// Replays dispatch `plan` of a CUDA capture.
pub fn replay(
    args: &ChildArgs,
    plan: &DispatchPlan,
    arrays: &[(u32, Array)],
    code: &[u8],
) -> Result<()> {
    let d = Driver::load(&args.runtime)?;
    // SAFETY (every call below): the driver's entries with valid arguments
    // and out-pointers; device pointers are those the driver gave.
    unsafe {
        d.check("cuInit", (d.init)(0))?;
        let mut device: c_int = 0;
        d.check("cuDeviceGet", (d.device_get)(&mut device, 0))?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        d.check(
            "cuDevicePrimaryCtxRetain",
            (d.primary_ctx_retain)(&mut ctx, device),
        )?;
        d.check("cuCtxSetCurrent", (d.ctx_set_current)(ctx))?;
        let prop = AllocationProp {
            kind: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: MemLocation {
                kind: CU_MEM_LOCATION_TYPE_DEVICE,
                id: device,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        };
        let mut granule: usize = 0;
        d.check(
            "cuMemGetAllocationGranularity",
            (d.granularity)(&mut granule, &prop, 0),
        )?;
        let granule = granule.max(1) as u64;
        let access = AccessDesc {
            location: prop.location,
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // The captured ranges, grown to the driver's granularity and merged.
        let ranges = super::plan::merged_ranges_aligned(plan.ranges.iter().copied(), granule);
        let mut placed = Vec::new();
        for (base, size) in ranges {
            let hint = if args.relocate { 0 } else { base };
            let mut at: Ptr = 0;
            if (d.reserve)(&mut at, size as usize, 0, hint, 0) != 0 {
                // A driver may refuse the hint rather than place it elsewhere.
                d.check(
                    "cuMemAddressReserve",
                    (d.reserve)(&mut at, size as usize, 0, 0, 0),
                )?;
            }
            let mut handle: u64 = 0;
            d.check(
                "cuMemCreate",
                (d.create)(&mut handle, size as usize, &prop, 0),
            )?;
            d.check("cuMemMap", (d.map)(at, size as usize, 0, handle, 0))?;
            d.check(
                "cuMemSetAccess",
                (d.set_access)(at, size as usize, &access, 1),
            )?;
            placed.push(Placed {
                original: base,
                at,
                size,
            });
        }
        for image in plan.images.iter().filter(|i| i.variable.is_none()) {
            let bytes = &arrays[image.position].1.bytes;
            d.check(
                "cuMemcpyHtoD",
                (d.htod)(
                    relocate(&placed, image.base),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                ),
            )?;
        }
        let mut pristine = Vec::new();
        for p in &placed {
            let mut copy: Ptr = 0;
            d.check("cuMemAlloc", (d.alloc)(&mut copy, p.size as usize))?;
            d.check("cuMemcpyDtoD", (d.dtod)(copy, p.at, p.size as usize))?;
            pristine.push(copy);
        }
        let mut module: *mut c_void = std::ptr::null_mut();
        d.check(
            "cuModuleLoadData",
            (d.module_load)(&mut module, code.as_ptr().cast()),
        )
        .context("loading the cubin (is it built for this GPU?)")?;
        let name = CString::new(plan.launch.symbol.as_str())?;
        let mut function: *mut c_void = std::ptr::null_mut();
        d.check(
            "cuModuleGetFunction",
            (d.get_function)(&mut function, module, name.as_ptr()),
        )
        .with_context(|| format!("the cubin has no kernel `{}`", plan.launch.symbol))?;
        // The argument block; an 8-byte word pointing into a relocated
        // range is rewritten (the block holds no layout of its own here).
        let mut block = plan.kernarg.clone();
        if placed.iter().any(|p| p.at != p.original) {
            for word in block.chunks_exact_mut(8) {
                let old = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                word.copy_from_slice(&relocate(&placed, old).to_le_bytes());
            }
        }
        let mut size = block.len();
        let mut extra: [*mut c_void; 5] = [
            CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            block.as_mut_ptr().cast(),
            CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            (&mut size as *mut usize).cast(),
            CU_LAUNCH_PARAM_END as *mut c_void,
        ];
        let (mut start, mut stop): (*mut c_void, *mut c_void) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        d.check("cuEventCreate", (d.event_create)(&mut start, 0))?;
        d.check("cuEventCreate", (d.event_create)(&mut stop, 0))?;
        // A CUDA launch's grid counts blocks (HSA's counts work-items).
        let r = &plan.record;
        let blocks = |i: usize| r.grid[i].max(1);
        let mut times_ns = Vec::new();
        let mut outputs = Vec::new();
        for iteration in 0..args.iterations.max(1) {
            if iteration > 0 {
                for (p, &copy) in placed.iter().zip(&pristine) {
                    d.check("cuMemcpyDtoD", (d.dtod)(p.at, copy, p.size as usize))?;
                }
            }
            d.check(
                "cuEventRecord",
                (d.event_record)(start, std::ptr::null_mut()),
            )?;
            d.check(
                "cuLaunchKernel",
                (d.launch)(
                    function,
                    blocks(0),
                    blocks(1),
                    blocks(2),
                    r.block[0],
                    r.block[1],
                    r.block[2],
                    plan.launch.group_segment_size,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    extra.as_mut_ptr(),
                ),
            )?;
            d.check(
                "cuEventRecord",
                (d.event_record)(stop, std::ptr::null_mut()),
            )?;
            wait(&d, stop, args.timeout)?;
            let mut ms: f32 = 0.0;
            let timed = (d.elapsed)(&mut ms, start, stop) == 0;
            times_ns.push(timed.then(|| (f64::from(ms) * 1e6) as u64));
            if iteration == 0 {
                for out in &plan.outputs {
                    let mut bytes = vec![0u8; out.extent as usize];
                    d.check(
                        "cuMemcpyDtoH",
                        (d.dtoh)(
                            bytes.as_mut_ptr().cast(),
                            relocate(&placed, out.address),
                            bytes.len(),
                        ),
                    )
                    .with_context(|| format!("reading argument {}", out.arg))?;
                    outputs.push(args.write_output(out.arg, &bytes)?);
                }
            }
        }
        args.write_result(times_ns, &placed, Vec::new(), outputs)?;
    }
    Ok(())
}

/// Waits for `event` at most `timeout`: a kernel that faults is the
/// driver's error here; one that hangs, ours.
fn wait(d: &Driver, event: *mut c_void, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: an event of ours.
        let r = unsafe { (d.event_query)(event) };
        if r != CUDA_ERROR_NOT_READY {
            return d.check("the kernel (cuEventQuery)", r);
        }
        if Instant::now() >= deadline {
            bail!(
                "the kernel did not complete within {} s; raise --timeout if it is only slow",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Whether `code` is a CUDA cubin (an ELF of machine EM_CUDA).
pub fn is_cubin(code: &[u8]) -> bool {
    const EM_CUDA: u16 = 190;
    code.len() >= 20
        && code[..4] == *b"\x7fELF"
        && u16::from_le_bytes([code[18], code[19]]) == EM_CUDA
}
