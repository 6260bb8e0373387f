//! What ditto knows about the application's code objects, in one place:
//! a copy of each code-object reader's bytes (ROCr keeps only the caller's
//! pointer, which the caller may free once the reader exists), which code
//! objects each executable holds until it is frozen, and, at freeze, the
//! executable's kernel symbols (name, kernel object, kernarg size) with
//! the AMDGPU metadata of its code objects, fed into the kernel table.
//! The table wraps call its hooks after the original entry succeeded. It
//! holds what it needs itself (the original symbol entries, the kernel
//! query and `--arg-types`, the kernel table it feeds), so it depends on
//! no other part of the backend.

use crate::capture::kernel_code::{CodeObjectCopy, KernelCode, ModuleVariable};
use crate::capture::kernel_table::{KernelInfo, KernelTable};
use crate::guard::ffi_guard;
use crate::log::{log_info, log_warn};
use crate::options::Options;
use ditto_kernels::{CodeObjectKernel, KernelNames, ParamType, matches, parse_code_object, triton};
use hsa::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

/// Code objects between reader creation and executable freeze, and the
/// kernels of frozen executables.
pub struct CodeObjects {
    /// Code-object reader handle → a copy of its bytes.
    readers: Mutex<HashMap<u64, Arc<[u8]>>>,
    /// Executable handle → the code objects loaded into it, until freeze.
    loaded: Mutex<HashMap<u64, Vec<Arc<[u8]>>>>,
    /// The original entries that read a frozen executable's symbols.
    iterate_symbols: Option<HsaExecutableIterateSymbolsFn>,
    symbol_get_info: Option<HsaExecutableSymbolGetInfoFn>,
    /// `DITTO_KERNEL` and `DITTO_ARG_TYPES`.
    query: Option<String>,
    /// A replay capture: targets keep their code object and variables.
    replays: bool,
    arg_types: Option<Vec<ParamType>>,
    /// Triton's cache: types for Triton kernels without `--arg-types`
    /// (with the caches only known when a kernel loads, `triton_caches`).
    triton_cache: Option<std::path::PathBuf>,
    /// Where the kernels of frozen executables go.
    kernels: Arc<KernelTable>,
}

impl CodeObjects {
    /// A tracker reading symbols through the original entries of `core`,
    /// feeding `kernels`.
    pub fn new(core: &CoreApiTable, options: &Options, kernels: Arc<KernelTable>) -> CodeObjects {
        CodeObjects {
            readers: Mutex::new(HashMap::new()),
            loaded: Mutex::new(HashMap::new()),
            iterate_symbols: core.hsa_executable_iterate_symbols_fn,
            symbol_get_info: core.hsa_executable_symbol_get_info_fn,
            query: options.kernel.clone(),
            replays: options.capture.replays(),
            arg_types: options.arg_types.clone(),
            triton_cache: options.triton_cache.clone(),
            kernels,
        }
    }

    /// Keeps a copy of the code object a reader was created from. A reader
    /// handle seen again (destroyed, then reused) gets the new bytes.
    pub fn remember(&self, reader: u64, bytes: &[u8]) {
        lock(&self.readers).insert(reader, Arc::from(bytes));
    }

    /// Drops the copy of a destroyed reader's code object.
    pub fn forget_reader(&self, reader: u64) {
        lock(&self.readers).remove(&reader);
    }

    /// Records that `reader`'s code object was loaded into `executable`.
    /// Readers created from a file are not copied: nothing to record.
    pub fn loaded(&self, executable: u64, reader: u64) {
        let Some(bytes) = lock(&self.readers).get(&reader).cloned() else {
            return;
        };
        lock(&self.loaded)
            .entry(executable)
            .or_default()
            .push(bytes);
    }

    /// The kernels described by the metadata of every code object loaded
    /// into `executable`, by kernel-descriptor symbol (`<name>.kd`); the
    /// executable's copies are dropped. Code objects without AMDGPU
    /// metadata (the CPU runtime's host ELFs) contribute nothing; one whose
    /// metadata is malformed is logged and skipped.
    pub fn take_kernel_metadata(&self, executable: u64) -> HashMap<String, CodeObjectKernel> {
        let code_objects = self.take_loaded(executable);
        kernel_metadata(&code_objects)
            .into_iter()
            .map(|(symbol, (kernel, _))| (symbol, kernel))
            .collect()
    }

    /// The code objects loaded into `executable`, in load order; the
    /// executable's copies are dropped.
    fn take_loaded(&self, executable: u64) -> Vec<Arc<[u8]>> {
        lock(&self.loaded).remove(&executable).unwrap_or_default()
    }
}

/// The kernels described by the metadata of `code_objects`, by
/// kernel-descriptor symbol, each with the position of the code object
/// that describes it.
fn kernel_metadata(code_objects: &[Arc<[u8]>]) -> HashMap<String, (CodeObjectKernel, usize)> {
    let mut kernels = HashMap::new();
    for (at, bytes) in code_objects.iter().enumerate() {
        match parse_code_object(bytes) {
            Ok(Some(found)) => {
                kernels.extend(found.into_iter().map(|k| (k.symbol.clone(), (k, at))));
            }
            Ok(None) => {}
            Err(e) => log_info!(
                "a code object ({} bytes) has no readable kernel metadata: {e}; \
                 its kernels are laid out from their names",
                bytes.len()
            ),
        }
    }
    kernels
}

/// The code object of the kernel `symbol` among an executable's
/// `code_objects`: the one whose metadata describes it (`at`), else the
/// only one; or why there is none.
fn code_object_of(
    symbol: &str,
    at: Option<usize>,
    code_objects: &[Arc<[u8]>],
    copies: &mut HashMap<usize, Arc<CodeObjectCopy>>,
) -> Result<Arc<CodeObjectCopy>, String> {
    let at = match (at, code_objects.len()) {
        (Some(at), _) => at,
        (None, 1) => 0,
        (None, 0) => {
            return Err(format!(
                "the code object of `{symbol}` was not loaded from memory \
                 (a code-object reader from a file), and the tool copies only those"
            ));
        }
        (None, n) => {
            return Err(format!(
                "the executable of `{symbol}` holds {n} code objects and none describes it"
            ));
        }
    };
    Ok(copies
        .entry(at)
        .or_insert_with(|| Arc::new(CodeObjectCopy::new(code_objects[at].clone())))
        .clone())
}

/// The hooks of the table wraps, after the original entry succeeded.
impl CodeObjects {
    /// After `hsa_code_object_reader_create_from_memory`: a copy of the
    /// `size` bytes at `code_object` kept under the new reader.
    ///
    /// # Safety
    /// The entry's contract: `code_object` readable for `size` bytes,
    /// `reader` the out-pointer the original just filled.
    pub unsafe fn reader_created(
        &self,
        code_object: *const c_void,
        size: usize,
        reader: *mut hsa_code_object_reader_t,
    ) {
        if code_object.is_null() || reader.is_null() {
            return;
        }
        // SAFETY: the runtime accepted `size` bytes at `code_object`, which
        // the caller must keep valid until this call returns at least.
        let bytes = unsafe { std::slice::from_raw_parts(code_object as *const u8, size) };
        // SAFETY: a successful create filled `*reader`.
        self.remember(unsafe { (*reader).handle }, bytes);
    }

    /// After `hsa_code_object_reader_destroy`.
    pub fn reader_destroyed(&self, reader: hsa_code_object_reader_t) {
        self.forget_reader(reader.handle);
    }

    /// After `hsa_executable_load_agent_code_object`: `reader`'s code
    /// object is part of `executable`.
    pub fn code_object_loaded(
        &self,
        executable: hsa_executable_t,
        _agent: hsa_agent_t,
        reader: hsa_code_object_reader_t,
        _options: *const c_char,
        _loaded_code_object: *mut hsa_loaded_code_object_t,
    ) {
        self.loaded(executable.handle, reader.handle);
    }

    /// After `hsa_executable_freeze`: every kernel of the executable into
    /// the kernel table (one new snapshot per executable), laid out from
    /// its code object's metadata where it has one.
    pub fn executable_frozen(&self, executable: hsa_executable_t, _options: *const c_char) {
        let Some(iterate) = self.iterate_symbols else {
            return;
        };
        let mut symbols: Vec<hsa_executable_symbol_t> = Vec::new();
        // SAFETY: original entry; the callback only pushes into `symbols`.
        let st = unsafe {
            iterate(
                executable,
                Some(collect_symbol),
                &mut symbols as *mut _ as *mut c_void,
            )
        };
        if st != HSA_STATUS_SUCCESS {
            log_warn!(
                "cannot list the kernels of a frozen executable (status 0x{st:x}); its dispatches are not seen"
            );
            return;
        }
        let code_objects = self.take_loaded(executable.handle);
        let metadata = kernel_metadata(&code_objects);
        let variables = match self.replays {
            true => self.variables_of(&symbols),
            false => Vec::new(),
        };
        let mut copies = HashMap::new();
        let loaded: Vec<_> = symbols
            .into_iter()
            .filter_map(|symbol| {
                let (object, mut kernel) = self.kernel_of(symbol, &metadata, &code_objects)?;
                if self.replays && kernel.is_target {
                    let symbol = self.symbol_name(symbol).unwrap_or_default();
                    let at = metadata.get(&symbol).map(|(_, at)| *at);
                    let code_object = code_object_of(&symbol, at, &code_objects, &mut copies);
                    if let Err(why) = &code_object {
                        log_warn!("`{}` cannot be replayed: {why}", kernel.name.demangled);
                    }
                    kernel.code = Some(Arc::new(KernelCode {
                        symbol,
                        code_object,
                        variables: variables.clone(),
                    }));
                }
                Some((object, kernel))
            })
            .collect();
        self.kernels.insert_all(loaded);
    }
}

/// Reading a frozen executable's symbols.
impl CodeObjects {
    /// A kernel symbol's (kernel object, what ditto knows of it), logged as
    /// the target or as a match that cannot be captured; `None` for other
    /// symbols and unreadable ones.
    fn kernel_of(
        &self,
        symbol: hsa_executable_symbol_t,
        metadata: &HashMap<String, (CodeObjectKernel, usize)>,
        code_objects: &[Arc<[u8]>],
    ) -> Option<(u64, KernelInfo)> {
        let kind: u32 = self.symbol_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE)?;
        if kind != HSA_SYMBOL_KIND_KERNEL {
            return None;
        }
        let name = self.symbol_name(symbol)?;
        let kernel_object: u64 =
            self.symbol_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT)?;
        let kernarg_size: u32 = self.symbol_info(
            symbol,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
        )?;
        let entry = metadata.get(&name);
        // A kernel without a C++ signature and without --arg-types: typed
        // from Triton's cache when it is a Triton kernel (the code object
        // tells its compiled variant apart).
        let names = KernelNames::new(&name);
        let triton = match (&self.arg_types, entry) {
            (None, Some((kernel, at)))
                if names.param_types().is_none()
                    && self.query.as_deref().is_some_and(|q| matches(q, &names)) =>
            {
                let binary = code_objects.get(*at).map(|b| &b[..]);
                Some(triton::types_for(
                    &crate::options::triton_caches(self.triton_cache.as_deref()),
                    "hip",
                    &names.mangled,
                    kernel.explicit_args().len(),
                    binary,
                ))
            }
            _ => None,
        };
        let arg_types = match &triton {
            Some(Ok(params)) => Some(&params.types[..]),
            Some(Err(e)) => {
                log_info!("`{}`: {e}", names.demangled);
                self.arg_types.as_deref()
            }
            None => self.arg_types.as_deref(),
        };
        let (mut kernel, problem) = KernelInfo::from_code_object(
            &name,
            kernarg_size,
            self.query.as_deref(),
            arg_types,
            entry.map(|(kernel, _)| kernel),
        );
        if let (Some(Ok(params)), Some(sig)) = (&triton, kernel.signature.as_mut()) {
            sig.name_unnamed(&params.names);
            if let Some(reason) = &params.unanalysed {
                log_warn!(
                    "`{}`: every pointer argument counts as written (an output): {reason}",
                    kernel.name.demangled
                );
            }
        }
        if let (Some(warning), true) = (&problem, kernel.signature.is_some()) {
            log_warn!("{warning}");
        } else if let Some(problem) = problem {
            log_warn!(
                "`{}` matches DITTO_KERNEL but cannot be captured: {problem}",
                kernel.name.demangled
            );
        } else if kernel.is_target {
            log_info!(
                "target kernel `{}` loaded (kernel object 0x{kernel_object:x})",
                kernel.name.demangled
            );
        }
        Some((kernel_object, kernel))
    }

    /// The module-scope variables among an executable's symbols: name,
    /// address and size as the runtime placed them.
    fn variables_of(&self, symbols: &[hsa_executable_symbol_t]) -> Vec<ModuleVariable> {
        symbols
            .iter()
            .filter_map(|&symbol| {
                let kind: u32 = self.symbol_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE)?;
                if kind != HSA_SYMBOL_KIND_VARIABLE {
                    return None;
                }
                let address: u64 =
                    self.symbol_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS)?;
                let size: u32 =
                    self.symbol_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE)?;
                Some(ModuleVariable {
                    name: self.symbol_name(symbol)?,
                    address,
                    size: u64::from(size),
                })
            })
            .collect()
    }

    /// Reads one fixed-size symbol attribute.
    fn symbol_info<T: Default>(
        &self,
        symbol: hsa_executable_symbol_t,
        attribute: u32,
    ) -> Option<T> {
        let get = self.symbol_get_info?;
        let mut value = T::default();
        // SAFETY: original entry; `value` has the attribute's size (u32 or
        // u64 as documented).
        let st = unsafe { get(symbol, attribute, &mut value as *mut T as *mut c_void) };
        (st == HSA_STATUS_SUCCESS).then_some(value)
    }

    fn symbol_name(&self, symbol: hsa_executable_symbol_t) -> Option<String> {
        let len: u32 = self.symbol_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH)?;
        let get = self.symbol_get_info?;
        // One spare byte: some runtimes write a terminating NUL.
        let mut buf = vec![0u8; len as usize + 1];
        // SAFETY: original entry; NAME writes NAME_LENGTH bytes into `buf`.
        let st = unsafe {
            get(
                symbol,
                HSA_EXECUTABLE_SYMBOL_INFO_NAME,
                buf.as_mut_ptr() as *mut c_void,
            )
        };
        if st != HSA_STATUS_SUCCESS {
            return None;
        }
        buf.truncate(len as usize);
        if let Some(nul) = buf.iter().position(|&b| b == 0) {
            buf.truncate(nul);
        }
        String::from_utf8(buf).ok()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Collects each symbol of a frozen executable into the Vec at `data`.
unsafe extern "C" fn collect_symbol(
    _executable: hsa_executable_t,
    symbol: hsa_executable_symbol_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: `data` is the Vec passed by executable_frozen, alive during iteration.
    let symbols = unsafe { &mut *(data as *mut Vec<hsa_executable_symbol_t>) };
    ffi_guard("symbol iteration", || symbols.push(symbol), || ());
    HSA_STATUS_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATES_V5: &[u8] =
        include_bytes!("../../crates/kernels/tests/fixtures/templates-v5.co");

    fn tracker() -> CodeObjects {
        // SAFETY: an all-zero table is valid (every entry None).
        let core: CoreApiTable = unsafe { std::mem::zeroed() };
        let options = Options::from_lookup(|_| None);
        CodeObjects::new(&core, &options, Arc::new(KernelTable::new()))
    }

    #[test]
    fn a_reader_copy_survives_the_caller_freeing_its_buffer() {
        let tracker = tracker();
        let mut buffer = TEMPLATES_V5.to_vec();
        // Like ROCr: the runtime handed out a reader and kept only the pointer.
        let mut reader = hsa_code_object_reader_t { handle: 0x5eed };
        // SAFETY: `buffer` is readable for its length; `reader` is valid.
        unsafe {
            tracker.reader_created(buffer.as_ptr() as *const c_void, buffer.len(), &mut reader)
        };
        // The application overwrites and frees its copy, as CLR may.
        buffer.fill(0);
        drop(buffer);
        let executable = hsa_executable_t { handle: 0xe0 };
        tracker.code_object_loaded(
            executable,
            hsa_agent_t { handle: 1 },
            reader,
            std::ptr::null(),
            std::ptr::null_mut(),
        );
        let metadata = tracker.take_kernel_metadata(executable.handle);
        let symbol = "_Z12scale_valuesIdEvPT_S1_S0_i.kd";
        let kernel = metadata.get(symbol).expect("metadata of the freed buffer");
        assert_eq!(kernel.kernarg_segment_size, 288);
        let (info, problem) = KernelInfo::from_code_object(
            symbol,
            288,
            Some("scale_values<double>"),
            None,
            Some(kernel),
        );
        assert_eq!(problem, None);
        let offsets: Vec<_> = info
            .signature
            .expect("a layout")
            .params
            .iter()
            .map(|p| (p.offset, p.size))
            .collect();
        assert_eq!(offsets, vec![(0, 8), (8, 8), (16, 8), (24, 4)]);
        // Taken once: a second freeze of the same handle finds nothing.
        assert!(tracker.take_kernel_metadata(executable.handle).is_empty());
    }

    #[test]
    fn a_code_object_loaded_from_an_unknown_reader_adds_no_metadata() {
        let tracker = tracker();
        tracker.loaded(0xe1, 0x1234);
        assert!(tracker.take_kernel_metadata(0xe1).is_empty());
        // A host ELF (the CPU runtime's code objects) has no AMDGPU metadata.
        let host = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        tracker.remember(0x99, &host);
        tracker.loaded(0xe2, 0x99);
        assert!(tracker.take_kernel_metadata(0xe2).is_empty());
    }

    #[test]
    fn a_destroyed_reader_is_forgotten() {
        let tracker = tracker();
        tracker.remember(0x77, TEMPLATES_V5);
        tracker.reader_destroyed(hsa_code_object_reader_t { handle: 0x77 });
        tracker.loaded(0xe3, 0x77);
        assert!(tracker.take_kernel_metadata(0xe3).is_empty());
    }
}
