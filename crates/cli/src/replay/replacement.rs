//! Where a replacement kernel comes from (`--kernel-object FILE`: a code
//! object; `--from PROGRAM`: the kernel of the same symbol in another
//! program's embedded device code, read without running it), and the
//! check that it takes its arguments as the captured kernel did: a
//! replacement of another layout is refused before anything runs, naming
//! the arguments that differ. On ditto's CPU runtime the replacement's
//! host build (`<program>.host.so`, beside the file the user named) goes
//! with it, as a copy in replay's work directory. Every file is read by
//! [`super::inputs`]' rule.

use super::ReplayOptions;
use super::inputs::{host_build_copy, named_file};
use super::plan::DispatchPlan;
use anyhow::{Context, Result, bail};
use ditto_kernels::{CodeObjectKernel, MetadataArg, device_code_objects, parse_code_object};
use std::path::{Path, PathBuf};

/// A replacement kernel ready to load.
#[derive(Debug, Clone)]
pub struct Replacement {
    pub code_object: PathBuf,
    /// Where it came from, for messages (`--kernel-object` or `--from`'s path).
    pub source: String,
    /// Its host build, for ditto's CPU runtime: a copy in the work
    /// directory of the one beside the file the user named.
    pub host_build: Option<PathBuf>,
}

/// The replacement the options name, checked against `original` (the
/// captured code object, as read); `None` replays the captured kernel.
pub fn choose(
    opts: &ReplayOptions,
    original: Option<&[u8]>,
    plan: &DispatchPlan,
    work: &Path,
) -> Result<Option<Replacement>> {
    let symbol = &plan.launch.symbol;
    let original_kernel = original.and_then(|bytes| kernel_in(bytes, symbol));
    let original_target = original.and_then(target_of);
    let (file, what) = match (&opts.kernel_object, &opts.from) {
        (Some(_), Some(_)) => bail!("give --kernel-object or --from, not both"),
        (None, None) => return Ok(None),
        (Some(file), None) => (file, "a code object (--kernel-object)"),
        (None, Some(program)) => (program, "a program (--from)"),
    };
    let bytes = named_file(file, what)?;
    let source = file.display().to_string();
    let captured_cubin = original.filter(|o| super::cuda_child::is_cubin(o));
    let code = if let (Some(captured), Some(program)) = (captured_cubin, &opts.from) {
        // A CUDA program: its cubins as the toolkit's cuobjdump extracts them.
        cuda_program_cubin(program, symbol, captured, work)?
    } else if super::cuda_child::is_cubin(&bytes) {
        // A CUDA cubin: the kernel by name (its parameter layout is the
        // driver's, checked when it is launched).
        let functions = ditto_kernels::elf_function_names(&bytes).unwrap_or_default();
        if !functions.iter().any(|f| f == symbol) {
            bail!("{source} holds no kernel `{symbol}`; a replacement must keep its name");
        }
        bytes
    } else {
        let (code, kernel) = pick(&bytes, symbol, original_target.as_deref(), &source)?;
        check_layout(symbol, original_kernel.as_ref(), &kernel, &source)?;
        code
    };
    // The runtime's reader takes one code object, not a bundle.
    let path = work.join("replacement.co");
    std::fs::write(&path, code)?;
    let replacement = Replacement {
        code_object: path,
        source,
        host_build: host_build_beside(file, work)?,
    };
    Ok(Some(replacement))
}

/// The cubin of CUDA `program` that defines `symbol` for the captured
/// cubin's GPU (`EF_CUDA_SM`, the low byte of `e_flags`), extracted with
/// the CUDA toolkit's `cuobjdump -xelf all` (`DITTO_CUOBJDUMP`, else on
/// the PATH or under `$CUDA_HOME`/`/usr/local/cuda`). The program is not run.
fn cuda_program_cubin(
    program: &Path,
    symbol: &str,
    captured: &[u8],
    work: &Path,
) -> Result<Vec<u8>> {
    let program = std::path::absolute(program)?;
    let dir = work.join("cubins");
    std::fs::create_dir_all(&dir)?;
    let candidates: Vec<PathBuf> = match std::env::var_os("DITTO_CUOBJDUMP") {
        Some(tool) => vec![PathBuf::from(tool)],
        None => {
            let mut v = vec![PathBuf::from("cuobjdump")];
            for home in std::env::var_os("CUDA_HOME")
                .map(PathBuf::from)
                .into_iter()
                .chain([PathBuf::from("/usr/local/cuda")])
            {
                v.push(home.join("bin/cuobjdump"));
            }
            v
        }
    };
    let mut ran = None;
    for tool in &candidates {
        if let Ok(out) = std::process::Command::new(tool)
            .args(["-xelf", "all"])
            .arg(&program)
            .current_dir(&dir)
            .output()
        {
            ran = Some((tool.clone(), out));
            break;
        }
    }
    let Some((tool, out)) = ran else {
        bail!(
            "--from a CUDA program needs the CUDA toolkit's cuobjdump to read its device code \
             (put it on the PATH or name it in DITTO_CUOBJDUMP), or give the replacement's cubin \
             with --kernel-object"
        );
    };
    if !out.status.success() {
        bail!(
            "{} -xelf all {} failed: {}",
            tool.display(),
            program.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let sm = |elf: &[u8]| elf.get(48).copied();
    let mut defining = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let bytes = std::fs::read(entry?.path())?;
        let defines = super::cuda_child::is_cubin(&bytes)
            && ditto_kernels::elf_function_names(&bytes)
                .unwrap_or_default()
                .iter()
                .any(|f| f == symbol);
        if defines {
            defining.push(bytes);
        }
    }
    if defining.is_empty() {
        bail!(
            "{} embeds no kernel `{symbol}` in its device code; --from needs a program built \
             from a source that defines the kernel under the same name and signature",
            program.display()
        );
    }
    let count = defining.len();
    defining
        .into_iter()
        .find(|c| sm(c) == sm(captured))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} defines `{symbol}` in {count} cubin(s), none for the captured kernel's GPU \
                 (sm {:?}): build it for that GPU",
                program.display(),
                sm(captured)
            )
        })
}

/// The code object of `bytes` (a code object, an offload bundle such as
/// `hipcc --genco` writes, or a program's fat binary) that holds `symbol`,
/// for the captured kernel's target where there are several; or why none.
fn pick(
    bytes: &[u8],
    symbol: &str,
    captured_target: Option<&str>,
    source: &str,
) -> Result<(Vec<u8>, CodeObjectKernel)> {
    let objects = device_code_objects(bytes)
        .with_context(|| format!("reading the device code of {source}"))?;
    let with_kernel: Vec<_> = objects
        .iter()
        .filter_map(|o| Some((o, kernel_in(o.bytes, symbol)?)))
        .collect();
    let Some((first, _)) = with_kernel.first() else {
        let held: Vec<String> = objects.iter().map(|o| kernel_list(o.bytes)).collect();
        bail!(
            "{source} holds no kernel `{symbol}` ({}) in its device code (it holds {}); a \
             replacement must keep the captured kernel's name and signature",
            ditto_kernels::KernelNames::new(symbol.trim_end_matches(".kd")).demangled,
            if held.is_empty() {
                "no code object".to_string()
            } else {
                held.join("; ")
            }
        );
    };
    let same_target = with_kernel
        .iter()
        .find(|(o, _)| match (captured_target, o.target()) {
            (Some(a), Some(b)) => processor(a) == processor(&b),
            _ => true,
        });
    match same_target {
        Some((o, kernel)) => Ok((o.bytes.to_vec(), kernel.clone())),
        None => {
            check_target(captured_target, first.target().as_deref(), source)?;
            bail!("{source} has no code object for the captured kernel's target")
        }
    }
}

/// The GPU a code object is built for (`gfx90a:sramecc+:xnack-`).
fn target_of(bytes: &[u8]) -> Option<String> {
    device_code_objects(bytes).ok()?.first()?.target()
}

/// The processor of a target, without its features (`gfx90a`).
fn processor(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}

/// Refuses a replacement built for another GPU than the captured kernel.
fn check_target(captured: Option<&str>, replacement: Option<&str>, source: &str) -> Result<()> {
    if let (Some(a), Some(b)) = (captured, replacement)
        && processor(a) != processor(b)
    {
        bail!(
            "{source} is built for {b}, but the captured kernel is {a} code: a replay loads the \
             replacement on the captured kernel's GPU; build it for that target (hipcc \
             --offload-arch={})",
            processor(a)
        );
    }
    Ok(())
}

/// `<file>.host.so` beside the file the user named, when it exists: read
/// by the rule of every file replay reads, copied into `work`.
fn host_build_beside(file: &Path, work: &Path) -> Result<Option<PathBuf>> {
    let mut name = file.as_os_str().to_owned();
    name.push(".host.so");
    let path = PathBuf::from(name);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = named_file(&path, "the replacement's host build")?;
    host_build_copy(&bytes, work, "replacement.host.so").map(Some)
}

/// The kernel `symbol` as the code object's metadata describes it.
fn kernel_in(bytes: &[u8], symbol: &str) -> Option<CodeObjectKernel> {
    parse_code_object(bytes)
        .ok()
        .flatten()?
        .into_iter()
        .find(|k| k.symbol == symbol)
}

fn kernel_list(bytes: &[u8]) -> String {
    match parse_code_object(bytes) {
        Ok(Some(kernels)) if !kernels.is_empty() => kernels
            .iter()
            .map(|k| format!("`{}`", k.name))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "no kernel ditto can read".into(),
    }
}

fn describe_arg(a: &MetadataArg) -> String {
    format!(
        "{} of {} bytes at offset {}",
        a.value_kind, a.size, a.offset
    )
}

/// Refuses a replacement whose explicit arguments differ from the
/// captured kernel's in number, place, size or kind.
fn check_layout(
    symbol: &str,
    original: Option<&CodeObjectKernel>,
    replacement: &CodeObjectKernel,
    source: &str,
) -> Result<()> {
    let Some(original) = original else {
        return Ok(());
    };
    let (a, b) = (original.explicit_args(), replacement.explicit_args());
    let mut differences = Vec::new();
    for i in 0..a.len().max(b.len()) {
        match (a.get(i), b.get(i)) {
            (Some(x), Some(y))
                if x.offset == y.offset && x.size == y.size && x.value_kind == y.value_kind => {}
            (x, y) => differences.push(format!(
                "argument {i}: {} in the capture, {} in the replacement",
                x.map_or("absent".to_string(), describe_arg),
                y.map_or("absent".to_string(), describe_arg)
            )),
        }
    }
    if !differences.is_empty() {
        bail!(
            "the replacement `{symbol}` from {source} takes its arguments differently from the \
             captured kernel, so the captured argument bytes cannot be given to it:\n  {}\n\
             a replay needs the same argument layout (change the kernel's signature back, or \
             capture the new program with `ditto run --capture replay`)",
            differences.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(offset: u64, size: u64, kind: &str) -> MetadataArg {
        MetadataArg {
            offset,
            size,
            value_kind: kind.into(),
            address_space: None,
            name: None,
            access: None,
            is_const: false,
        }
    }

    fn kernel(args: Vec<MetadataArg>) -> CodeObjectKernel {
        CodeObjectKernel {
            name: "scale".into(),
            symbol: "scale.kd".into(),
            kernarg_segment_size: 64,
            args,
            dwarf_params: None,
        }
    }

    #[test]
    fn a_replacement_of_another_argument_layout_is_refused_naming_the_arguments() {
        let captured = kernel(vec![
            arg(0, 8, "global_buffer"),
            arg(8, 4, "by_value"),
            arg(16, 8, "hidden_block_count_x"),
        ]);
        // Hidden arguments may differ; the kernel's own may not.
        let same = kernel(vec![arg(0, 8, "global_buffer"), arg(8, 4, "by_value")]);
        assert!(check_layout("scale.kd", Some(&captured), &same, "new.co").is_ok());
        let other = kernel(vec![arg(0, 8, "global_buffer"), arg(8, 8, "global_buffer")]);
        let e = check_layout("scale.kd", Some(&captured), &other, "new.co")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "argument 1: by_value of 4 bytes at offset 8 in the capture, \
                        global_buffer of 8 bytes at offset 8 in the replacement"
            ) && e.contains("new.co")
                && !e.contains("argument 0"),
            "{e}"
        );
        let longer = kernel(vec![
            arg(0, 8, "global_buffer"),
            arg(8, 4, "by_value"),
            arg(12, 4, "by_value"),
        ]);
        let e = check_layout("scale.kd", Some(&captured), &longer, "p")
            .unwrap_err()
            .to_string();
        assert!(e.contains("argument 2: absent in the capture"), "{e}");
        // No metadata for the captured kernel: nothing to check against.
        assert!(check_layout("scale.kd", None, &other, "p").is_ok());
    }
}
