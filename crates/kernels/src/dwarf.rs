//! Parameter types of extern "C" kernels from a code object's DWARF (built
//! with `-g`): the `DW_TAG_subprogram` named like the kernel and the types
//! of its `DW_TAG_formal_parameter` children. Owns the DWARF reading; never
//! computes offsets (the metadata has them) and never panics on malformed
//! bytes: every problem is a [`DwarfError`].

use std::collections::HashMap;

use ditto_types::DType;
use gimli::{AttributeValue, EndianSlice, LittleEndian, UnitOffset, constants as dw};
use object::read::elf::ElfFile64;
use object::{CompressionFormat, Endianness, Object, ObjectSection};

use crate::param_type::ParamType;

/// Type qualifiers and typedefs followed before giving up: a longer chain is
/// malformed (or a cycle), and the bound ends it.
const MAX_CHAIN: usize = 32;

/// One kernel parameter as the DWARF types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DwarfParam {
    /// Source name (`DW_AT_name`), when present.
    pub name: Option<String>,
    /// `Unknown` for anything that is neither a pointer nor a known scalar
    /// (a struct, an enum…): raw bytes of the metadata's size.
    pub ty: ParamType,
    /// Byte size of the parameter's type, when the DWARF gives it.
    pub size: Option<u64>,
}

/// Why a code object's DWARF could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DwarfError {
    #[error("not a readable ELF file: {0}")]
    Elf(String),
    #[error("compressed debug section `{0}` is not supported")]
    Compressed(String),
    #[error("malformed DWARF: {0}")]
    Malformed(String),
}

fn malformed(e: impl std::fmt::Display) -> DwarfError {
    DwarfError::Malformed(e.to_string())
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The parameters of each subprogram of `elf`'s DWARF whose `DW_AT_name`
/// or `DW_AT_linkage_name` is one of `kernels`. A kernel absent from the
/// DWARF (or an ELF without `.debug_info`) is absent from the map.
pub fn kernel_params(
    elf: &[u8],
    kernels: &[&str],
) -> Result<HashMap<String, Vec<DwarfParam>>, DwarfError> {
    let file = ElfFile64::<Endianness>::parse(elf).map_err(|e| DwarfError::Elf(e.to_string()))?;
    if file.section_by_name(".debug_info").is_none() || kernels.is_empty() {
        return Ok(HashMap::new());
    }
    let load = |id: gimli::SectionId| -> Result<Slice<'_>, DwarfError> {
        let data = match file.section_by_name(id.name()) {
            None => &[][..],
            Some(section) => {
                let range = section
                    .compressed_file_range()
                    .map_err(|e| DwarfError::Elf(e.to_string()))?;
                if range.format != CompressionFormat::None {
                    return Err(DwarfError::Compressed(id.name().to_string()));
                }
                section.data().map_err(|e| DwarfError::Elf(e.to_string()))?
            }
        };
        Ok(EndianSlice::new(data, LittleEndian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    let mut found = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(malformed)? {
        let unit = dwarf.unit(header).map_err(malformed)?;
        let mut entries = unit.entries();
        let mut depth: isize = 0;
        // (name, depth of the subprogram, its parameters so far)
        let mut current: Option<(String, isize, Vec<DwarfParam>)> = None;
        while let Some((delta, entry)) = entries.next_dfs().map_err(malformed)? {
            depth += delta;
            if let Some((_, sub_depth, _)) = &current
                && depth <= *sub_depth
                && let Some((name, _, params)) = current.take()
            {
                found.entry(name).or_insert(params);
            }
            if entry.tag() == dw::DW_TAG_subprogram {
                let name = subprogram_name(&dwarf, &unit, entry)?;
                if let Some(name) = name.filter(|n| kernels.contains(&n.as_str()))
                    && !found.contains_key(&name)
                {
                    current = Some((name, depth, Vec::new()));
                }
            } else if entry.tag() == dw::DW_TAG_formal_parameter
                && let Some((_, sub_depth, params)) = &mut current
                && depth == *sub_depth + 1
            {
                params.push(parameter(&dwarf, &unit, entry)?);
            }
        }
        if let Some((name, _, params)) = current.take() {
            found.entry(name).or_insert(params);
        }
    }
    Ok(found)
}

type Unit<'a> = gimli::Unit<Slice<'a>>;
type Entry<'a, 'u> = gimli::DebuggingInformationEntry<'u, 'u, Slice<'a>>;

fn string_attr(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    entry: &Entry<'_, '_>,
    name: gimli::DwAt,
) -> Result<Option<String>, DwarfError> {
    match entry.attr_value(name).map_err(malformed)? {
        None => Ok(None),
        Some(v) => {
            let s = dwarf.attr_string(unit, v).map_err(malformed)?;
            Ok(Some(s.to_string_lossy().into_owned()))
        }
    }
}

fn subprogram_name(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    entry: &Entry<'_, '_>,
) -> Result<Option<String>, DwarfError> {
    // The linkage name, when present, is the symbol; for extern "C" it is
    // absent and DW_AT_name is the symbol.
    match string_attr(dwarf, unit, entry, dw::DW_AT_linkage_name)? {
        Some(n) => Ok(Some(n)),
        None => string_attr(dwarf, unit, entry, dw::DW_AT_name),
    }
}

fn unit_ref(entry: &Entry<'_, '_>, name: gimli::DwAt) -> Result<Option<UnitOffset>, DwarfError> {
    match entry.attr_value(name).map_err(malformed)? {
        None => Ok(None),
        Some(AttributeValue::UnitRef(o)) => Ok(Some(o)),
        Some(other) => Err(malformed(format!(
            "{name} is {other:?}, not a reference inside its unit"
        ))),
    }
}

fn byte_size(entry: &Entry<'_, '_>) -> Result<Option<u64>, DwarfError> {
    match entry.attr_value(dw::DW_AT_byte_size).map_err(malformed)? {
        None => Ok(None),
        Some(v) => v
            .udata_value()
            .map(Some)
            .ok_or_else(|| malformed("DW_AT_byte_size is not a constant")),
    }
}

fn parameter(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    entry: &Entry<'_, '_>,
) -> Result<DwarfParam, DwarfError> {
    let name = string_attr(dwarf, unit, entry, dw::DW_AT_name)?;
    let mut ty_ref = unit_ref(entry, dw::DW_AT_type)?;
    if ty_ref.is_none() {
        // A concrete parameter of an inlined or out-of-line instance: the
        // type is on its abstract origin.
        if let Some(origin) = unit_ref(entry, dw::DW_AT_abstract_origin)? {
            let origin = unit.entry(origin).map_err(malformed)?;
            ty_ref = unit_ref(&origin, dw::DW_AT_type)?;
        }
    }
    let Some(ty_ref) = ty_ref else {
        return Err(malformed(format!(
            "parameter {} has no DW_AT_type",
            name.as_deref().unwrap_or("?")
        )));
    };
    let (ty, size) = param_type(dwarf, unit, ty_ref)?;
    Ok(DwarfParam { name, ty, size })
}

/// Follows typedefs and qualifiers from `offset`: the first other type
/// entry (`None` for void), whether `const` was among the qualifiers, and
/// the bf16 element type when a typedef on the way is named so.
fn strip(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    mut offset: Option<UnitOffset>,
) -> Result<(Option<UnitOffset>, bool, Option<DType>), DwarfError> {
    let mut is_const = false;
    let mut named = None;
    for _ in 0..MAX_CHAIN {
        let Some(o) = offset else {
            return Ok((None, is_const, named));
        };
        let entry = unit.entry(o).map_err(malformed)?;
        match entry.tag() {
            dw::DW_TAG_const_type => is_const = true,
            dw::DW_TAG_volatile_type | dw::DW_TAG_restrict_type | dw::DW_TAG_atomic_type => {}
            dw::DW_TAG_typedef => {
                if named.is_none() {
                    named = string_attr(dwarf, unit, &entry, dw::DW_AT_name)?
                        .as_deref()
                        .and_then(bf16_name);
                }
            }
            _ => return Ok((Some(o), is_const, named)),
        }
        offset = unit_ref(&entry, dw::DW_AT_type)?;
    }
    Err(malformed(format!(
        "a chain of more than {MAX_CHAIN} typedefs and qualifiers"
    )))
}

fn bf16_name(name: &str) -> Option<DType> {
    matches!(
        name,
        "__bf16" | "bfloat16" | "__hip_bfloat16" | "hip_bfloat16" | "bfloat16_t"
    )
    .then_some(DType::BF16)
}

/// Element type of a `DW_TAG_base_type` (or a bf16 struct), with its size.
fn element(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    offset: UnitOffset,
) -> Result<(Option<DType>, Option<u64>, String), DwarfError> {
    let entry = unit.entry(offset).map_err(malformed)?;
    let size = byte_size(&entry)?;
    let name = string_attr(dwarf, unit, &entry, dw::DW_AT_name)?.unwrap_or_default();
    let spelling = if name.is_empty() {
        entry.tag().to_string()
    } else {
        name.clone()
    };
    if let Some(bf16) = bf16_name(&name).filter(|_| size == Some(2)) {
        return Ok((Some(bf16), size, spelling));
    }
    if entry.tag() != dw::DW_TAG_base_type {
        return Ok((None, size, spelling));
    }
    let encoding = match entry.attr_value(dw::DW_AT_encoding).map_err(malformed)? {
        Some(AttributeValue::Encoding(e)) => e,
        _ => return Ok((None, size, spelling)),
    };
    let dtype = match (encoding, size) {
        (dw::DW_ATE_float, Some(2)) => Some(DType::F16),
        (dw::DW_ATE_float, Some(4)) => Some(DType::F32),
        (dw::DW_ATE_float, Some(8)) => Some(DType::F64),
        (dw::DW_ATE_signed | dw::DW_ATE_signed_char, Some(1)) => Some(DType::I8),
        (dw::DW_ATE_signed, Some(2)) => Some(DType::I16),
        (dw::DW_ATE_signed, Some(4)) => Some(DType::I32),
        (dw::DW_ATE_signed, Some(8)) => Some(DType::I64),
        (dw::DW_ATE_unsigned | dw::DW_ATE_unsigned_char, Some(1)) => Some(DType::U8),
        (dw::DW_ATE_unsigned, Some(2)) => Some(DType::U16),
        (dw::DW_ATE_unsigned, Some(4)) => Some(DType::U32),
        (dw::DW_ATE_unsigned, Some(8)) => Some(DType::U64),
        (dw::DW_ATE_boolean, Some(1)) => Some(DType::Bool),
        _ => None,
    };
    Ok((dtype, size, spelling))
}

fn param_type(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    offset: UnitOffset,
) -> Result<(ParamType, Option<u64>), DwarfError> {
    let (target, _, named) = strip(dwarf, unit, Some(offset))?;
    let Some(target) = target else {
        return Err(malformed("a parameter of type void"));
    };
    let entry = unit.entry(target).map_err(malformed)?;
    if entry.tag() == dw::DW_TAG_pointer_type {
        let size = byte_size(&entry)?.or(Some(u64::from(unit.encoding().address_size)));
        let (pointee, is_const, named) = strip(dwarf, unit, unit_ref(&entry, dw::DW_AT_type)?)?;
        let dtype = match (named, pointee) {
            (Some(d), _) => d,
            (None, Some(p)) => element(dwarf, unit, p)?.0.unwrap_or(DType::Bytes),
            (None, None) => DType::Bytes,
        };
        return Ok((ParamType::Pointer { dtype, is_const }, size));
    }
    let (dtype, size, spelling) = element(dwarf, unit, target)?;
    let ty = match named.or(dtype) {
        Some(dtype) => ParamType::Scalar { dtype },
        None => ParamType::Unknown { spelling },
    };
    Ok((ty, size))
}
