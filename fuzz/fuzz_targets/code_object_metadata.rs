//! Code objects come from the application (and from files given to
//! `ditto kernels`): the ELF reader, the NT_AMDGPU_METADATA note and its
//! msgpack map must turn any bytes into kernels or an error, never a panic.
#![no_main]

use ditto_kernels::metadata::{parse_code_object, parse_metadata};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_code_object(data);
    let _ = parse_metadata(data);
});
