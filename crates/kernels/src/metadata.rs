//! What an AMDGPU code object says about its kernels: the msgpack
//! `NT_AMDGPU_METADATA` note (type 32, owner `AMDGPU`) read into one
//! [`CodeObjectKernel`] per `amdhsa.kernels[]` entry, with each argument's
//! offset, size, value kind and the optional name/access/constness clang
//! emits. Owns the ELF and msgpack reading; never assigns element types
//! (the demangled name does, in `lib.rs`) and never panics on malformed
//! bytes: every problem is a [`MetadataError`].

use object::Endianness;
use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use rmpv::Value;

use crate::dwarf::{DwarfError, DwarfParam, kernel_params};

/// `NT_AMDGPU_METADATA`: the note type of code object v3+ metadata.
pub const NT_AMDGPU_METADATA: u32 = 32;
/// Owner name of AMDGPU notes.
const NOTE_OWNER: &[u8] = b"AMDGPU";
/// Nesting the metadata never exceeds (map → kernels → kernel → args → arg);
/// deeper input is malformed, and refusing it bounds the recursion.
const MAX_DEPTH: usize = 32;

/// One kernel argument as the code object's metadata lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataArg {
    pub offset: u64,
    pub size: u64,
    /// `global_buffer`, `by_value`, `hidden_*`, …
    pub value_kind: String,
    /// `global`, `constant`, … on pointers.
    pub address_space: Option<String>,
    /// The parameter's source name (with `-fhip-kernel-arg-name`).
    pub name: Option<String>,
    /// `read_only`, `write_only`, `read_write` (clang emits `read_only` on
    /// `const T* __restrict__` at -O2).
    pub access: Option<String>,
    pub is_const: bool,
}

impl MetadataArg {
    /// Arguments the runtime fills (`hidden_*`): not the kernel's own.
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }

    /// A pointer to global memory: a buffer ditto may capture.
    pub fn is_global_buffer(&self) -> bool {
        self.value_kind == "global_buffer"
    }
}

/// One `amdhsa.kernels[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectKernel {
    /// `.name`: the mangled kernel name.
    pub name: String,
    /// `.symbol`: the kernel descriptor's symbol (`<name>.kd`).
    pub symbol: String,
    pub kernarg_segment_size: u64,
    /// Every argument in metadata order, hidden ones included.
    pub args: Vec<MetadataArg>,
    /// Its parameters as the code object's DWARF gives them (built with
    /// `-g`): for a kernel without a C++ signature (extern "C") their types,
    /// or why that DWARF could not be read; for a mangled one (whose types
    /// come from the name) only their names, looked up when the metadata
    /// has none. `None` without DWARF for it.
    pub dwarf_params: Option<Result<Vec<DwarfParam>, DwarfError>>,
}

impl CodeObjectKernel {
    /// The kernel's own arguments: those before the first hidden one.
    pub fn explicit_args(&self) -> &[MetadataArg] {
        let end = self
            .args
            .iter()
            .position(MetadataArg::is_hidden)
            .unwrap_or(self.args.len());
        &self.args[..end]
    }
}

/// Why a code object's metadata could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("not a readable ELF file: {0}")]
    Elf(String),
    #[error("the NT_AMDGPU_METADATA note is not valid msgpack: {0}")]
    Msgpack(String),
    #[error("the NT_AMDGPU_METADATA note is malformed: {0}")]
    Malformed(String),
}

fn elf_error(e: object::read::Error) -> MetadataError {
    MetadataError::Elf(e.to_string())
}

/// The `NT_AMDGPU_METADATA` note's bytes, `None` for an ELF that is not an
/// AMDGPU code object or has no such note (the CPU runtime's host ELFs).
pub fn metadata_note(bytes: &[u8]) -> Result<Option<&[u8]>, MetadataError> {
    let kind = object::FileKind::parse(bytes).map_err(elf_error)?;
    if kind != object::FileKind::Elf64 {
        return Err(MetadataError::Elf(format!(
            "{kind:?} file, not a 64-bit ELF"
        )));
    }
    let header = elf::FileHeader64::<Endianness>::parse(bytes).map_err(elf_error)?;
    let endian = header.endian().map_err(elf_error)?;
    if header.e_machine(endian) != elf::EM_AMDGPU {
        return Ok(None);
    }
    let sections = header.sections(endian, bytes).map_err(elf_error)?;
    for section in sections.iter() {
        let Some(mut notes) = section.notes(endian, bytes).map_err(elf_error)? else {
            continue;
        };
        while let Some(note) = notes.next().map_err(elf_error)? {
            if note.name() == NOTE_OWNER && note.n_type(endian) == NT_AMDGPU_METADATA {
                return Ok(Some(note.desc()));
            }
        }
    }
    Ok(None)
}

/// Every kernel an AMDGPU code object describes; `None` when `bytes` is an
/// ELF without AMDGPU metadata (see [`metadata_note`]). Kernels without
/// a mangled name get their DWARF parameters (types and names) when there
/// are some; mangled kernels whose metadata names no argument (built
/// without `-fhip-kernel-arg-name`) get them for the names (`-g`).
pub fn parse_code_object(bytes: &[u8]) -> Result<Option<Vec<CodeObjectKernel>>, MetadataError> {
    let Some(note) = metadata_note(bytes)? else {
        return Ok(None);
    };
    let mut kernels = parse_metadata(note)?;
    let wants_dwarf = |k: &CodeObjectKernel| {
        !k.name.starts_with("_Z") || k.explicit_args().iter().all(|a| a.name.is_none())
    };
    let wanted: Vec<&str> = kernels
        .iter()
        .filter(|k| wants_dwarf(k))
        .map(|k| k.name.as_str())
        .collect();
    if wanted.is_empty() {
        return Ok(Some(kernels));
    }
    let found = kernel_params(bytes, &wanted);
    for k in kernels.iter_mut().filter(|k| wants_dwarf(k)) {
        k.dwarf_params = match &found {
            Ok(map) => map.get(&k.name).cloned().map(Ok),
            // Only the types of an unmangled kernel need the DWARF: for a
            // mangled one, unreadable DWARF only means no names.
            Err(e) if !k.name.starts_with("_Z") => Some(Err(e.clone())),
            Err(_) => None,
        };
    }
    Ok(Some(kernels))
}

/// Kernels of an `NT_AMDGPU_METADATA` note's msgpack document.
pub fn parse_metadata(note: &[u8]) -> Result<Vec<CodeObjectKernel>, MetadataError> {
    let mut reader = note;
    let doc = rmpv::decode::read_value_with_max_depth(&mut reader, MAX_DEPTH)
        .map_err(|e| MetadataError::Msgpack(e.to_string()))?;
    let kernels = field(&doc, "amdhsa.kernels")
        .ok_or_else(|| malformed("no `amdhsa.kernels`"))?
        .as_array()
        .ok_or_else(|| malformed("`amdhsa.kernels` is not an array"))?;
    kernels
        .iter()
        .enumerate()
        .map(|(i, k)| kernel(k).map_err(|e| malformed(&format!("amdhsa.kernels[{i}]: {e}"))))
        .collect()
}

fn malformed(what: &str) -> MetadataError {
    MetadataError::Malformed(what.to_string())
}

/// The value under string key `key` of a msgpack map.
fn field<'v>(map: &'v Value, key: &str) -> Option<&'v Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// What is wrong with one kernel's entry of the metadata (said inside a
/// [`MetadataError::Malformed`] that names the entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FieldError {
    #[error("no `{0}`")]
    Missing(String),
    #[error("`{0}` is not a string")]
    NotAString(String),
    #[error("`{0}` is not an unsigned integer")]
    NotUnsigned(String),
    #[error("`{0}` is not an array")]
    NotAnArray(&'static str),
    #[error("`{0}` is not a boolean")]
    NotABoolean(&'static str),
    #[error("offset {offset} + size {size} overflows")]
    Overflows { offset: u64, size: u64 },
    #[error("kernel `{kernel}` .args[{index}]: {error}")]
    Arg {
        kernel: String,
        index: usize,
        error: Box<FieldError>,
    },
}

fn string(map: &Value, key: &str) -> Result<Option<String>, FieldError> {
    match field(map, key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| FieldError::NotAString(key.to_string())),
    }
}

fn required_string(map: &Value, key: &str) -> Result<String, FieldError> {
    string(map, key)?.ok_or_else(|| FieldError::Missing(key.to_string()))
}

fn required_u64(map: &Value, key: &str) -> Result<u64, FieldError> {
    field(map, key)
        .ok_or_else(|| FieldError::Missing(key.to_string()))?
        .as_u64()
        .ok_or_else(|| FieldError::NotUnsigned(key.to_string()))
}

fn kernel(k: &Value) -> Result<CodeObjectKernel, FieldError> {
    let name = required_string(k, ".name")?;
    let symbol = required_string(k, ".symbol")?;
    let kernarg_segment_size = required_u64(k, ".kernarg_segment_size")?;
    let args = match field(k, ".args") {
        None => Vec::new(),
        Some(a) => a
            .as_array()
            .ok_or(FieldError::NotAnArray(".args"))?
            .iter()
            .enumerate()
            .map(|(i, a)| {
                arg(a).map_err(|e| FieldError::Arg {
                    kernel: name.clone(),
                    index: i,
                    error: Box::new(e),
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(CodeObjectKernel {
        name,
        symbol,
        kernarg_segment_size,
        args,
        dwarf_params: None,
    })
}

fn arg(a: &Value) -> Result<MetadataArg, FieldError> {
    let is_const = match field(a, ".is_const") {
        None => false,
        Some(v) => v.as_bool().ok_or(FieldError::NotABoolean(".is_const"))?,
    };
    let offset = required_u64(a, ".offset")?;
    let size = required_u64(a, ".size")?;
    offset
        .checked_add(size)
        .ok_or(FieldError::Overflows { offset, size })?;
    Ok(MetadataArg {
        offset,
        size,
        value_kind: required_string(a, ".value_kind")?,
        address_space: string(a, ".address_space")?,
        name: string(a, ".name")?,
        access: string(a, ".access")?,
        is_const,
    })
}
