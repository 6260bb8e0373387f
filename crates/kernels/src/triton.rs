//! Triton's compiled kernels as its cache keeps them, so that a Triton
//! kernel (hand-written `@triton.jit`, or one torch.compile's Inductor
//! generated) is typed with no `--arg-types`. Triton 3.x writes one
//! directory per compiled variant under its cache (`TRITON_CACHE_DIR`, else
//! `~/.triton/cache`): `<name>.json` (the metadata: `name`, `target` with
//! `backend` `cuda` or `hip` and `arch`, `triton_version`), `<name>.ttir`
//! (the Triton IR, whose `tt.func public @<name>(…)` lists the parameters
//! the kernel takes, constexprs removed: `!tt.ptr<f32>`, `i32`, …), and the
//! binary (`<name>.cubin`, `<name>.hsaco`). The compiled kernel takes more
//! parameters than its IR lists: the scratch pointers Triton appends
//! (global and profile scratch). They are typed here as unknown, so they
//! are never captured or reported as outputs.
//!
//! The cache is read by `ditto kernels` and inside the application at a
//! kernel's first launch, so an entry is read within bounds: only regular
//! files (a FIFO is never waited on), at most 16 MiB of metadata and
//! 64 MiB of IR ([`read_bounded`]); of the metadata only `name` and
//! `target` are kept (every other field is skipped as it is parsed,
//! without recursion and without being held, however deep or long); the
//! IR analysis is linear and gives up past what it follows
//! (`triton_writes`), every pointer then counted as written. A refused
//! file is named in the error ([`TritonError::Refused`]).
//!
//! Owns reading one entry and choosing among a kernel's entries; never
//! lays out (`layout`, `KernelSignature` do).

use crate::param_type::ParamType;
use ditto_types::DType;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest metadata file (`<name>.json`) read; Triton's are about a
/// kilobyte.
pub const MOST_METADATA_BYTES: u64 = 16 << 20;
/// The largest Triton IR file (`<name>.ttir`, `<name>.source`) read;
/// Triton's are kilobytes to a few megabytes.
pub const MOST_IR_BYTES: u64 = 64 << 20;

/// One compiled variant of a Triton kernel in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TritonKernel {
    /// The kernel's name (the symbol it is launched by).
    pub name: String,
    /// `cuda` or `hip`.
    pub backend: String,
    /// `90`, `gfx942`, … as the metadata writes it.
    pub arch: String,
    /// Its parameters as the Triton IR lists them, with their names.
    pub params: Vec<(Option<String>, ParamType)>,
    /// The entry's directory.
    pub dir: PathBuf,
    /// The compiled binary (`.cubin` or `.hsaco`), where the entry has it.
    pub binary: Option<PathBuf>,
    /// Why the IR analysis gave up, leaving every pointer written (an
    /// output): what it does not model, or an input past what it follows.
    pub unanalysed: Option<String>,
}

/// A launched Triton kernel's parameters as the cache gives them: one
/// type and one name per parameter the kernel takes, the scratch pointers
/// Triton appends included (unknown, unnamed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TritonParams {
    pub types: Vec<ParamType>,
    /// The IR's names (`x_ptr`); `None` where it numbers a parameter
    /// (`%arg3`) and for the scratch pointers.
    pub names: Vec<Option<String>>,
    /// The cache entry they come from.
    pub entry: PathBuf,
    /// Why every pointer counts as written: the IR analysis gave up
    /// ([`TritonKernel::unanalysed`]). A warning for the user.
    pub unanalysed: Option<String>,
}

/// Why Triton's cache gave no types for a kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TritonError {
    #[error(
        "no compiled Triton kernel `{name}` in Triton's caches ({cache}: TRITON_CACHE_DIR, else \
         ~/.triton/cache, and torch.compile's under TORCHINDUCTOR_CACHE_DIR); if it is a Triton \
         kernel, run with the cache its program used, else give its argument types with \
         --arg-types, e.g. `const f32*,f32*,i32`"
    )]
    NotCached { name: String, cache: String },
    #[error(
        "Triton's cache holds {count} compiled variants of `{name}` whose parameter types \
         differ ({dirs}), and none is known to be the one launched; give its argument types \
         with --arg-types, or clear the caches ({cache}) and run again"
    )]
    Ambiguous {
        name: String,
        count: usize,
        dirs: String,
        cache: String,
    },
    #[error(
        "the compiled Triton kernel `{name}` ({dir}) lists {listed} parameters, but the launched \
         kernel takes {taken}; give its argument types with --arg-types"
    )]
    Count {
        name: String,
        dir: String,
        listed: usize,
        taken: usize,
    },
    #[error(
        "Triton's cache holds files of `{name}` that are not read: {files}; remove those \
         entries (or clear the cache) and run again, or give its argument types with \
         --arg-types"
    )]
    Refused { name: String, files: String },
}

/// Triton's cache directory: `TRITON_CACHE_DIR` when set, else
/// `$HOME/.triton/cache`.
pub fn cache_dir(triton_cache_dir: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match triton_cache_dir.filter(|d| !d.is_empty()) {
        Some(d) => Some(PathBuf::from(d)),
        None => home.map(|h| Path::new(h).join(".triton").join("cache")),
    }
}

/// The caches a `ditto` command looks in, from its environment: Triton's
/// ([`cache_dir`]) and torch.compile's ([`inductor_cache_dirs`]).
pub fn caches_from_env() -> Vec<PathBuf> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let mut caches: Vec<PathBuf> =
        cache_dir(var("TRITON_CACHE_DIR").as_deref(), var("HOME").as_deref())
            .into_iter()
            .collect();
    caches.extend(inductor_cache_dirs(
        var("TORCHINDUCTOR_CACHE_DIR").as_deref(),
        var("USER").or_else(|| var("LOGNAME")).as_deref(),
    ));
    caches
}

/// The cache a binary file lies in when it is one of an entry's
/// (`<cache>/<hash>/<name>.hsaco` beside `<name>.json`): `<cache>`.
pub fn cache_of_entry_file(file: &Path) -> Option<PathBuf> {
    let entry = file.parent()?;
    file.with_extension("json").is_file().then_some(())?;
    Some(entry.parent()?.to_path_buf())
}

/// Where torch.compile's Inductor has Triton keep the kernels it compiles:
/// one cache per device under `<TORCHINDUCTOR_CACHE_DIR, else
/// /tmp/torchinductor_<user>>/triton/`.
pub fn inductor_cache_dirs(inductor_cache_dir: Option<&str>, user: Option<&str>) -> Vec<PathBuf> {
    let root = match (inductor_cache_dir.filter(|d| !d.is_empty()), user) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(u)) => PathBuf::from(format!("/tmp/torchinductor_{u}")),
        (None, None) => return Vec::new(),
    };
    let Ok(devices) = std::fs::read_dir(root.join("triton")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = devices.flatten().map(|d| d.path()).collect();
    dirs.sort();
    dirs
}

/// Element type of a Triton IR scalar type.
fn dtype(ir: &str) -> Option<DType> {
    Some(match ir {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "f64" => DType::F64,
        "i1" => DType::Bool,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        _ => return None,
    })
}

/// A parameter's type as the Triton IR spells it: `!tt.ptr<f32>` a
/// pointer (written until the function's body shows otherwise:
/// [`mark_read_only`]), `i32` a scalar; pointers to types without an
/// element type of ditto's (fp8) are raw bytes.
fn param_type(ir: &str) -> ParamType {
    let ir = ir.trim();
    if let Some(pointee) = ir
        .strip_prefix("!tt.ptr<")
        .and_then(|p| p.strip_suffix('>'))
    {
        // `!tt.ptr<f32, 1>`: an address space after the element type.
        let element = pointee.split(',').next().unwrap_or_default().trim();
        return ParamType::Pointer {
            dtype: dtype(element).unwrap_or(DType::Bytes),
            is_const: false,
        };
    }
    match dtype(ir) {
        Some(dtype) => ParamType::Scalar { dtype },
        None => ParamType::Unknown {
            spelling: ir.to_string(),
        },
    }
}

/// The parameters of `tt.func public @<name>(…)` in a Triton IR text:
/// each `%name: type {attributes} loc(…)`, in order. `None` without that
/// function.
pub fn ir_params(ir: &str, name: &str) -> Option<Vec<(Option<String>, ParamType)>> {
    let head = format!("@{name}(");
    let line = ir
        .lines()
        .find(|l| l.contains("tt.func") && l.contains(&head))?;
    let mut params = Vec::new();
    for part in crate::triton_ir::param_list(line, &head)? {
        // `%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc(#loc3)`
        let (name, rest) = part.split_once(':')?;
        let name = name.trim().trim_start_matches('%');
        let ty = type_text(rest);
        let named = (!name.is_empty() && !is_numbered(name)).then(|| name.to_string());
        params.push((named, param_type(ty)));
    }
    Some(params)
}

/// `arg3`: a parameter the IR numbered rather than named.
fn is_numbered(name: &str) -> bool {
    name.strip_prefix("arg")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The type at the start of `text` (before attributes and locations).
fn type_text(text: &str) -> &str {
    let text = text.trim_start();
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ' ' | '{' if depth == 0 => return &text[..i],
            _ => {}
        }
    }
    text
}

/// The regular file at `path`, at most `most` bytes of it: `Ok(None)`
/// when there is none; else why it is not read, naming it (not a regular
/// file: a FIFO is never waited on; larger than `most`; unreadable).
/// A link is followed to a regular file only.
pub fn read_bounded(path: &Path, most: u64) -> Result<Option<Vec<u8>>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "{shown}: not a regular file (a FIFO, a device or a directory)"
        ));
    }
    let too_large = || format!("{shown}: larger than the {} MiB read", most >> 20);
    if meta.len() > most {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(most + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: {e}"))?;
    if bytes.len() as u64 > most {
        return Err(too_large());
    }
    Ok(Some(bytes))
}

/// What the reader takes of an entry's metadata; every other field is
/// skipped as serde_json parses it (no recursion, nothing held).
#[derive(serde::Deserialize)]
struct EntryMetadata {
    name: String,
    target: EntryTarget,
}

#[derive(serde::Deserialize)]
struct EntryTarget {
    backend: String,
    arch: Arch,
}

/// `target.arch`: `"gfx942"`, or a number (`90`).
struct Arch(String);

impl<'de> serde::Deserialize<'de> for Arch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Arch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Arch, E> {
                Ok(Arch(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Arch, E> {
                Ok(Arch(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Arch, E> {
                Ok(Arch(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Arch, E> {
                Ok(Arch(
                    serde_json::Number::from_f64(v)
                        .map_or_else(|| v.to_string(), |n| n.to_string()),
                ))
            }
        }
        d.deserialize_any(Text)
    }
}

/// The entry in `dir` for the kernel `name`: its metadata names it and
/// its Triton IR lists its parameters. `Ok(None)` for anything else; an
/// error naming a file of the entry that is not read (not a regular file,
/// or over [`MOST_METADATA_BYTES`] or [`MOST_IR_BYTES`]).
pub fn read_entry(dir: &Path, name: &str) -> Result<Option<TritonKernel>, String> {
    let Some(meta) = read_bounded(&dir.join(format!("{name}.json")), MOST_METADATA_BYTES)? else {
        return Ok(None);
    };
    let Ok(meta) = serde_json::from_slice::<EntryMetadata>(&meta) else {
        return Ok(None);
    };
    if meta.name != name {
        return Ok(None);
    }
    let mut ir = None;
    for ext in ["ttir", "source"] {
        if let Some(bytes) = read_bounded(&dir.join(format!("{name}.{ext}")), MOST_IR_BYTES)?
            && let Ok(text) = String::from_utf8(bytes)
        {
            ir = Some(text);
            break;
        }
    }
    let Some(ir) = ir else {
        return Ok(None);
    };
    let Some(mut params) = ir_params(&ir, name) else {
        return Ok(None);
    };
    let unanalysed = mark_read_only(&mut params, &ir, name);
    let binary = ["cubin", "hsaco"]
        .iter()
        .map(|ext| dir.join(format!("{name}.{ext}")))
        .find(|p| p.is_file());
    Ok(Some(TritonKernel {
        name: name.to_string(),
        backend: meta.target.backend,
        arch: meta.target.arch.0,
        params,
        dir: dir.to_path_buf(),
        binary,
        unanalysed,
    }))
}

/// What a cache holds of one kernel.
#[derive(Debug, Default)]
pub struct Found {
    /// Its compiled variants, by directory.
    pub kernels: Vec<TritonKernel>,
    /// Why files of its entries were not read, each naming its file.
    pub refused: Vec<String>,
}

/// Every compiled variant of `name` in the cache at `cache`, and the
/// entries of it that are not read.
pub fn search(cache: &Path, name: &str) -> Found {
    let mut found = Found::default();
    let Ok(dirs) = std::fs::read_dir(cache) else {
        return found;
    };
    for d in dirs.flatten() {
        match read_entry(&d.path(), name) {
            Ok(Some(kernel)) => found.kernels.push(kernel),
            Ok(None) => {}
            Err(reason) => found.refused.push(reason),
        }
    }
    found.kernels.sort_by(|a, b| a.dir.cmp(&b.dir));
    found.refused.sort();
    found
}

/// Every compiled variant of `name` in the cache at `cache`.
pub fn find(cache: &Path, name: &str) -> Vec<TritonKernel> {
    search(cache, name).kernels
}

/// The parameter types of the launched kernel `name`, which takes `taken`
/// parameters, from the caches: its IR's parameters, then the scratch
/// pointers Triton appended (unknown: not captured). Only entries compiled
/// for `backend` (`cuda`, `hip`) count. Among several variants, the one
/// whose binary is `binary` when known, else the types they agree on.
pub fn types_for(
    caches: &[PathBuf],
    backend: &str,
    name: &str,
    taken: usize,
    binary: Option<&[u8]>,
) -> Result<TritonParams, TritonError> {
    let (mut found, mut refused) = (Vec::new(), Vec::new());
    for cache in caches {
        let mut f = search(cache, name);
        found.extend(f.kernels.into_iter().filter(|k| k.backend == backend));
        refused.append(&mut f.refused);
    }
    let cache = caches
        .iter()
        .map(|c| c.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let launched = binary.and_then(|bytes| {
        found.iter().find(|k| {
            // Read no more than the launched binary: a larger one differs.
            k.binary
                .as_ref()
                .and_then(|p| read_bounded(p, bytes.len() as u64).ok().flatten())
                .is_some_and(|b| b == bytes)
        })
    });
    // Without the launched variant, one not read might be it.
    if launched.is_none() && !refused.is_empty() {
        return Err(TritonError::Refused {
            name: name.to_string(),
            files: refused.join("; "),
        });
    }
    let chosen = launched.cloned().or_else(|| agreed(&found));
    let Some(kernel) = chosen else {
        return Err(if found.is_empty() {
            TritonError::NotCached {
                name: name.to_string(),
                cache: cache.clone(),
            }
        } else {
            TritonError::Ambiguous {
                name: name.to_string(),
                count: found.len(),
                dirs: found
                    .iter()
                    .map(|k| k.dir.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                cache,
            }
        });
    };
    let listed = kernel.params.len();
    if listed > taken {
        return Err(TritonError::Count {
            name: name.to_string(),
            dir: kernel.dir.display().to_string(),
            listed,
            taken,
        });
    }
    let (mut names, mut types): (Vec<_>, Vec<_>) = kernel.params.into_iter().unzip();
    types.extend((listed..taken).map(|_| ParamType::Unknown {
        spelling: "a scratch pointer Triton appends".into(),
    }));
    names.resize(taken, None);
    Ok(TritonParams {
        types,
        names,
        entry: kernel.dir,
        unanalysed: kernel.unanalysed,
    })
}

/// For each parameter of `tt.func public @<name>(…)` in the Triton IR
/// `ir`, in order, whether the function may write through it; else why
/// every pointer must count as written (what the analysis does not model,
/// or its input past what it follows).
pub fn pointer_writes(ir: &str, name: &str) -> Result<Vec<bool>, String> {
    crate::triton_writes::analyse(ir, name)
}

/// Marks each pointer parameter the body of `name` in `ir` never writes
/// through as `const` (Triton marks none). Where the body holds what the
/// analysis does not model, every pointer stays written.
/// Returns why not, when the analysis gave up.
fn mark_read_only(
    params: &mut [(Option<String>, ParamType)],
    ir: &str,
    name: &str,
) -> Option<String> {
    let written = match crate::triton_writes::analyse(ir, name) {
        Ok(written) => written,
        Err(reason) => return Some(reason),
    };
    if written.len() != params.len() {
        return Some("its function's parameters were read two ways".into());
    }
    for ((_, ty), written) in params.iter_mut().zip(written) {
        if let ParamType::Pointer { is_const, .. } = ty {
            *is_const = !written;
        }
    }
    None
}

/// The variants' common parameters, when every variant lists the same
/// types: a pointer is `const` only where no variant writes through it
/// (variants of other constexprs may store where others do not).
fn agreed(found: &[TritonKernel]) -> Option<TritonKernel> {
    let first = found.first()?;
    let unmarked = |t: &ParamType| match t {
        ParamType::Pointer { dtype, .. } => ParamType::Pointer {
            dtype: *dtype,
            is_const: false,
        },
        other => other.clone(),
    };
    let same = |k: &TritonKernel| {
        k.params.len() == first.params.len()
            && k.params
                .iter()
                .zip(&first.params)
                .all(|(a, b)| unmarked(&a.1) == unmarked(&b.1))
    };
    if !found.iter().all(same) {
        return None;
    }
    let mut merged = first.clone();
    merged.unanalysed = found.iter().find_map(|k| k.unanalysed.clone());
    for (i, (_, ty)) in merged.params.iter_mut().enumerate() {
        if let ParamType::Pointer { is_const, .. } = ty {
            *is_const = found
                .iter()
                .all(|k| matches!(k.params[i].1, ParamType::Pointer { is_const: true, .. }));
        }
    }
    Some(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache entry shaped as Triton 3.x writes one: the metadata, the
    /// Triton IR (its function line as Triton prints it, names and
    /// locations included; its body stores through the pointers named
    /// `out_ptr` or `out_ptr0`) and the binary.
    fn entry(cache: &Path, hash: &str, name: &str, target: &str, params: &str, binary: &[u8]) {
        let stores: String = ["%out_ptr", "%out_ptr0"]
            .iter()
            .filter(|p| params.contains(&format!("{p}: !tt.ptr")))
            .map(|p| format!("    tt.store {p}, %v : !tt.ptr<f32> loc(#loc2)\n"))
            .collect();
        let dir = cache.join(hash);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{name}.json")),
            format!(
                r#"{{"hash": "{hash}", "target": {target}, "num_warps": 4, "num_ctas": 1, "num_stages": 3, "debug": false, "triton_version": "3.6.0", "shared": 0, "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1, "name": "{name}"}}"#
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{name}.ttir")),
            format!(
                "#loc = loc(\"/work/app.py\":16:0)\nmodule {{\n  tt.func public @{name}({params}) attributes {{noinline = false}} {{\n    %v = arith.constant 1.000000e+00 : f32 loc(#loc1)\n{stores}    tt.return loc(#loc1)\n  }} loc(#loc)\n}} loc(#loc)\n"
            ),
        )
        .unwrap();
        let ext = if target.contains("\"hip\"") {
            "hsaco"
        } else {
            "cubin"
        };
        std::fs::write(dir.join(format!("{name}.{ext}")), binary).unwrap();
        std::fs::write(
            dir.join(format!("__grp__{name}.json")),
            format!(
                r#"{{"child_paths": {{"{name}.json": "{}"}}}}"#,
                dir.join(format!("{name}.json")).display()
            ),
        )
        .unwrap();
    }

    const CUDA: &str = r#"{"backend": "cuda", "arch": 90, "warp_size": 32}"#;
    const HIP: &str = r#"{"backend": "hip", "arch": "gfx942", "warp_size": 64}"#;
    const SCALE_ADD: &str = "%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc(\"x_ptr\"(#loc)), %y_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc(\"y_ptr\"(#loc)), %out_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc(\"out_ptr\"(#loc)), %n: i32 {tt.divisibility = 16 : i32} loc(\"n\"(#loc))";

    /// A pointer the kernel writes through.
    fn ptr(dtype: DType) -> ParamType {
        ParamType::Pointer {
            dtype,
            is_const: false,
        }
    }

    /// A pointer the kernel only reads.
    fn const_ptr(dtype: DType) -> ParamType {
        ParamType::Pointer {
            dtype,
            is_const: true,
        }
    }

    #[test]
    fn a_cuda_entry_gives_the_ir_s_parameters_then_the_scratch_pointers() {
        let cache = tempfile::tempdir().unwrap();
        entry(
            cache.path(),
            "abc",
            "scale_add_kernel",
            CUDA,
            SCALE_ADD,
            b"cubin-1",
        );
        let found = find(cache.path(), "scale_add_kernel");
        assert_eq!(found.len(), 1);
        let k = &found[0];
        assert_eq!((k.backend.as_str(), k.arch.as_str()), ("cuda", "90"));
        let names: Vec<_> = k.params.iter().map(|p| p.0.as_deref()).collect();
        assert_eq!(
            names,
            [Some("x_ptr"), Some("y_ptr"), Some("out_ptr"), Some("n")]
        );
        // The launched kernel takes 6 parameters: two scratch pointers appended.
        let types = types_for(
            &[cache.path().to_path_buf()],
            "cuda",
            "scale_add_kernel",
            6,
            None,
        )
        .unwrap()
        .types;
        assert_eq!(
            &types[..4],
            // x and y only read, out stored through.
            &[
                const_ptr(DType::F32),
                const_ptr(DType::F32),
                ptr(DType::F32),
                ParamType::Scalar { dtype: DType::I32 }
            ]
        );
        assert!(
            types[4..]
                .iter()
                .all(|t| matches!(t, ParamType::Unknown { .. })),
            "{types:?}"
        );
        assert_eq!(types.len(), 6);
        let named = types_for(
            &[cache.path().to_path_buf()],
            "cuda",
            "scale_add_kernel",
            6,
            None,
        )
        .unwrap()
        .names;
        assert_eq!(
            named,
            [
                Some("x_ptr".to_string()),
                Some("y_ptr".into()),
                Some("out_ptr".into()),
                Some("n".into()),
                None,
                None
            ]
        );
        // Fewer parameters than the IR lists: not this kernel.
        assert!(matches!(
            types_for(
                &[cache.path().to_path_buf()],
                "cuda",
                "scale_add_kernel",
                3,
                None
            ),
            Err(TritonError::Count {
                listed: 4,
                taken: 3,
                ..
            })
        ));
    }

    #[test]
    fn a_rocm_entry_and_inductor_s_numbered_or_named_parameters_read_alike() {
        let cache = tempfile::tempdir().unwrap();
        let inductor = "%in_ptr0: !tt.ptr<bf16> {tt.divisibility = 16 : i32} loc(\"in_ptr0\"(#loc)), %out_ptr0: !tt.ptr<f16, 1> loc(\"out_ptr0\"(#loc)), %xnumel: i64 loc(\"xnumel\"(#loc)), %arg3: !tt.ptr<f8E4M3FN> loc(#loc), %flag: i1 loc(#loc)";
        entry(
            cache.path(),
            "def",
            "triton_poi_fused_add_mul_relu_0",
            HIP,
            inductor,
            b"hsaco",
        );
        let k = &find(cache.path(), "triton_poi_fused_add_mul_relu_0")[0];
        assert_eq!((k.backend.as_str(), k.arch.as_str()), ("hip", "gfx942"));
        assert!(
            k.binary
                .as_ref()
                .unwrap()
                .ends_with("triton_poi_fused_add_mul_relu_0.hsaco")
        );
        assert_eq!(
            k.params,
            vec![
                (Some("in_ptr0".into()), const_ptr(DType::BF16)),
                (Some("out_ptr0".into()), ptr(DType::F16)),
                (
                    Some("xnumel".into()),
                    ParamType::Scalar { dtype: DType::I64 }
                ),
                (None, const_ptr(DType::Bytes)),
                (
                    Some("flag".into()),
                    ParamType::Scalar { dtype: DType::Bool }
                ),
            ]
        );
        // Compiled for ROCm: a CUDA launch of that name is not typed by it.
        let caches = [cache.path().to_path_buf()];
        let name = "triton_poi_fused_add_mul_relu_0";
        assert_eq!(
            types_for(&caches, "hip", name, 5, None)
                .unwrap()
                .types
                .len(),
            5
        );
        assert!(matches!(
            types_for(&caches, "cuda", name, 5, None),
            Err(TritonError::NotCached { .. })
        ));
    }

    #[test]
    fn variants_are_told_apart_by_their_binary_or_must_agree() {
        let cache = tempfile::tempdir().unwrap();
        // Two block sizes of one kernel: the same parameters.
        entry(
            cache.path(),
            "b1024",
            "scale_add_kernel",
            CUDA,
            SCALE_ADD,
            b"block-1024",
        );
        entry(
            cache.path(),
            "b2048",
            "scale_add_kernel",
            CUDA,
            SCALE_ADD,
            b"block-2048",
        );
        assert_eq!(
            types_for(
                &[cache.path().to_path_buf()],
                "cuda",
                "scale_add_kernel",
                4,
                None
            )
            .unwrap()
            .types
            .len(),
            4
        );
        // A half-precision variant: the types differ.
        let half = SCALE_ADD.replace("f32", "f16");
        entry(
            cache.path(),
            "half",
            "scale_add_kernel",
            CUDA,
            &half,
            b"half",
        );
        let err = types_for(
            &[cache.path().to_path_buf()],
            "cuda",
            "scale_add_kernel",
            4,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, TritonError::Ambiguous { count: 3, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--arg-types"), "{err}");
        // The launched binary names the variant.
        let types = types_for(
            &[cache.path().to_path_buf()],
            "cuda",
            "scale_add_kernel",
            4,
            Some(b"half"),
        )
        .unwrap()
        .types;
        assert_eq!(types[0], const_ptr(DType::F16));
        // Nothing cached: what to pass.
        let err = types_for(
            &[cache.path().to_path_buf()],
            "cuda",
            "other_kernel",
            4,
            None,
        )
        .unwrap_err();
        assert!(matches!(err, TritonError::NotCached { .. }), "{err}");
        assert!(err.to_string().contains("TRITON_CACHE_DIR"), "{err}");
    }

    /// Variants of other constexprs may store through a pointer others
    /// only read: agreed types keep it written; the launched binary's
    /// variant keeps its own.
    #[test]
    fn a_pointer_is_read_only_where_no_variant_writes_it() {
        let cache = tempfile::tempdir().unwrap();
        entry(
            cache.path(),
            "plain",
            "scale_add_kernel",
            CUDA,
            SCALE_ADD,
            b"plain",
        );
        // The same parameters, y renamed so the fixture stores through it.
        let in_place = SCALE_ADD.replace("%y_ptr:", "%out_ptr0:");
        entry(
            cache.path(),
            "in-place",
            "scale_add_kernel",
            CUDA,
            &in_place,
            b"in-place",
        );
        let caches = [cache.path().to_path_buf()];
        let agreed = types_for(&caches, "cuda", "scale_add_kernel", 4, None)
            .unwrap()
            .types;
        assert_eq!(
            &agreed[..3],
            &[const_ptr(DType::F32), ptr(DType::F32), ptr(DType::F32)]
        );
        let plain = types_for(&caches, "cuda", "scale_add_kernel", 4, Some(b"plain"))
            .unwrap()
            .types;
        assert_eq!(plain[1], const_ptr(DType::F32));
        let in_place = types_for(&caches, "cuda", "scale_add_kernel", 4, Some(b"in-place"))
            .unwrap()
            .types;
        assert_eq!(in_place[1], ptr(DType::F32));
    }

    #[test]
    fn inductor_keeps_one_cache_per_device_under_its_own_directory() {
        let root = tempfile::tempdir().unwrap();
        for device in ["0", "1"] {
            std::fs::create_dir_all(root.path().join("triton").join(device)).unwrap();
        }
        let dirs = inductor_cache_dirs(Some(root.path().to_str().unwrap()), Some("u"));
        assert_eq!(
            dirs,
            [root.path().join("triton/0"), root.path().join("triton/1")]
        );
        assert_eq!(inductor_cache_dirs(None, None), Vec::<PathBuf>::new());
    }

    #[test]
    fn the_cache_is_triton_cache_dir_else_under_home() {
        assert_eq!(cache_dir(Some("/c"), Some("/h")), Some(PathBuf::from("/c")));
        assert_eq!(
            cache_dir(None, Some("/h")),
            Some(PathBuf::from("/h/.triton/cache"))
        );
        assert_eq!(cache_dir(Some(""), None), None);
    }

    /// A metadata file over 16 MiB, or a Triton IR file over 64 MiB, is
    /// refused naming it: never read whole into memory.
    #[test]
    fn an_entry_file_over_its_cap_is_refused_naming_it() {
        let cache = tempfile::tempdir().unwrap();
        entry(
            cache.path(),
            "abc",
            "scale_add_kernel",
            CUDA,
            SCALE_ADD,
            b"cubin-1",
        );
        let caches = [cache.path().to_path_buf()];
        let types = |caches: &[PathBuf]| types_for(caches, "cuda", "scale_add_kernel", 6, None);
        assert!(types(&caches).is_ok());
        let json = cache.path().join("abc/scale_add_kernel.json");
        let meta = std::fs::read_to_string(&json).unwrap();
        let padded = meta.replacen(
            '{',
            &format!("{{\"pad\": \"{}\", ", "x".repeat(16 << 20)),
            1,
        );
        std::fs::write(&json, &padded).unwrap();
        let e = types(&caches).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}: larger than the 16 MiB", json.display())),
            "{e}"
        );
        std::fs::write(&json, &meta).unwrap();
        let ttir = cache.path().join("abc/scale_add_kernel.ttir");
        let mut ir = std::fs::read_to_string(&ttir).unwrap();
        let line = "#loc9 = loc(\"/work/app.py\":16:0)\n";
        ir += &line.repeat((64 << 20) / line.len() + 1);
        std::fs::write(&ttir, &ir).unwrap();
        let e = types(&caches).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}: larger than the 64 MiB", ttir.display())),
            "{e}"
        );
    }

    /// A FIFO (or anything but a regular file) under an entry's names is
    /// refused at once: never opened to wait for a writer.
    #[test]
    fn a_fifo_in_an_entry_is_refused_not_waited_on() {
        let cache = tempfile::tempdir().unwrap();
        entry(
            cache.path(),
            "abc",
            "scale_add_kernel",
            HIP,
            SCALE_ADD,
            b"hsaco-1",
        );
        let json = cache.path().join("abc/scale_add_kernel.json");
        std::fs::remove_file(&json).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&json)
            .status()
            .unwrap();
        assert!(made.success());
        let e = types_for(
            &[cache.path().to_path_buf()],
            "hip",
            "scale_add_kernel",
            6,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!("{}: not a regular file", json.display())),
            "{e}"
        );
    }

    /// Metadata fields the reader does not take are skipped however deep
    /// or long they are: the entry is read, nothing of them kept.
    #[test]
    fn metadata_fields_not_taken_are_skipped_however_deep() {
        let cache = tempfile::tempdir().unwrap();
        entry(
            cache.path(),
            "abc",
            "scale_add_kernel",
            HIP,
            SCALE_ADD,
            b"hsaco-1",
        );
        let json = cache.path().join("abc/scale_add_kernel.json");
        let meta = std::fs::read_to_string(&json).unwrap();
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let items = vec!["{}"; 1_000_000].join(",");
        let padded = meta.replacen(
            '{',
            &format!("{{\"deep\": {deep}, \"items\": [{items}], "),
            1,
        );
        std::fs::write(&json, padded).unwrap();
        let found = find(cache.path(), "scale_add_kernel");
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].backend.as_str(), found[0].arch.as_str()),
            ("hip", "gfx942")
        );
    }
}
