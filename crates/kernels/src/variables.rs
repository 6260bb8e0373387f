//! The device variables of an AMDGPU code object (`__device__`,
//! `__constant__`, `__managed__`): its defined global data symbols but the
//! kernel descriptors (`<kernel>.kd`, data symbols too), read
//! from the dynamic symbol table (where the loader finds them) or, without
//! one, the static table; and the function symbols of an ELF
//! ([`elf_function_names`]: a CUDA cubin's kernels).

use object::Endianness;
use object::elf;
use object::read::elf::{FileHeader, SectionHeader, Sym};

/// A variable symbol: its name (mangled, as HIP asks for it), size, and
/// whether it lies in writable memory. `__device__` and `__constant__`
/// variables do (`.bss`, `.data`), and the host writes them through HIP
/// (hipMemcpyToSymbol); a `constexpr` variable the device pass emitted
/// (a static class member defined out of line) lies in `.rodata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectVariable {
    pub name: String,
    pub size: u64,
    pub writable: bool,
}

/// Why a code object's symbols could not be read: the ELF reader's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VariablesError(#[from] object::read::Error);

/// The defined global and weak data symbols of a 64-bit AMDGPU ELF code
/// object, without the compiler's own (`__hip_cuid_*`, `llvm.*`).
pub fn code_object_variables(bytes: &[u8]) -> Result<Vec<CodeObjectVariable>, VariablesError> {
    let header = elf::FileHeader64::<Endianness>::parse(bytes)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, bytes)?;
    let mut table = sections.symbols(endian, bytes, elf::SHT_DYNSYM)?;
    if table.is_empty() {
        table = sections.symbols(endian, bytes, elf::SHT_SYMTAB)?;
    }
    let mut found = Vec::new();
    for symbol in table.iter() {
        let binding = symbol.st_bind();
        if symbol.st_type() != elf::STT_OBJECT
            || !(binding == elf::STB_GLOBAL || binding == elf::STB_WEAK)
            || symbol.st_shndx(endian) == elf::SHN_UNDEF
        {
            continue;
        }
        let name = table.symbol_name(endian, symbol)?;
        let name = String::from_utf8_lossy(name).into_owned();
        // A kernel descriptor (`<kernel>.kd`) is a data symbol too.
        if name.is_empty()
            || name.ends_with(".kd")
            || name.starts_with("__hip_cuid")
            || name.starts_with("llvm.")
        {
            continue;
        }
        let flags = sections
            .section(object::SectionIndex(symbol.st_shndx(endian) as usize))
            .map_or(0, |s| s.sh_flags(endian));
        if flags & u64::from(elf::SHF_ALLOC) == 0 {
            continue;
        }
        found.push(CodeObjectVariable {
            name,
            size: symbol.st_size(endian),
            writable: flags & u64::from(elf::SHF_WRITE) != 0,
        });
    }
    Ok(found)
}

/// The names of the defined function symbols of a 64-bit ELF (a CUDA
/// cubin's kernels, a host object's functions), from its static symbol
/// table, else its dynamic one.
pub fn elf_function_names(bytes: &[u8]) -> Result<Vec<String>, VariablesError> {
    let header = elf::FileHeader64::<Endianness>::parse(bytes)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, bytes)?;
    let mut table = sections.symbols(endian, bytes, elf::SHT_SYMTAB)?;
    if table.is_empty() {
        table = sections.symbols(endian, bytes, elf::SHT_DYNSYM)?;
    }
    let mut names = Vec::new();
    for symbol in table.iter() {
        if symbol.st_type() != elf::STT_FUNC || symbol.st_shndx(endian) == elf::SHN_UNDEF {
            continue;
        }
        let name = table.symbol_name(endian, symbol)?;
        if !name.is_empty() {
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(names)
}
