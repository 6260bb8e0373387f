//! ABI conformance of crates/hsa against ROCm 5.2's real headers
//! (/usr/include/hsa, Debian's libhsa-runtime-dev; CI installs them with
//! scripts/install-deps). Compiles tests/abi_probe.cpp with g++ and a list of
//! items generated here from crates/hsa's own definitions: the size of every
//! struct, the offset and size of every field, the offset of every entry of
//! HsaApiTable, CoreApiTable and AmdExtTable (from CORE_API_TABLE_ENTRIES /
//! AMD_EXT_TABLE_ENTRIES, so a new entry is checked without editing this
//! file), and the value of every constant. Then fails with the full list of
//! differences. A coverage check parses crates/hsa's sources so that a struct,
//! field or constant added there without a line here fails too.

use hsa::*;
use std::collections::{BTreeMap, BTreeSet};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One fact: the probe line that prints it, the key it prints, Rust's value.
struct Fact {
    probe: String,
    key: String,
    rust: i64,
}

#[derive(Default)]
struct Facts {
    facts: Vec<Fact>,
    /// `Struct.field` pairs and constant names this test checks.
    covered_fields: BTreeSet<String>,
    covered_consts: BTreeSet<String>,
}

impl Facts {
    fn size(&mut self, c_type: &str, rust: usize) {
        self.facts.push(Fact {
            probe: format!("SIZE({c_type})"),
            key: format!("size {c_type}"),
            rust: rust as i64,
        });
    }
    fn offset(&mut self, c_type: &str, c_field: &str, rust: usize) {
        self.facts.push(Fact {
            probe: format!("OFF({c_type}, {c_field})"),
            key: format!("offset {c_type}.{c_field}"),
            rust: rust as i64,
        });
    }
    fn field_size(&mut self, c_type: &str, c_field: &str, rust: usize) {
        self.facts.push(Fact {
            probe: format!(
                "std::printf(\"fieldsize {c_type}.{c_field} %zu\\n\", sizeof(static_cast<{c_type}*>(nullptr)->{c_field}));"
            ),
            key: format!("fieldsize {c_type}.{c_field}"),
            rust: rust as i64,
        });
    }
    fn constant(&mut self, name: &str, rust: i64) {
        self.covered_consts.insert(name.to_string());
        self.facts.push(Fact {
            probe: format!("CONST({name})"),
            key: format!("const {name}"),
            rust,
        });
    }
}

fn size_of_field<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// `RustType as CType { rust_field => c_field, ... }`: size, every field's
/// offset and size.
macro_rules! structs {
    ($facts:ident; $( $rust:ty as $c:ident { $($f:ident => $cf:ident),* $(,)? } )*) => {$(
        $facts.size(stringify!($c), size_of::<$rust>());
        $(
            $facts.offset(stringify!($c), stringify!($cf), offset_of!($rust, $f));
            $facts.field_size(stringify!($c), stringify!($cf), size_of_field(|s: &$rust| &s.$f));
            $facts.covered_fields.insert(format!("{}.{}", stringify!($rust), stringify!($f)));
        )*
    )*};
}

macro_rules! constants {
    ($facts:ident; $($name:ident),* $(,)?) => {$( $facts.constant(stringify!($name), $name as i64); )*};
}

fn collect() -> Facts {
    let mut f = Facts::default();
    structs! { f;
        ApiTableVersion as ApiTableVersion { major_id => major_id, minor_id => minor_id, step_id => step_id, reserved => reserved }
        HsaApiTable as HsaApiTable {
            version => version, core_ => core_, amd_ext_ => amd_ext_,
            finalizer_ext_ => finalizer_ext_, image_ext_ => image_ext_,
        }
        hsa_queue_t as hsa_queue_t {
            type_ => type, features => features, base_address => base_address,
            doorbell_signal => doorbell_signal, size => size, reserved1 => reserved1, id => id,
        }
        hsa_kernel_dispatch_packet_t as hsa_kernel_dispatch_packet_t {
            header => header, setup => setup, workgroup_size_x => workgroup_size_x,
            workgroup_size_y => workgroup_size_y, workgroup_size_z => workgroup_size_z,
            reserved0 => reserved0, grid_size_x => grid_size_x, grid_size_y => grid_size_y,
            grid_size_z => grid_size_z, private_segment_size => private_segment_size,
            group_segment_size => group_segment_size, kernel_object => kernel_object,
            kernarg_address => kernarg_address, reserved2 => reserved2,
            completion_signal => completion_signal,
        }
        hsa_barrier_and_packet_t as hsa_barrier_and_packet_t {
            header => header, reserved0 => reserved0, reserved1 => reserved1,
            dep_signal => dep_signal, reserved2 => reserved2, completion_signal => completion_signal,
        }
        hsa_barrier_or_packet_t as hsa_barrier_or_packet_t {
            header => header, reserved0 => reserved0, reserved1 => reserved1,
            dep_signal => dep_signal, reserved2 => reserved2, completion_signal => completion_signal,
        }
        hsa_amd_pointer_info_t as hsa_amd_pointer_info_t {
            size => size, type_ => type, agentBaseAddress => agentBaseAddress,
            hostBaseAddress => hostBaseAddress, sizeInBytes => sizeInBytes, userData => userData,
            agentOwner => agentOwner, global_flags => global_flags,
        }
        hsa_amd_ipc_memory_t as hsa_amd_ipc_memory_t { handle => handle }
        hsa_amd_profiling_dispatch_time_t as hsa_amd_profiling_dispatch_time_t { start => start, end => end }
        hsa_ven_amd_loader_segment_descriptor_t as hsa_ven_amd_loader_segment_descriptor_t {
            agent => agent, executable => executable,
            code_object_storage_type => code_object_storage_type,
            code_object_storage_base => code_object_storage_base,
            code_object_storage_size => code_object_storage_size,
            code_object_storage_offset => code_object_storage_offset,
            segment_base => segment_base, segment_size => segment_size,
        }
        hsa_ven_amd_loader_1_03_pfn_t as hsa_ven_amd_loader_1_03_pfn_t {
            hsa_ven_amd_loader_query_host_address => hsa_ven_amd_loader_query_host_address,
            hsa_ven_amd_loader_query_segment_descriptors => hsa_ven_amd_loader_query_segment_descriptors,
            hsa_ven_amd_loader_query_executable => hsa_ven_amd_loader_query_executable,
            hsa_ven_amd_loader_executable_iterate_loaded_code_objects => hsa_ven_amd_loader_executable_iterate_loaded_code_objects,
            hsa_ven_amd_loader_loaded_code_object_get_info => hsa_ven_amd_loader_loaded_code_object_get_info,
            hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size => hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size,
            hsa_ven_amd_loader_iterate_executables => hsa_ven_amd_loader_iterate_executables,
        }
        hsa_agent_t as hsa_agent_t { handle => handle }
        hsa_signal_t as hsa_signal_t { handle => handle }
        hsa_region_t as hsa_region_t { handle => handle }
        hsa_isa_t as hsa_isa_t { handle => handle }
        hsa_executable_t as hsa_executable_t { handle => handle }
        hsa_executable_symbol_t as hsa_executable_symbol_t { handle => handle }
        hsa_code_object_reader_t as hsa_code_object_reader_t { handle => handle }
        hsa_loaded_code_object_t as hsa_loaded_code_object_t { handle => handle }
        hsa_amd_memory_pool_t as hsa_amd_memory_pool_t { handle => handle }
    }
    // The earlier loader tables are prefixes of 1_03.
    for (i, c) in [
        "hsa_ven_amd_loader_1_00_pfn_t",
        "hsa_ven_amd_loader_1_01_pfn_t",
        "hsa_ven_amd_loader_1_02_pfn_t",
        "hsa_ven_amd_loader_1_03_pfn_t",
    ]
    .iter()
    .enumerate()
    {
        f.size(c, HSA_VEN_AMD_LOADER_TABLE_SIZES[i]);
    }
    f.covered_consts
        .insert("HSA_VEN_AMD_LOADER_TABLE_SIZES".into());

    // API tables: every entry named in the lists, at 16 + 8 * position.
    for (c_type, entries, rust_size) in [
        (
            "CoreApiTable",
            CORE_API_TABLE_ENTRIES,
            size_of::<CoreApiTable>(),
        ),
        (
            "AmdExtTable",
            AMD_EXT_TABLE_ENTRIES,
            size_of::<AmdExtTable>(),
        ),
    ] {
        f.size(c_type, rust_size);
        f.offset(c_type, "version", 0);
        for (i, name) in entries.iter().enumerate() {
            f.offset(c_type, name, 16 + 8 * i);
        }
    }
    f.covered_consts.insert("CORE_API_TABLE_ENTRIES".into());
    f.covered_consts.insert("AMD_EXT_TABLE_ENTRIES".into());

    constants! { f;
        HSA_API_TABLE_MAJOR_VERSION, HSA_CORE_API_TABLE_MAJOR_VERSION,
        HSA_AMD_EXT_API_TABLE_MAJOR_VERSION, HSA_API_TABLE_STEP_VERSION,
        HSA_STATUS_SUCCESS, HSA_STATUS_INFO_BREAK, HSA_STATUS_ERROR,
        HSA_STATUS_ERROR_INVALID_ARGUMENT, HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
        HSA_STATUS_ERROR_INVALID_ALLOCATION, HSA_STATUS_ERROR_INVALID_AGENT,
        HSA_STATUS_ERROR_INVALID_REGION, HSA_STATUS_ERROR_INVALID_SIGNAL,
        HSA_STATUS_ERROR_INVALID_QUEUE, HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, HSA_STATUS_ERROR_RESOURCE_FREE,
        HSA_STATUS_ERROR_NOT_INITIALIZED, HSA_STATUS_ERROR_REFCOUNT_OVERFLOW,
        HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS, HSA_STATUS_ERROR_INVALID_INDEX,
        HSA_STATUS_ERROR_INVALID_ISA, HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
        HSA_STATUS_ERROR_INVALID_EXECUTABLE, HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
        HSA_STATUS_ERROR_INVALID_SYMBOL_NAME, HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED,
        HSA_STATUS_ERROR_VARIABLE_UNDEFINED, HSA_STATUS_ERROR_EXCEPTION,
        HSA_STATUS_ERROR_INVALID_ISA_NAME, HSA_STATUS_ERROR_INVALID_CODE_SYMBOL,
        HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL, HSA_STATUS_ERROR_INVALID_FILE,
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER, HSA_STATUS_ERROR_INVALID_CACHE,
        HSA_STATUS_ERROR_INVALID_WAVEFRONT, HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP,
        HSA_STATUS_ERROR_INVALID_RUNTIME_STATE, HSA_STATUS_ERROR_FATAL,
        HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
        HSA_SYSTEM_INFO_VERSION_MAJOR, HSA_SYSTEM_INFO_VERSION_MINOR, HSA_SYSTEM_INFO_TIMESTAMP,
        HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT,
        HSA_SYSTEM_INFO_ENDIANNESS, HSA_SYSTEM_INFO_MACHINE_MODEL,
        HSA_DEVICE_TYPE_CPU, HSA_DEVICE_TYPE_GPU,
        HSA_AGENT_INFO_NAME, HSA_AGENT_INFO_VENDOR_NAME, HSA_AGENT_INFO_FEATURE,
        HSA_AGENT_INFO_MACHINE_MODEL, HSA_AGENT_INFO_PROFILE, HSA_AGENT_INFO_WAVEFRONT_SIZE,
        HSA_AGENT_INFO_WORKGROUP_MAX_DIM, HSA_AGENT_INFO_WORKGROUP_MAX_SIZE,
        HSA_AGENT_INFO_GRID_MAX_DIM, HSA_AGENT_INFO_GRID_MAX_SIZE, HSA_AGENT_INFO_QUEUES_MAX,
        HSA_AGENT_INFO_QUEUE_MIN_SIZE, HSA_AGENT_INFO_QUEUE_MAX_SIZE, HSA_AGENT_INFO_QUEUE_TYPE,
        HSA_AGENT_INFO_NODE, HSA_AGENT_INFO_DEVICE, HSA_AGENT_INFO_ISA,
        HSA_AGENT_INFO_VERSION_MAJOR, HSA_AGENT_INFO_VERSION_MINOR,
        HSA_AGENT_FEATURE_KERNEL_DISPATCH, HSA_AGENT_FEATURE_AGENT_DISPATCH,
        HSA_PROFILE_BASE, HSA_PROFILE_FULL,
        HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, HSA_DEFAULT_FLOAT_ROUNDING_MODE_ZERO,
        HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR,
        HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_NE, HSA_SIGNAL_CONDITION_LT,
        HSA_SIGNAL_CONDITION_GTE, HSA_WAIT_STATE_BLOCKED, HSA_WAIT_STATE_ACTIVE,
        HSA_QUEUE_TYPE_MULTI, HSA_QUEUE_TYPE_SINGLE, HSA_QUEUE_TYPE_COOPERATIVE,
        HSA_QUEUE_FEATURE_KERNEL_DISPATCH, HSA_QUEUE_FEATURE_AGENT_DISPATCH,
        HSA_PACKET_TYPE_VENDOR_SPECIFIC, HSA_PACKET_TYPE_INVALID, HSA_PACKET_TYPE_KERNEL_DISPATCH,
        HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_AGENT_DISPATCH, HSA_PACKET_TYPE_BARRIER_OR,
        HSA_FENCE_SCOPE_NONE, HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_SYSTEM,
        HSA_PACKET_HEADER_TYPE, HSA_PACKET_HEADER_BARRIER,
        HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_TYPE, HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
        HSA_ISA_INFO_NAME_LENGTH, HSA_ISA_INFO_NAME,
        HSA_EXECUTABLE_STATE_UNFROZEN, HSA_EXECUTABLE_STATE_FROZEN,
        HSA_SYMBOL_KIND_VARIABLE, HSA_SYMBOL_KIND_KERNEL, HSA_SYMBOL_KIND_INDIRECT_FUNCTION,
        HSA_EXECUTABLE_SYMBOL_INFO_TYPE, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
        HSA_EXECUTABLE_SYMBOL_INFO_NAME, HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE,
        HSA_EXECUTABLE_SYMBOL_INFO_IS_DEFINITION, HSA_EXECUTABLE_SYMBOL_INFO_AGENT,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
        HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_SEGMENT_READONLY, HSA_AMD_SEGMENT_PRIVATE,
        HSA_AMD_SEGMENT_GROUP,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
        HSA_AMD_MEMORY_POOL_INFO_SEGMENT, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
        HSA_AMD_MEMORY_POOL_INFO_SIZE, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE,
        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT,
        HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL, HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE,
        HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED, HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT,
        HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
        HSA_EXT_POINTER_TYPE_UNKNOWN, HSA_EXT_POINTER_TYPE_HSA, HSA_EXT_POINTER_TYPE_LOCKED,
        HSA_EXT_POINTER_TYPE_GRAPHICS, HSA_EXT_POINTER_TYPE_IPC,
        HSA_AMD_AGENT_INFO_CHIP_ID, HSA_AMD_AGENT_INFO_CACHELINE_SIZE,
        HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY,
        HSA_AMD_AGENT_INFO_PRODUCT_NAME, HSA_EXTENSION_AMD_LOADER,
        HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_NONE,
        HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_FILE,
        HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_PROGRAM,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_AGENT,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_EXECUTABLE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_AGENT,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_TYPE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_BASE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_SIZE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_FILE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI,
        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
        HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
        HSA_STATUS_ERROR_MEMORY_FAULT,
    }
    f
}

const HEADERS: [&str; 4] = [
    "hsa.h",
    "hsa_ext_amd.h",
    "hsa_api_trace.h",
    "hsa_ven_amd_loader.h",
];

fn require_headers() {
    for h in HEADERS {
        let p = Path::new("/usr/include/hsa").join(h);
        assert!(
            p.exists(),
            "ROCm 5.2 header {} is missing: run scripts/install-deps (installs Debian's \
             libhsa-runtime-dev); this test checks crates/hsa against it and never skips",
            p.display()
        );
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles and runs the probe; returns what the headers say, key → value.
fn probe(facts: &Facts) -> BTreeMap<String, i64> {
    require_headers();
    let dir = scratch_dir("abi-probe");
    let items: String = facts.facts.iter().map(|f| f.probe.clone() + "\n").collect();
    std::fs::write(dir.join("abi_probe_items.inc"), items).unwrap();
    let exe = dir.join("abi_probe");
    let out = Command::new("g++")
        .args([
            "-std=c++17",
            "-DAMD_INTERNAL_BUILD",
            "-Wno-invalid-offsetof",
            "-o",
        ])
        .arg(&exe)
        .arg(format!("-I{}", dir.display()))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/abi_probe.cpp"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run g++ ({e}): run scripts/install-deps"));
    assert!(
        out.status.success(),
        "g++ rejected the ABI probe: a name crates/hsa uses is not in ROCm's headers \
         (or the headers are missing: run scripts/install-deps):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the ABI probe");
    assert!(run.status.success(), "ABI probe failed: {run:?}");
    let text = String::from_utf8(run.stdout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    text.lines()
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').expect("probe line: key value");
            (key.to_string(), value.parse().expect("probe value"))
        })
        .collect()
}

/// Differences between Rust's facts and the headers', one line each.
fn differences(facts: &Facts, c: &BTreeMap<String, i64>) -> Vec<String> {
    facts
        .facts
        .iter()
        .filter_map(|f| match c.get(&f.key) {
            Some(v) if *v == f.rust => None,
            Some(v) => Some(format!(
                "{}: crates/hsa has {}, ROCm 5.2 has {v}",
                f.key, f.rust
            )),
            None => Some(format!("{}: not printed by the probe", f.key)),
        })
        .collect()
}

#[test]
fn every_struct_field_table_entry_and_constant_matches_rocm_5_2_headers() {
    let facts = collect();
    let c = probe(&facts);
    let diffs = differences(&facts, &c);
    assert!(
        diffs.is_empty(),
        "crates/hsa differs from ROCm 5.2's headers in {} of {} facts:\n  {}",
        diffs.len(),
        facts.facts.len(),
        diffs.join("\n  ")
    );
    // Not vacuous: the tables alone are 125 + 48 entries.
    assert!(facts.facts.len() > 400, "only {} facts", facts.facts.len());
}

// --- coverage: what crates/hsa's sources define --------------------------

fn sources() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        // ROCm 10's queue-creation descriptor is in no 5.2 header: its
        // layout is pinned by queue_create.rs's own tests.
        .filter(|p| !p.ends_with("queue_create.rs"))
        // The virtual-memory API is in no 5.2 header either (vmem.rs).
        .filter(|p| !p.ends_with("vmem.rs"))
        // The system events' union grew after 5.2: pinned in the file.
        .filter(|p| !p.ends_with("system_events.rs"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `(struct, [fields])` of every `pub struct X {` with named fields, plus the
/// handle types of `handle_types!(...)`.
fn defined_structs(src: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = src.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("pub struct ")
            && let Some(name) = rest.strip_suffix(" {")
            && !name.contains('$')
        {
            let mut fields = Vec::new();
            for l in lines.by_ref() {
                let l = l.trim();
                if l == "}" {
                    break;
                }
                if let Some(f) = l.strip_prefix("pub ")
                    && let Some((field, _)) = f.split_once(':')
                {
                    fields.push(field.trim().to_string());
                }
            }
            out.push((name.to_string(), fields));
        }
    }
    if let Some(start) = src.find("handle_types!(") {
        let body = &src[start + "handle_types!(".len()..];
        let body = &body[..body.find(");").unwrap()];
        for name in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            out.push((name.to_string(), vec!["handle".to_string()]));
        }
    }
    out
}

fn defined_constants(src: &str) -> Vec<String> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter(|r| !r.starts_with("fn "))
        .filter_map(|r| r.split_once(':').map(|(n, _)| n.trim().to_string()))
        .collect()
}

#[test]
fn conformance_check_covers_everything_crates_hsa_defines() {
    let facts = collect();
    let mut missing = Vec::new();
    for (file, src) in sources() {
        for (name, fields) in defined_structs(&src) {
            match name.as_str() {
                // ditto's own 64-byte view of a ring slot; no C counterpart.
                "AqlPacket" => continue,
                // ditto's own descriptions of a table layout and of a
                // release's table versions, checked against the measured
                // data (tests/layouts_data.rs), and the entries read by name
                // beyond the canonical struct.
                "TableLayout" | "ReleaseTables" | "AmdExtAdditions" => continue,
                // ditto's own error for a table version no layout has.
                "UnknownTableVersion" => continue,
                "CoreApiTable" | "AmdExtTable" => {
                    let list = if name == "CoreApiTable" {
                        CORE_API_TABLE_ENTRIES
                    } else {
                        AMD_EXT_TABLE_ENTRIES
                    };
                    let mut expected = vec!["version".to_string()];
                    expected.extend(list.iter().map(|s| s.to_string()));
                    if fields != expected {
                        missing.push(format!(
                            "{file}: the fields of {name} and its entry list differ \
                             (the list must name every field in order)"
                        ));
                    }
                    continue;
                }
                _ => {}
            }
            for field in fields {
                if !facts.covered_fields.contains(&format!("{name}.{field}")) {
                    missing.push(format!(
                        "{file}: {name}.{field} is not checked: add it to structs! in abi_conformance.rs"
                    ));
                }
            }
        }
        for name in defined_constants(&src) {
            // The measured layouts of every release: tests/layouts_data.rs.
            let measured = [
                "CORE_API_TABLE_LAYOUTS",
                "AMD_EXT_TABLE_LAYOUTS",
                "IMAGE_EXT_TABLE_LAYOUTS",
                "RELEASE_TABLES",
            ];
            if !facts.covered_consts.contains(&name) && !measured.contains(&name.as_str()) {
                missing.push(format!(
                    "{file}: constant {name} is not checked: add it to constants! in abi_conformance.rs"
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
