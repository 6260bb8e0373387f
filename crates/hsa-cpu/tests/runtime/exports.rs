//! The built library: SONAME, ROCR_1 versions, trampolines through the table.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::process::Command;

fn objdump(args: &[&str]) -> String {
    let out = Command::new("objdump")
        .args(args)
        .arg(built_library())
        .output()
        .expect("run objdump (binutils)");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn exported_functions_are_versioned_rocr_1_under_the_rocr_soname() {
    let dynsyms = objdump(&["-T"]);
    let exported: Vec<(&str, &str)> = dynsyms
        .lines()
        .filter(|l| l.contains(" DF .text"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 2).then(|| (f[f.len() - 2], f[f.len() - 1]))
        })
        .filter(|(_, name)| name.starts_with("hsa_"))
        .collect();
    for name in [
        "hsa_init",
        "hsa_queue_create",
        "hsa_signal_wait_scacquire",
        "hsa_amd_ipc_memory_attach",
        "hsa_amd_pointer_info",
    ] {
        assert!(
            exported.contains(&("ROCR_1", name)),
            "{name} not exported as ROCR_1"
        );
    }
    assert!(
        exported.iter().all(|(v, _)| *v == "ROCR_1"),
        "unversioned hsa_ exports: {exported:?}"
    );
    assert!(
        !exported.iter().any(|(_, n)| n.contains("intercept")),
        "intercept functions must stay table-only"
    );
    let headers = objdump(&["-p"]);
    assert!(
        headers
            .lines()
            .any(|l| l.contains("SONAME") && l.contains("libhsa-runtime64.so.1"))
    );
}

static WRAPPED_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static ORIGINAL: std::sync::OnceLock<HsaStatusStringFn> = std::sync::OnceLock::new();

unsafe extern "C" fn wrapped_status_string(
    s: hsa_status_t,
    out: *mut *const std::ffi::c_char,
) -> hsa_status_t {
    WRAPPED_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: forwarding to the saved entry.
    unsafe { ORIGINAL.get().unwrap()(s, out) }
}

#[test]
fn exported_symbols_call_through_the_live_table() {
    init();
    // SAFETY: the table lives for the process; the slot is replaced as a tool would.
    unsafe {
        let core = &mut *(*rt::api::root_table()).core_;
        ORIGINAL.set(core.hsa_status_string_fn.unwrap()).ok();
        core.hsa_status_string_fn = Some(wrapped_status_string);
        let mut s = std::ptr::null();
        assert_eq!(
            rt::hsa_status_string(HSA_STATUS_ERROR_INVALID_SIGNAL, &mut s),
            0
        );
        let text = std::ffi::CStr::from_ptr(s).to_string_lossy();
        assert!(
            text.starts_with("HSA_STATUS_ERROR_INVALID_SIGNAL"),
            "{text}"
        );
        core.hsa_status_string_fn = Some(*ORIGINAL.get().unwrap());
    }
    assert_eq!(WRAPPED_CALLS.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn agents_and_isa_look_like_a_gfx90a_system() {
    let g = gpu();
    let mut name = [0u8; 64];
    let mut isa = hsa_isa_t::default();
    let mut len = 0u32;
    // SAFETY: attribute storage of the documented sizes.
    unsafe {
        rt::hsa_agent_get_info(g, HSA_AGENT_INFO_NAME, name.as_mut_ptr() as *mut _);
        assert_eq!(&name[..7], b"gfx90a\0");
        rt::hsa_agent_get_info(g, HSA_AGENT_INFO_ISA, &mut isa as *mut _ as *mut _);
        rt::hsa_isa_get_info_alt(
            isa,
            HSA_ISA_INFO_NAME_LENGTH,
            &mut len as *mut u32 as *mut _,
        );
        let mut isa_name = vec![0xffu8; len as usize];
        rt::hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, isa_name.as_mut_ptr() as *mut _);
        assert_eq!(
            &isa_name[..],
            b"amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-\0"
        );
        let mut wave = 0u32;
        rt::hsa_agent_get_info(
            g,
            HSA_AGENT_INFO_WAVEFRONT_SIZE,
            &mut wave as *mut u32 as *mut _,
        );
        assert_eq!(wave, 64);
        let mut freq = 0u64;
        rt::hsa_system_get_info(
            HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
            &mut freq as *mut u64 as *mut _,
        );
        assert_eq!(freq, 1_000_000_000);
        // HIP's request: the 24-byte 1_00 loader table (loader.rs tests the rest).
        let mut table = [0u64; 3];
        assert_eq!(
            rt::hsa_system_get_major_extension_table(
                HSA_EXTENSION_AMD_LOADER,
                1,
                24,
                table.as_mut_ptr() as *mut _
            ),
            0
        );
        assert!(table.iter().all(|f| *f != 0));
    }
}

#[test]
fn tools_get_finalizer_and_image_tables_of_rocm_7_2s_sizes_with_every_entry_set() {
    let data: serde_json::Value = serde_json::from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../hsa/data/rocm-abi-tables.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let measured = &data["versions"]["7.2.4"];
    // SAFETY: the root table lives for the process.
    let root = unsafe { &*rt::api::root_table() };
    for (table, name, key) in [
        (root.finalizer_ext_, "FinalizerExtTable", "finalizer_ext"),
        (root.image_ext_, "ImageExtTable", "image_ext"),
    ] {
        let major = measured["container_version"][key]["major_id"]
            .as_u64()
            .unwrap();
        assert!(!table.is_null(), "{name}: ROCr always hands tools one");
        let size = measured[name]["size"].as_u64().unwrap() as usize;
        // SAFETY: a table of `size` bytes (checked by its header next).
        let words = unsafe { std::slice::from_raw_parts(table as *const u64, size / 8) };
        assert_eq!(words[0] & 0xffff_ffff, major, "{name} major_id");
        assert_eq!(
            (words[0] >> 32) as usize,
            size,
            "{name} minor_id is its size"
        );
        assert!(
            words[2..].iter().all(|&w| w != 0),
            "{name}: no entry is null"
        );
    }
}
