//! Which kernel a dispatch names: the kernel descriptor address of a
//! packet (`kernel_object`) found among the code objects real ROCr has
//! loaded, through its loader's debug list (`_amdgpu_r_debug`, the
//! `r_debug` ROCr exports for debuggers: one `link_map` per loaded code
//! object, `l_addr` its load address on the GPU, `l_name` its URI).
//!
//! A URI is `memory://PID#offset=ADDR&size=N` (the code object's bytes in
//! this process) or `file://PATH#offset=N&size=N`; the ELF's symbol
//! `NAME.kd` at `l_addr + st_value` is the kernel `NAME`. Nothing here
//! depends on ditto's tool: any HIP program's kernels are found.
//! Each loaded code object is read once: its kernels, and how each runs
//! (gpu-engine's `amdgpu`: CLR's blit kernels natively, every other kernel
//! from its host build), kept for the life of the process.

use gpu_engine::dispatch::{KernelRecord, KernelRun};
use object::{Object, ObjectSymbol};
use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::sync::Arc;
use std::sync::{LazyLock, Mutex};

#[repr(C)]
struct RDebug {
    version: i32,
    map: *const LinkMap,
    brk: u64,
    state: i32,
    ldbase: u64,
}

#[repr(C)]
struct LinkMap {
    addr: u64,
    name: *const c_char,
    ld: u64,
    next: *const LinkMap,
    prev: *const LinkMap,
}

/// A kernel found for a descriptor address.
#[derive(Clone)]
pub struct LoadedKernel {
    /// The symbol without `.kd` (the mangled name for HIP kernels).
    pub name: String,
    /// The URI of the code object holding it.
    pub code_object: String,
    /// How it runs.
    pub record: Arc<KernelRecord>,
}

/// A loaded code object: its load address and URI.
pub type LoadedAt = (u64, String);
/// Its kernels: (descriptor address, name, how it runs).
type Descriptors = Vec<(u64, String, Arc<KernelRecord>)>;

/// Kernel descriptors of each code object read so far.
static SYMBOLS: LazyLock<Mutex<HashMap<LoadedAt, Descriptors>>> = LazyLock::new(Default::default);

/// ROCr's `_amdgpu_r_debug`: in the global scope when the application
/// linked ROCr (HIP does), else in ROCr's own scope (a program that
/// dlopened it locally, as `ditto replay`'s replay process does).
fn loader_debug_list() -> *mut libc::c_void {
    const SYMBOL: &std::ffi::CStr = c"_amdgpu_r_debug";
    // SAFETY: dlsym with a NUL-terminated name in the global scope.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SYMBOL.as_ptr()) };
    if !global.is_null() {
        return global;
    }
    // SAFETY: RTLD_NOLOAD only finds ROCr, which is loaded (it loaded
    // us); the handle is closed again, ROCr stays loaded.
    unsafe {
        let rocr = libc::dlopen(
            c"libhsa-runtime64.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        );
        if rocr.is_null() {
            return std::ptr::null_mut();
        }
        let local = libc::dlsym(rocr, SYMBOL.as_ptr());
        libc::dlclose(rocr);
        local
    }
}

/// Each code object in ROCr's loader debug list: its load address and
/// URI, in the list's order; empty when ROCr exports no list.
pub fn listed() -> Vec<LoadedAt> {
    let debug = loader_debug_list();
    if debug.is_null() {
        return Vec::new();
    }
    // SAFETY: ROCr's r_debug, laid out as glibc's; entries stay while
    // their code objects are loaded, and a dispatched kernel's is.
    let mut map = unsafe { (*(debug as *const RDebug)).map };
    let mut listed = Vec::new();
    while !map.is_null() {
        // SAFETY: a live link_map of the list.
        let entry = unsafe { &*map };
        map = entry.next;
        if entry.name.is_null() {
            continue;
        }
        // SAFETY: l_name is a NUL-terminated URI owned by the loader.
        let uri = unsafe { CStr::from_ptr(entry.name) }
            .to_string_lossy()
            .into_owned();
        listed.push((entry.addr, uri));
    }
    listed
}

/// The kernel whose descriptor is at `kernel_object`, or None when no code
/// object ROCr loaded holds one there.
pub fn kernel_at(kernel_object: u64) -> Option<LoadedKernel> {
    for (addr, uri) in listed() {
        if kernel_object < addr {
            continue;
        }
        let mut symbols = SYMBOLS.lock().unwrap_or_else(|e| e.into_inner());
        let kernels = symbols
            .entry((addr, uri.clone()))
            .or_insert_with(|| kernel_descriptors(&uri, addr));
        if let Some((_, name, record)) = kernels.iter().find(|(a, ..)| *a == kernel_object) {
            return Some(LoadedKernel {
                name: name.clone(),
                code_object: uri,
                record: record.clone(),
            });
        }
    }
    None
}

/// Every kernel of the code object at `uri` loaded at `base`: its
/// descriptor's address (`base` + its `.kd` symbol), its name and how it
/// runs; empty when its bytes can't be read.
fn kernel_descriptors(uri: &str, base: u64) -> Descriptors {
    let Some(bytes) = code_object_bytes(uri) else {
        return Vec::new();
    };
    let Ok(elf) = object::File::parse(&*bytes) else {
        return Vec::new();
    };
    let mut runs: HashMap<String, KernelRun> = match gpu_engine::amdgpu::load(&bytes) {
        Ok(kernels) => kernels
            .into_iter()
            .map(|k| (k.symbol, KernelRun::from(k.implementation)))
            .collect(),
        Err(why) => {
            eprintln!("ditto model GPU: the code object {uri} cannot run here: {why}");
            HashMap::new()
        }
    };
    let mut found = Vec::new();
    for s in elf.symbols().chain(elf.dynamic_symbols()) {
        let Ok(symbol) = s.name() else { continue };
        let Some(name) = symbol.strip_suffix(".kd") else {
            continue;
        };
        if found.iter().any(|(_, n, _): &(u64, String, _)| n == name) {
            continue;
        }
        let run = runs.remove(symbol).unwrap_or_else(|| {
            KernelRun::Missing(format!(
                "ditto model GPU: kernel `{name}` of {uri} has no metadata entry, so it cannot run"
            ))
        });
        found.push((
            base.wrapping_add(s.address()),
            name.to_string(),
            Arc::new(KernelRecord { run }),
        ));
    }
    found
}

/// `offset` and `size` of a code-object URI's fragment.
fn range(uri: &str) -> Option<(u64, u64)> {
    let fragment = uri.split_once(['#', '?'])?.1;
    let (mut offset, mut size) = (None, None);
    for part in fragment.split('&') {
        let (k, v) = part.split_once('=')?;
        let n = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok()?,
            None => v.parse().ok()?,
        };
        match k {
            "offset" => offset = Some(n),
            "size" => size = Some(n),
            _ => {}
        }
    }
    Some((offset?, size?))
}

/// Largest code object read (bytes).
const MAX_CODE_OBJECT: u64 = 1 << 30;

fn code_object_bytes(uri: &str) -> Option<Vec<u8>> {
    let (offset, size) = range(uri)?;
    if size == 0 || size > MAX_CODE_OBJECT {
        return None;
    }
    if uri.starts_with("memory://") {
        // SAFETY: a memory URI names `size` bytes at host address
        // `offset` of this process, which the loader read the code
        // object from and which the application keeps while it is loaded.
        let bytes = unsafe { std::slice::from_raw_parts(offset as *const u8, size as usize) };
        return Some(bytes.to_vec());
    }
    let path = percent_decoded(uri.strip_prefix("file://")?.split(['#', '?']).next()?);
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut bytes = Vec::new();
    file.take(size).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_ranges_in_hex_and_decimal() {
        assert_eq!(
            range("memory://12#offset=0x7f00&size=3000"),
            Some((0x7f00, 3000))
        );
        assert_eq!(
            range("file:///a/b#offset=133&size=14472"),
            Some((133, 14472))
        );
        assert_eq!(range("file:///a/b"), None);
    }

    #[test]
    fn paths_are_percent_decoded() {
        assert_eq!(percent_decoded("/tmp/a%20b/c"), "/tmp/a b/c");
        assert_eq!(percent_decoded("/tmp/100%"), "/tmp/100%");
    }
}
