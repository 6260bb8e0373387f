//! Where the device code objects of a file are: the file itself (an AMDGPU
//! code object), the clang offload bundles in a HIP program's `.hip_fatbin`
//! section, or a standalone bundle file (`clang --offload-device-only`).
//!
//! Owns the offload-bundle format and telling these inputs apart; never
//! reads a code object's metadata (that is `metadata`) and never panics on
//! malformed bytes: every problem is a [`BundleError`].
//!
//! Bundle layout (checked against clang-15's output, both in `.hip_fatbin`
//! and in `--offload-device-only` files), all integers u64 little-endian:
//! the 24-byte magic `__CLANG_OFFLOAD_BUNDLE__`, the entry count, then per
//! entry its offset (from the bundle's first byte), size, triple length and
//! triple (`hipv4-amdgcn-amd-amdhsa--gfx90a`, `host-x86_64-unknown-linux`,
//! the host entry being empty). A program built from several translation
//! units has one bundle per unit in `.hip_fatbin`, each starting at a
//! 4096-byte boundary with zero padding between them.

use object::Endianness;
use object::elf;
use object::read::elf::{FileHeader, SectionHeader};

/// First bytes of an uncompressed clang offload bundle.
pub const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// First bytes of a compressed one (`clang --offload-compress`).
pub const COMPRESSED_MAGIC: &[u8] = b"CCOB";
/// The host ELF section that holds a HIP program's bundles.
pub const FATBIN_SECTION: &str = ".hip_fatbin";

/// One entry of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    /// `hipv4-amdgcn-amd-amdhsa--gfx90a`, `host-x86_64-unknown-linux`, …
    pub triple: String,
    pub bytes: &'a [u8],
}

impl BundleEntry<'_> {
    /// An AMDGPU device entry (`hip…-amdgcn-…` or `openmp-amdgcn-…`).
    pub fn is_amdgpu(&self) -> bool {
        self.triple.contains("amdgcn-amd-amdhsa")
    }
}

/// One device code object found in a file, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCodeObject<'a> {
    /// Bundle entry triple; `None` when the file is itself a code object.
    pub triple: Option<String>,
    /// Index of the bundle (translation unit) in the file, from 0; `None`
    /// when the file is itself a code object.
    pub bundle: Option<usize>,
    pub bytes: &'a [u8],
}

impl DeviceCodeObject<'_> {
    /// The GPU the code object is for (`gfx90a`, `gfx90a:xnack+`): the
    /// bundle triple's processor, else the `amdhsa.target` of its metadata.
    pub fn target(&self) -> Option<String> {
        if let Some(t) = &self.triple {
            return processor(t);
        }
        metadata_target(self.bytes).and_then(|t| processor(&t))
    }
}

/// The processor part of a target triple: after `--`
/// (`amdgcn-amd-amdhsa--gfx90a:xnack-` → `gfx90a:xnack-`).
pub fn processor(triple: &str) -> Option<String> {
    let (_, cpu) = triple.split_once("--")?;
    (!cpu.is_empty()).then(|| cpu.to_string())
}

/// The `amdhsa.target` string of a code object's metadata, when it has one.
fn metadata_target(code_object: &[u8]) -> Option<String> {
    let mut note = crate::metadata::metadata_note(code_object).ok()??;
    let doc = rmpv::decode::read_value_with_max_depth(&mut note, 32).ok()?;
    doc.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some("amdhsa.target"))?
        .1
        .as_str()
        .map(str::to_string)
}

/// Why a file's device code objects cannot be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error(
        "its device code is a compressed offload bundle (`CCOB`, clang --offload-compress), \
         which ditto cannot read; unbundle it first: \
         `clang-offload-bundler --unbundle --type=o --input=BUNDLE \
         --targets=hipv4-amdgcn-amd-amdhsa--gfx90a --output=kernels.co` \
         (for a program, BUNDLE is its `.hip_fatbin` section: \
         `objcopy --dump-section .hip_fatbin=BUNDLE PROGRAM`), then list kernels.co"
    )]
    Compressed,
    #[error("offload bundle at byte {at}: {detail}")]
    Malformed { at: usize, detail: String },
    #[error("not a readable ELF file: {0}")]
    Elf(String),
    #[error(
        "neither an AMDGPU code object, nor a program with a `.hip_fatbin` section, \
         nor a clang offload bundle"
    )]
    NotDeviceCode,
    #[error(
        "an ELF file without a `.hip_fatbin` section: not a HIP program, or its device code \
         is loaded from another file (hipModuleLoad); list that file instead"
    )]
    NoFatbin,
    #[error(
        "a code object of ditto's CPU runtime (x86-64 host code exporting \
         `ditto_cpu_code_object_kernels`, as the HIP-like applications of tests/apps are \
         built), not AMDGPU device code: give the AMDGPU code object (`hipcc --genco`) or the \
         hipcc-built program instead; this file's kernels are its exported symbols (`nm -D`)"
    )]
    CpuRuntimeCodeObject,
    #[error("its offload bundles hold no AMDGPU code object (targets: {0})")]
    NoAmdgpuEntry(String),
}

fn malformed(at: usize, detail: impl Into<String>) -> BundleError {
    BundleError::Malformed {
        at,
        detail: detail.into(),
    }
}

/// The u64 at `bytes[at..]`, or why not.
fn read_u64(bytes: &[u8], at: usize, what: &str) -> Result<u64, BundleError> {
    bytes
        .get(at..at.saturating_add(8))
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| {
            malformed(
                at,
                format!("truncated: {what} past the end ({} bytes)", bytes.len()),
            )
        })
}

/// Parses the bundle at the start of `bytes`. Returns its entries and the
/// number of bytes it spans (header and every entry's data).
pub fn parse_bundle(bytes: &[u8]) -> Result<(Vec<BundleEntry<'_>>, usize), BundleError> {
    if bytes.starts_with(COMPRESSED_MAGIC) {
        return Err(BundleError::Compressed);
    }
    if !bytes.starts_with(BUNDLE_MAGIC) {
        return Err(malformed(0, "no `__CLANG_OFFLOAD_BUNDLE__` magic"));
    }
    let mut at = BUNDLE_MAGIC.len();
    let count = read_u64(bytes, at, "the entry count")?;
    at += 8;
    // Each entry takes at least 24 header bytes: a count the bytes cannot
    // hold is malformed, and refusing it bounds the allocation.
    if count > (bytes.len() / 24) as u64 {
        return Err(malformed(
            BUNDLE_MAGIC.len(),
            format!("{count} entries cannot fit in {} bytes", bytes.len()),
        ));
    }
    let mut entries = Vec::with_capacity(count as usize);
    let mut end = 0usize;
    for index in 0..count {
        let what = |field: &str| format!("entry {index}'s {field}");
        let offset = read_u64(bytes, at, &what("offset"))?;
        let size = read_u64(bytes, at + 8, &what("size"))?;
        let triple_len = read_u64(bytes, at + 16, &what("triple length"))?;
        at += 24;
        let triple = usize::try_from(triple_len)
            .ok()
            .and_then(|n| bytes.get(at..at.checked_add(n)?))
            .ok_or_else(|| {
                malformed(
                    at,
                    format!("entry {index}'s {triple_len}-byte triple runs past the end"),
                )
            })?;
        let triple = std::str::from_utf8(triple)
            .map_err(|_| malformed(at, format!("entry {index}'s triple is not UTF-8")))?
            .to_string();
        at += triple.len();
        let data = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| Some(o..o.checked_add(s)?))
            .filter(|r| r.end <= bytes.len())
            .ok_or_else(|| {
                malformed(
                    at,
                    format!(
                        "entry {index} (`{triple}`) claims bytes {offset}..{} of a {}-byte bundle",
                        offset.saturating_add(size),
                        bytes.len()
                    ),
                )
            })?;
        end = end.max(data.end);
        entries.push(BundleEntry {
            triple,
            bytes: &bytes[data],
        });
    }
    Ok((entries, end.max(at)))
}

/// Every bundle of a `.hip_fatbin` section: bundles one after the other,
/// separated by zero padding only.
pub fn parse_bundles(section: &[u8]) -> Result<Vec<Vec<BundleEntry<'_>>>, BundleError> {
    let mut bundles = Vec::new();
    let mut at = 0usize;
    loop {
        let rest = &section[at..];
        let Some(skip) = rest.iter().position(|&b| b != 0) else {
            break;
        };
        let start = at + skip;
        let (entries, len) = parse_bundle(&section[start..]).map_err(|e| match e {
            BundleError::Malformed { at: inner, detail } => malformed(start + inner, detail),
            other => other,
        })?;
        bundles.push(entries);
        at = start + len;
    }
    if bundles.is_empty() {
        return Err(malformed(0, "the section holds no bundle"));
    }
    Ok(bundles)
}

/// The contents of section `name` of a 64-bit ELF file, `None` without one.
pub fn elf_section<'a>(bytes: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, BundleError> {
    let elf_error = |e: object::read::Error| BundleError::Elf(e.to_string());
    let header = elf::FileHeader64::<Endianness>::parse(bytes).map_err(elf_error)?;
    let endian = header.endian().map_err(elf_error)?;
    let sections = header.sections(endian, bytes).map_err(elf_error)?;
    for section in sections.iter() {
        if sections.section_name(endian, section).map_err(elf_error)? == name.as_bytes() {
            return section
                .data(endian, bytes)
                .map(Some)
                .map_err(|e| BundleError::Elf(format!("section `{name}`: {e}")));
        }
    }
    Ok(None)
}

/// The AMDGPU device code objects of bundles, with where each came from.
fn device_entries<'a>(
    bundles: Vec<Vec<BundleEntry<'a>>>,
) -> Result<Vec<DeviceCodeObject<'a>>, BundleError> {
    let mut triples = Vec::new();
    let mut found = Vec::new();
    for (index, entries) in bundles.into_iter().enumerate() {
        for entry in entries {
            if entry.is_amdgpu() && !entry.bytes.is_empty() {
                found.push(DeviceCodeObject {
                    triple: Some(entry.triple),
                    bundle: Some(index),
                    bytes: entry.bytes,
                });
            } else if !triples.contains(&entry.triple) {
                triples.push(entry.triple);
            }
        }
    }
    if found.is_empty() {
        return Err(BundleError::NoAmdgpuEntry(triples.join(", ")));
    }
    Ok(found)
}

/// The AMDGPU code objects of a file: itself when it is one (ELF with
/// `e_machine` EM_AMDGPU), the entries of the bundles in its `.hip_fatbin`
/// section when it is another ELF file (a HIP program or library), the
/// entries of a standalone bundle file. Host entries are skipped.
pub fn device_code_objects(bytes: &[u8]) -> Result<Vec<DeviceCodeObject<'_>>, BundleError> {
    if bytes.starts_with(COMPRESSED_MAGIC) {
        return Err(BundleError::Compressed);
    }
    if bytes.starts_with(BUNDLE_MAGIC) {
        return device_entries(parse_bundles(bytes)?);
    }
    if !bytes.starts_with(&elf::ELFMAG) {
        return Err(BundleError::NotDeviceCode);
    }
    let header = elf::FileHeader64::<Endianness>::parse(bytes)
        .map_err(|e| BundleError::Elf(e.to_string()))?;
    let endian = header
        .endian()
        .map_err(|e| BundleError::Elf(e.to_string()))?;
    if header.e_machine(endian) == elf::EM_AMDGPU {
        return Ok(vec![DeviceCodeObject {
            triple: None,
            bundle: None,
            bytes,
        }]);
    }
    let Some(section) = elf_section(bytes, FATBIN_SECTION)? else {
        return Err(match exports(bytes, CPU_CODE_OBJECT_SYMBOL) {
            true => BundleError::CpuRuntimeCodeObject,
            false => BundleError::NoFatbin,
        });
    };
    device_entries(parse_bundles(section)?)
}

/// What every code object of ditto's CPU runtime exports
/// (include/ditto_hsa_cpu.h).
const CPU_CODE_OBJECT_SYMBOL: &str = "ditto_cpu_code_object_kernels";

/// Whether the ELF file `bytes` exports the dynamic symbol `name`.
fn exports(bytes: &[u8], name: &str) -> bool {
    use object::{Object, ObjectSymbol};
    object::File::parse(bytes).is_ok_and(|file| {
        file.dynamic_symbols()
            .any(|s| s.is_definition() && s.name() == Ok(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle with `entries` (triple, data), data laid out after the header.
    fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let header_len: usize =
            BUNDLE_MAGIC.len() + 8 + entries.iter().map(|(t, _)| 24 + t.len()).sum::<usize>();
        let mut out = BUNDLE_MAGIC.to_vec();
        out.extend((entries.len() as u64).to_le_bytes());
        let mut offset = header_len;
        for (triple, data) in entries {
            out.extend((offset as u64).to_le_bytes());
            out.extend((data.len() as u64).to_le_bytes());
            out.extend((triple.len() as u64).to_le_bytes());
            out.extend(triple.as_bytes());
            offset += data.len();
        }
        for (_, data) in entries {
            out.extend(*data);
        }
        out
    }

    const GFX90A: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a";
    const HOST: &str = "host-x86_64-unknown-linux";

    #[test]
    fn entries_are_sliced_at_their_offsets_with_their_triples() {
        let b = bundle(&[(HOST, b""), (GFX90A, b"\x7fELF-device")]);
        let (entries, len) = parse_bundle(&b).unwrap();
        assert_eq!(len, b.len());
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].triple, HOST);
        assert!(!entries[0].is_amdgpu() && entries[1].is_amdgpu());
        assert_eq!(entries[1].bytes, b"\x7fELF-device");
    }

    #[test]
    fn bundles_separated_by_zero_padding_are_all_found() {
        let mut section = bundle(&[(GFX90A, b"first")]);
        section.resize(4096, 0);
        section.extend(bundle(&[(GFX90A, b"second")]));
        section.extend([0; 100]);
        let bundles = parse_bundles(&section).unwrap();
        assert_eq!(bundles.len(), 2);
        assert_eq!(bundles[1][0].bytes, b"second");
        let objects = device_entries(bundles).unwrap();
        assert_eq!(
            objects.iter().map(|o| o.bundle).collect::<Vec<_>>(),
            vec![Some(0), Some(1)]
        );
        assert_eq!(objects[0].target().as_deref(), Some("gfx90a"));
    }

    #[test]
    fn bad_magic_is_malformed_at_byte_zero() {
        let mut b = bundle(&[(GFX90A, b"x")]);
        b[2] = b'X';
        assert!(matches!(
            parse_bundle(&b),
            Err(BundleError::Malformed { at: 0, .. })
        ));
    }

    #[test]
    fn bytes_after_a_bundle_that_are_not_padding_must_be_another_bundle() {
        let mut section = bundle(&[(GFX90A, b"first")]);
        section.extend(b"garbage");
        let err = parse_bundles(&section).unwrap_err();
        let len = section.len() - b"garbage".len();
        assert_eq!(
            err,
            malformed(len, "no `__CLANG_OFFLOAD_BUNDLE__` magic"),
            "{err}"
        );
    }

    #[test]
    fn a_truncated_bundle_is_malformed_at_every_cut() {
        let b = bundle(&[(HOST, b""), (GFX90A, b"\x7fELF-device")]);
        for cut in BUNDLE_MAGIC.len()..b.len() {
            let err = parse_bundle(&b[..cut]).unwrap_err();
            assert!(
                matches!(err, BundleError::Malformed { .. }),
                "cut {cut}: {err}"
            );
        }
    }

    #[test]
    fn an_entry_past_the_end_names_the_entry_and_its_range() {
        let mut b = bundle(&[(GFX90A, b"0123456789")]);
        let size_at = BUNDLE_MAGIC.len() + 8 + 8;
        b[size_at..size_at + 8].copy_from_slice(&1000u64.to_le_bytes());
        let err = parse_bundle(&b).unwrap_err().to_string();
        assert!(
            err.contains("entry 0 (`hipv4-amdgcn-amd-amdhsa--gfx90a`)"),
            "{err}"
        );
        assert!(
            err.contains(&format!("of a {}-byte bundle", b.len())),
            "{err}"
        );
        // An offset so large that offset + size overflows is the same error.
        let offset_at = BUNDLE_MAGIC.len() + 8;
        b[offset_at..offset_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            parse_bundle(&b),
            Err(BundleError::Malformed { .. })
        ));
    }

    #[test]
    fn an_entry_count_the_bytes_cannot_hold_is_refused_before_allocating() {
        let mut b = bundle(&[(GFX90A, b"x")]);
        b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        let err = parse_bundle(&b).unwrap_err().to_string();
        assert!(err.contains("entries cannot fit"), "{err}");
    }

    #[test]
    fn a_compressed_bundle_says_how_to_unbundle_it() {
        let mut b = COMPRESSED_MAGIC.to_vec();
        b.extend([0; 60]);
        assert_eq!(parse_bundle(&b).unwrap_err(), BundleError::Compressed);
        let err = device_code_objects(&b).unwrap_err();
        assert_eq!(err, BundleError::Compressed);
        assert!(err.to_string().contains("clang-offload-bundler --unbundle"));
    }

    #[test]
    fn a_bundle_with_only_a_host_entry_has_no_device_code() {
        let b = bundle(&[(HOST, b"")]);
        let err = device_code_objects(&b).unwrap_err();
        assert_eq!(err, BundleError::NoAmdgpuEntry(HOST.into()));
    }

    #[test]
    fn text_is_not_device_code() {
        assert_eq!(
            device_code_objects(b"#!/bin/sh\necho hi\n").unwrap_err(),
            BundleError::NotDeviceCode
        );
    }

    #[test]
    fn processor_is_the_part_after_the_double_dash() {
        assert_eq!(processor(GFX90A).as_deref(), Some("gfx90a"));
        assert_eq!(
            processor("amdgcn-amd-amdhsa--gfx90a:xnack-").as_deref(),
            Some("gfx90a:xnack-")
        );
        assert_eq!(processor(HOST), None);
    }
}
