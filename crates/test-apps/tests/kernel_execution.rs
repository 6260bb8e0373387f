//! Runs the kernels of the built CPU code objects directly — dlopen, then
//! `ditto_cpu_code_object_kernels()` and each kernel's entry on host memory —
//! without any HSA runtime. Pins the execution model that
//! include/ditto_hip_cpu.hpp documents: names, kernarg layout, groups and
//! partial groups, ranges of groups (code-object ABI 2) and concurrent entry
//! calls, barriers, atomics, dynamic shared memory and per-work-item
//! floating-point state.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;

/// Mirror of `ditto_cpu_dispatch_t` (include/ditto_hsa_cpu.h), for this test only.
#[repr(C)]
struct Dispatch {
    grid_size: [u32; 3],
    workgroup_size: [u16; 3],
    dimensions: u16,
    group_segment_size: u32,
    private_segment_size: u32,
    kernarg: *const c_void,
    first_group: u64,
    group_count: u64,
}

/// Mirror of `ditto_cpu_kernel_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelDescriptor {
    name: *const c_char,
    kernarg_segment_size: u32,
    kernarg_segment_alignment: u32,
    group_segment_size: u32,
    reserved: u32,
    entry: Option<unsafe extern "C" fn(*const Dispatch) -> i32>,
}

/// A dlopen'ed code object; closed on drop.
struct CodeObject {
    handle: *mut c_void,
    kernels: Vec<(String, KernelDescriptor)>,
}

impl CodeObject {
    fn open(name: &str) -> CodeObject {
        let path = test_apps::code_object_path(name);
        Self::open_path(&path)
    }

    fn open_path(path: &Path) -> CodeObject {
        let c_path = CString::new(path.to_str().expect("UTF-8 path")).expect("no NUL in path");
        // SAFETY: dlopen of a code object we built; its only initialisers are the C++ runtime's.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns a thread-local message after a failed dlopen.
            let message = unsafe { CStr::from_ptr(libc::dlerror()) }
                .to_string_lossy()
                .into_owned();
            panic!("dlopen({}) failed: {message}", path.display());
        }
        let abi = symbol(handle, "ditto_cpu_code_object_abi") as *const u32;
        // SAFETY: the symbol is a uint32_t per ditto_hsa_cpu.h.
        assert_eq!(
            unsafe { *abi },
            2,
            "{}: DITTO_CPU_CODE_OBJECT_ABI",
            path.display()
        );
        let list = symbol(handle, "ditto_cpu_code_object_kernels");
        // SAFETY: the symbol has the signature declared in ditto_hsa_cpu.h.
        let list: unsafe extern "C" fn(*mut u32) -> *const KernelDescriptor =
            unsafe { std::mem::transmute(list) };
        let mut count = 0u32;
        // SAFETY: fills `count` and returns an array of `count` descriptors valid while loaded.
        let table = unsafe { list(&mut count) };
        let kernels = (0..count as usize)
            .map(|i| {
                // SAFETY: i < count; names are NUL-terminated dynamic symbol names.
                let descriptor = unsafe { *table.add(i) };
                let name = unsafe { CStr::from_ptr(descriptor.name) }
                    .to_string_lossy()
                    .into_owned();
                (name, descriptor)
            })
            .collect();
        CodeObject { handle, kernels }
    }

    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.kernels.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        names
    }

    fn kernel(&self, mangled: &str) -> KernelDescriptor {
        self.kernels
            .iter()
            .find(|(n, _)| n == mangled)
            .map(|(_, d)| *d)
            .unwrap_or_else(|| {
                panic!(
                    "kernel {mangled} not in the code object; it has {:?}",
                    self.names()
                )
            })
    }
}

impl Drop for CodeObject {
    fn drop(&mut self) {
        // SAFETY: handle came from dlopen and no descriptor outlives self.
        unsafe { libc::dlclose(self.handle) };
    }
}

fn symbol(handle: *mut c_void, name: &str) -> *mut c_void {
    let c_name = CString::new(name).unwrap();
    // SAFETY: handle is a live dlopen handle.
    let address = unsafe { libc::dlsym(handle, c_name.as_ptr()) };
    assert!(!address.is_null(), "code object does not export {name}");
    address
}

/// Kernarg bytes laid out as the C++ side does: declaration order, natural alignment.
#[derive(Default)]
struct Kernarg {
    bytes: Vec<u8>,
}

impl Kernarg {
    fn push<T: Copy>(mut self, value: T) -> Self {
        let align = std::mem::align_of::<T>();
        let start = self.bytes.len().div_ceil(align) * align;
        self.bytes.resize(start, 0);
        // SAFETY: T is Copy (plain data); we copy its bytes.
        let raw = unsafe {
            std::slice::from_raw_parts(&value as *const T as *const u8, std::mem::size_of::<T>())
        };
        self.bytes.extend_from_slice(raw);
        self
    }
    fn ptr<T>(self, p: *mut T) -> Self {
        self.push(p as usize as u64)
    }
}

/// Work-groups of a grid (a zero group size gives 0: the entry refuses it).
fn group_total(grid: [u32; 3], group: [u16; 3]) -> u64 {
    (0..3)
        .map(|d| match group[d] {
            0 => 0,
            g => (grid[d] as u64).div_ceil(g as u64),
        })
        .product()
}

/// Runs every group of one dispatch in one entry call; returns the entry's result.
fn run(
    kernel: KernelDescriptor,
    grid: [u32; 3],
    group: [u16; 3],
    group_segment: u32,
    kernarg: &Kernarg,
) -> i32 {
    run_range(
        kernel,
        grid,
        group,
        group_segment,
        kernarg,
        0,
        group_total(grid, group),
    )
}

/// Runs the groups [first, first + count) of one dispatch; returns the entry's result.
fn run_range(
    kernel: KernelDescriptor,
    grid: [u32; 3],
    group: [u16; 3],
    group_segment: u32,
    kernarg: &Kernarg,
    first: u64,
    count: u64,
) -> i32 {
    let dimensions = if grid[2] > 1 || group[2] > 1 {
        3
    } else if grid[1] > 1 || group[1] > 1 {
        2
    } else {
        1
    };
    let dispatch = Dispatch {
        grid_size: grid,
        workgroup_size: group,
        dimensions,
        group_segment_size: group_segment,
        private_segment_size: 0,
        kernarg: kernarg.bytes.as_ptr().cast(),
        first_group: first,
        group_count: count,
    };
    let entry = kernel.entry.expect("kernel has an entry");
    // SAFETY: the kernarg bytes hold the pointers/values the kernel expects,
    // and every buffer they point to outlives this call.
    unsafe { entry(&dispatch) }
}

fn run_1d(kernel: KernelDescriptor, items: u32, group: u16, kernarg: &Kernarg) -> i32 {
    run(kernel, [items, 1, 1], [group, 1, 1], 0, kernarg)
}

const REDUCE_SUM: &str = "_Z10reduce_sumPKfPfi";
const SCALE_FLOAT: &str = "_Z12scale_valuesIfEvPT_S1_S0_i";
const SCALE_DOUBLE: &str = "_Z12scale_valuesIdEvPT_S1_S0_i";

#[test]
fn kernels_are_named_with_hipccs_mangled_names() {
    assert_eq!(
        CodeObject::open("scale_values").names(),
        vec![
            "_Z12scale_valuesI14__hip_bfloat16EvPT_S2_S1_i",
            "_Z12scale_valuesIDF16_EvPT_S1_S0_i",
            SCALE_DOUBLE,
            SCALE_FLOAT
        ]
    );
    assert_eq!(
        CodeObject::open("reduce_sum_optimized").names(),
        vec![REDUCE_SUM]
    );
    assert_eq!(
        CodeObject::open("no_dispatch").names(),
        vec![REDUCE_SUM, "_Z10vector_addPKfS0_Pfi"]
    );
}

#[test]
fn kernarg_segment_follows_natural_alignment_in_declaration_order() {
    let scale = CodeObject::open("scale_values");
    // (T*, T*, T, int): 0/8, 8/8, 16/sizeof(T), then int.
    assert_eq!(scale.kernel(SCALE_DOUBLE).kernarg_segment_size, 28);
    assert_eq!(scale.kernel(SCALE_FLOAT).kernarg_segment_size, 24);
    assert_eq!(scale.kernel(SCALE_DOUBLE).kernarg_segment_alignment, 16);
    assert_eq!(
        CodeObject::open("reduce_sum_baseline")
            .kernel(REDUCE_SUM)
            .kernarg_segment_size,
        20
    );
    let checks = CodeObject::open("kernel_checks");
    // (char, double, int, short, long long*): 0, 8, 16, 20, 24 → 32.
    let mixed = checks.kernel("_Z10mixed_argscdisPx");
    assert_eq!(mixed.kernarg_segment_size, 32);
    let mut out = [0i64; 4];
    let args = Kernarg::default()
        .push(-5i8)
        .push(2.25f64)
        .push(-123_456i32)
        .push(-300i16)
        .ptr(out.as_mut_ptr());
    assert_eq!(args.bytes.len(), 32);
    assert_eq!(run_1d(mixed, 1, 1, &args), 0);
    assert_eq!(out, [-5, 9, -123_456, -300]);
}

fn reduce(app: &str) -> f32 {
    let code_object = CodeObject::open(app);
    let n = 65536i32;
    let input: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
    let mut output = 0.0f32; // the apps zero the output before the dispatch
    let args = Kernarg::default()
        .ptr(input.as_ptr() as *mut f32)
        .ptr(&mut output as *mut f32)
        .push(n);
    assert_eq!(
        run_1d(code_object.kernel(REDUCE_SUM), n as u32, 256, &args),
        0
    );
    output
}

#[test]
fn reduce_sum_variants_give_exact_sum_or_zero() {
    let expected: f64 = (0..65536).map(|i| (i % 7) as f64 * 0.5).sum();
    assert_eq!(reduce("reduce_sum_baseline") as f64, expected);
    assert_eq!(reduce("reduce_sum_optimized") as f64, expected);
    assert_eq!(reduce("reduce_sum_wrong"), 0.0);
}

#[test]
fn scale_values_double_doubles_input_including_partial_last_group() {
    let code_object = CodeObject::open("scale_values");
    let n = 1000usize; // 3 full groups of 256 and one of 232
    let input: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut output = vec![-1.0f64; n + 8];
    let args = Kernarg::default()
        .ptr(input.as_ptr() as *mut f64)
        .ptr(output.as_mut_ptr())
        .push(2.0f64)
        .push(n as i32);
    assert_eq!(
        run_1d(code_object.kernel(SCALE_DOUBLE), n as u32, 256, &args),
        0
    );
    for (i, value) in output[..n].iter().enumerate() {
        assert_eq!(*value, 2.0 * i as f64, "output[{i}]");
    }
    assert!(
        output[n..].iter().all(|v| *v == -1.0),
        "wrote past the grid"
    );
}

#[test]
fn barrier_orders_shared_memory_writes_before_reads() {
    let checks = CodeObject::open("kernel_checks");
    let kernel = checks.kernel("_Z14barrier_rotatePi");
    for (groups, size) in [(4u32, 256u16), (2, 1024), (3, 7)] {
        let n = groups * size as u32;
        let mut out = vec![-1i32; n as usize];
        let args = Kernarg::default().ptr(out.as_mut_ptr());
        assert_eq!(run_1d(kernel, n, size, &args), 0);
        for g in 0..groups {
            for t in 0..size as u32 {
                let expected = ((t + 1) % size as u32 + 1000 * g) as i32;
                assert_eq!(
                    out[(g * size as u32 + t) as usize],
                    expected,
                    "group {g} item {t} (size {size})"
                );
            }
        }
    }
}

#[test]
fn repeated_barriers_release_together_every_round() {
    let checks = CodeObject::open("kernel_checks");
    let kernel = checks.kernel("_Z14barrier_roundsPii");
    let (groups, size, rounds) = (3u32, 64u16, 7i32);
    let n = groups * size as u32;
    let mut out = vec![-1i32; n as usize];
    let args = Kernarg::default().ptr(out.as_mut_ptr()).push(rounds);
    assert_eq!(run_1d(kernel, n, size, &args), 0);
    for (i, value) in out.iter().enumerate() {
        let t = i as i32 % size as i32;
        assert_eq!(*value, (t + rounds) % size as i32, "work-item {i}");
    }
}

#[test]
fn single_work_item_groups_run_and_barrier_is_a_no_op() {
    let checks = CodeObject::open("kernel_checks");
    let mut out = vec![-1i32; 5];
    let args = Kernarg::default().ptr(out.as_mut_ptr());
    assert_eq!(
        run_1d(checks.kernel("_Z14barrier_rotatePi"), 5, 1, &args),
        0
    );
    assert_eq!(out, vec![0, 1000, 2000, 3000, 4000]);
}

#[test]
fn ids_cover_a_3d_grid_with_partial_groups_once_each() {
    let checks = CodeObject::open("kernel_checks");
    let (grid, group) = ([10u32, 3, 2], [4u16, 2, 1]);
    let items = (grid[0] * grid[1] * grid[2]) as usize;
    let mut out = vec![0u32; 8 * items];
    let mut executed = 0u32;
    let args = Kernarg::default()
        .ptr(out.as_mut_ptr())
        .ptr(&mut executed as *mut u32)
        .push(grid[0])
        .push(grid[1]);
    assert_eq!(
        run(checks.kernel("_Z10record_idsPjS_jj"), grid, group, 0, &args),
        0
    );
    assert_eq!(executed as usize, items, "work-items executed");
    let pack = |x: u32, y: u32, z: u32| x | (y << 10) | (z << 20);
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let slot = &out[8 * (x + grid[0] * (y + grid[1] * z)) as usize..][..8];
                let (gx, gy, gz) = (group[0] as u32, group[1] as u32, group[2] as u32);
                assert_eq!(
                    slot[0],
                    pack(x % gx, y % gy, z % gz),
                    "threadIdx at ({x},{y},{z})"
                );
                assert_eq!(
                    slot[1],
                    pack(x / gx, y / gy, z / gz),
                    "blockIdx at ({x},{y},{z})"
                );
                assert_eq!(slot[2], pack(gx, gy, gz), "blockDim at ({x},{y},{z})");
                assert_eq!(slot[3], pack(3, 2, 2), "gridDim at ({x},{y},{z})");
                assert_eq!(slot[4], 1, "executions of ({x},{y},{z})");
            }
        }
    }
}

#[repr(C)]
#[derive(Default, Debug)]
struct Atomics {
    add_int: i32,
    add_unsigned: u32,
    add_u64: u64,
    add_float: f32,
    add_double: f64,
    max_int: i32,
    min_int: i32,
    cas_flag: i32,
    cas_winners: i32,
    exch_seen: u32,
    max_unsigned: u32,
}

#[test]
fn atomics_accumulate_every_work_item() {
    let checks = CodeObject::open("kernel_checks");
    let mut a = Atomics::default();
    let args = Kernarg::default().ptr(&mut a as *mut Atomics);
    assert_eq!(
        run_1d(checks.kernel("_Z7atomicsP7Atomics"), 1024, 128, &args),
        0
    );
    assert_eq!(a.add_int, 1024);
    assert_eq!(a.add_unsigned, 2048);
    assert_eq!(a.add_u64, 3072);
    assert_eq!(a.add_float, 256.0);
    assert_eq!(a.add_double, 512.0);
    assert_eq!(a.max_int, 1023);
    assert_eq!(a.min_int, -1023);
    assert_eq!(a.max_unsigned, 3069);
    assert_eq!(a.cas_winners, 1, "exactly one atomicCAS sees the initial 0");
    assert!(
        (1..=1024).contains(&a.cas_flag),
        "cas_flag = {}",
        a.cas_flag
    );
    assert_eq!(a.exch_seen, 7);
}

#[test]
fn dynamic_shared_memory_is_per_group_and_sized_by_the_packet() {
    let checks = CodeObject::open("kernel_checks");
    let (groups, size) = (3u32, 64u16);
    let mut out = vec![-1i32; (groups * size as u32) as usize];
    let args = Kernarg::default().ptr(out.as_mut_ptr());
    let kernel = checks.kernel("_Z22dynamic_shared_reversePi");
    assert_eq!(
        run(
            kernel,
            [groups * size as u32, 1, 1],
            [size, 1, 1],
            4 * size as u32,
            &args
        ),
        0
    );
    for (i, value) in out.iter().enumerate() {
        let (g, t) = (i as i32 / size as i32, i as i32 % size as i32);
        assert_eq!(*value, size as i32 - 1 - t + 100 * g, "work-item {i}");
    }
}

#[test]
fn rounding_mode_belongs_to_the_work_item_that_set_it() {
    let checks = CodeObject::open("kernel_checks");
    let kernel = checks.kernel("_Z22rounding_per_work_itemPfi");
    let nearest = (1.0f32 / 3.0).to_bits();
    let mut out = [0f32; 4];
    let args = Kernarg::default().ptr(out.as_mut_ptr()).push(1i32);
    assert_eq!(run_1d(kernel, 4, 4, &args), 0);
    let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
    assert_eq!(
        bits,
        vec![nearest - 1, nearest, nearest, nearest],
        "only work-item 0 rounds down"
    );
    // The caller's own state is untouched: a new dispatch rounds to nearest everywhere.
    let mut again = [0f32; 4];
    let args = Kernarg::default().ptr(again.as_mut_ptr()).push(0i32);
    assert_eq!(run_1d(kernel, 4, 4, &args), 0);
    assert!(again.iter().all(|v| v.to_bits() == nearest), "{again:?}");
    assert_eq!((1.0f32 / std::hint::black_box(3.0f32)).to_bits(), nearest);
}

#[test]
fn zero_workgroup_size_is_refused() {
    let checks = CodeObject::open("kernel_checks");
    let mut out = [0i32; 4];
    let args = Kernarg::default().ptr(out.as_mut_ptr());
    assert_eq!(
        run(
            checks.kernel("_Z14barrier_rotatePi"),
            [4, 1, 1],
            [0, 1, 1],
            0,
            &args
        ),
        2
    );
    assert_eq!(out, [0; 4], "nothing ran");
}

#[test]
fn two_code_objects_with_the_same_kernel_stay_separate() {
    // Both define _Z10reduce_sumPKfPfi; each must run its own body.
    let baseline = CodeObject::open("reduce_sum_baseline");
    let wrong = CodeObject::open("reduce_sum_wrong");
    let input = vec![1.0f32; 512];
    let mut out_baseline = 0.0f32;
    let mut out_wrong = 5.0f32;
    let args = Kernarg::default()
        .ptr(input.as_ptr() as *mut f32)
        .ptr(&mut out_baseline as *mut f32)
        .push(512i32);
    assert_eq!(run_1d(baseline.kernel(REDUCE_SUM), 512, 256, &args), 0);
    let args = Kernarg::default()
        .ptr(input.as_ptr() as *mut f32)
        .ptr(&mut out_wrong as *mut f32)
        .push(512i32);
    assert_eq!(run_1d(wrong.kernel(REDUCE_SUM), 512, 256, &args), 0);
    assert_eq!((out_baseline, out_wrong), (512.0, 0.0));
}

#[test]
fn an_entry_runs_only_its_range_of_groups() {
    let checks = CodeObject::open("kernel_checks");
    let kernel = checks.kernel("_Z14barrier_rotatePi");
    let (groups, size) = (10u32, 8u16);
    let mut out = vec![-1i32; (groups * size as u32) as usize];
    let args = Kernarg::default().ptr(out.as_mut_ptr());
    let grid = [groups * size as u32, 1, 1];
    assert_eq!(run_range(kernel, grid, [size, 1, 1], 0, &args, 3, 4), 0);
    for g in 0..groups {
        for t in 0..size as u32 {
            let value = out[(g * size as u32 + t) as usize];
            if (3..7).contains(&g) {
                assert_eq!(
                    value,
                    ((t + 1) % size as u32 + 1000 * g) as i32,
                    "group {g}"
                );
            } else {
                assert_eq!(value, -1, "group {g} is outside the range but ran");
            }
        }
    }
}

#[test]
fn ranges_of_a_3d_grid_follow_linear_group_ids_x_fastest() {
    let checks = CodeObject::open("kernel_checks");
    let (grid, group) = ([10u32, 3, 2], [4u16, 2, 1]); // 3 x 2 x 2 groups
    let items = (grid[0] * grid[1] * grid[2]) as usize;
    let mut out = vec![0u32; 8 * items];
    let mut executed = 0u32;
    let args = Kernarg::default()
        .ptr(out.as_mut_ptr())
        .ptr(&mut executed as *mut u32)
        .push(grid[0])
        .push(grid[1]);
    // Linear ids 4..7: (1,1,0) (2,1,0) (0,0,1).
    let kernel = checks.kernel("_Z10record_idsPjS_jj");
    assert_eq!(run_range(kernel, grid, group, 0, &args, 4, 3), 0);
    let pack = |x: u32, y: u32, z: u32| x | (y << 10) | (z << 20);
    let mut ran = std::collections::BTreeSet::new();
    for slot in out.chunks(8).filter(|s| s[4] == 1) {
        ran.insert(slot[1]);
    }
    assert_eq!(
        ran,
        [pack(1, 1, 0), pack(2, 1, 0), pack(0, 0, 1)]
            .into_iter()
            .collect(),
        "blockIdx of the groups that ran"
    );
    // (1,1,0): 4 x 1 items; (2,1,0): the partial group, 2 x 1; (0,0,1): 4 x 2.
    assert_eq!(executed, 4 + 2 + 8);
}

#[test]
fn a_range_past_the_last_group_is_refused_and_runs_nothing() {
    let checks = CodeObject::open("kernel_checks");
    let kernel = checks.kernel("_Z14barrier_rotatePi");
    let mut out = vec![-1i32; 80];
    let args = Kernarg::default().ptr(out.as_mut_ptr());
    for (first, count) in [(8u64, 3u64), (11, 0), (0, 11), (u64::MAX, 2)] {
        assert_eq!(
            run_range(kernel, [80, 1, 1], [8, 1, 1], 0, &args, first, count),
            5,
            "range {first}+{count} of 10 groups"
        );
    }
    assert!(out.iter().all(|v| *v == -1), "nothing ran");
    assert_eq!(run_range(kernel, [80, 1, 1], [8, 1, 1], 0, &args, 10, 0), 0);
}

/// Calls the entry from `threads` threads at once, each with its share of
/// the groups (thread i runs groups i, i + threads, ... one call per group).
fn run_concurrently(
    kernel: KernelDescriptor,
    groups: u32,
    size: u16,
    group_segment: u32,
    kernarg: &Kernarg,
    threads: u32,
) {
    /// The descriptor's name pointer is what keeps it from being Send.
    struct Shared(KernelDescriptor);
    // SAFETY: the descriptor is read-only and valid while the code object is
    // loaded, which outlives the scope below.
    unsafe impl Sync for Shared {}
    let shared = Shared(kernel);
    let start = std::sync::Barrier::new(threads as usize);
    std::thread::scope(|scope| {
        for i in 0..threads {
            let (start, shared) = (&start, &shared);
            scope.spawn(move || {
                let kernel = shared.0;
                start.wait();
                for g in (i..groups).step_by(threads as usize) {
                    let rc = run_range(
                        kernel,
                        [groups * size as u32, 1, 1],
                        [size, 1, 1],
                        group_segment,
                        kernarg,
                        g as u64,
                        1,
                    );
                    assert_eq!(rc, 0, "group {g}");
                }
            });
        }
    });
}

#[test]
fn concurrent_entry_calls_keep_shared_memory_per_group() {
    let checks = CodeObject::open("kernel_checks");
    let (groups, size, rounds) = (16u32, 64u16, 40i32);
    let mut violations = vec![0i32; groups as usize];
    let args = Kernarg::default().ptr(violations.as_mut_ptr()).push(rounds);
    let kernel = checks.kernel("_Z15shared_identityPii");
    run_concurrently(kernel, groups, size, 0, &args, 4);
    assert_eq!(violations, vec![0; groups as usize], "static __shared__");

    let kernel = checks.kernel("_Z23dynamic_shared_identityPii");
    run_concurrently(kernel, groups, size, 4 * size as u32, &args, 4);
    assert_eq!(violations, vec![0; groups as usize], "dynamic shared");
}

#[test]
fn concurrent_entry_calls_give_the_sequential_results() {
    let checks = CodeObject::open("kernel_checks");
    let (groups, size, rounds) = (12u32, 64u16, 9i32);
    let mut out = vec![-1i32; (groups * size as u32) as usize];
    let args = Kernarg::default().ptr(out.as_mut_ptr()).push(rounds);
    run_concurrently(
        checks.kernel("_Z14barrier_roundsPii"),
        groups,
        size,
        0,
        &args,
        3,
    );
    for (i, value) in out.iter().enumerate() {
        let t = i as i32 % size as i32;
        assert_eq!(*value, (t + rounds) % size as i32, "work-item {i}");
    }

    let code_object = CodeObject::open("reduce_sum_optimized");
    let n = 65536u32;
    let input: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
    let mut output = 0.0f32;
    let args = Kernarg::default()
        .ptr(input.as_ptr() as *mut f32)
        .ptr(&mut output as *mut f32)
        .push(n as i32);
    run_concurrently(code_object.kernel(REDUCE_SUM), n / 256, 256, 0, &args, 4);
    let expected: f64 = (0..n).map(|i| (i % 7) as f64 * 0.5).sum();
    assert_eq!(output as f64, expected);
}

/// Minor page faults the calling thread has taken so far.
fn thread_minor_faults() -> i64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD counts only this thread.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
        0
    );
    usage.ru_minflt
}

#[test]
fn fiber_stacks_are_reused_across_entry_calls_of_any_group_size() {
    // A private copy of the code object: its list of idle stack sets is its
    // own, so concurrent tests cannot take the sets this test warmed.
    let copy = std::env::temp_dir().join(format!(
        "ditto-kernel-checks-stack-reuse-{}.co",
        std::process::id()
    ));
    std::fs::copy(test_apps::code_object_path("kernel_checks"), &copy).unwrap();
    let checks = CodeObject::open_path(&copy);
    std::fs::remove_file(&copy).unwrap();
    let kernel = checks.kernel("_Z14barrier_roundsPii");
    let rounds = 5i32;
    let mut out = vec![-1i32; 1024];
    let args = Kernarg::default().ptr(out.as_mut_ptr()).push(rounds);
    // Warm-up: the largest group maps the stacks and touches them once.
    assert_eq!(run_1d(kernel, 1024, 1024, &args), 0);

    let sizes = [64u16, 1024, 256, 1, 1024, 128, 2, 512].repeat(4);
    let before = thread_minor_faults();
    let mut results = Vec::new();
    for &size in &sizes {
        out.fill(-1);
        let rc = run_1d(kernel, size as u32, size, &args);
        results.push((rc, out[..size as usize].to_vec()));
    }
    let faults = thread_minor_faults() - before;

    for (&size, (rc, values)) in sizes.iter().zip(&results) {
        assert_eq!(*rc, 0, "group of {size}");
        for (t, value) in values.iter().enumerate() {
            assert_eq!(
                *value,
                (t as i32 + rounds) % size as i32,
                "group of {size}, work-item {t}"
            );
        }
    }
    // Fresh stacks would fault at least one page per work-item per call
    // (over 20,000 here); reused ones are already resident.
    assert!(
        faults < 256,
        "{faults} page faults in {} entry calls: fiber stacks were mapped anew",
        sizes.len()
    );
}
