//! Compiling one HIP source into a host-build object: the source and the
//! headers it includes by relative path are copied, rewritten
//! (host_source.rs), into a scratch tree that mirrors their absolute paths,
//! so every relative `#include "..."` finds its rewritten copy, and `#line`
//! keeps every diagnostic pointing at the user's own files. The kernel
//! registration is appended to the copy of the source, which is compiled
//! by g++ with the host-build headers first on the include path.
//!
//! The object keeps no static initializers: what a host build's copy of
//! the source initialises dynamically is host code (HIP allows no dynamic
//! initialization of device variables), which must not run a second time
//! when the CPU runtime loads the host build (`drop_static_initializers`).
//!
//! When g++ fails in the assembler, the cause is GCN inline assembly that
//! the device-pass macros let through (a kernel body under `__gfx90a__`):
//! the source is compiled again to assembly and each rejected instruction
//! is traced back, through the `# line "file"` markers g++ writes around
//! inline assembly, to the function and source line that hold it.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::headers::IncludeDirs;
use super::host_source;

/// The C++ compiler of host builds: `DITTO_HOST_CXX`, else g++.
pub fn host_cxx() -> OsString {
    std::env::var_os("DITTO_HOST_CXX").unwrap_or_else(|| "g++".into())
}

/// Removes the object's static initializers (`.init_array`, `.ctors` and
/// their relocations): the program's own globals, constructed once already
/// by the program itself; with them go their destructors, registered by
/// the initializers. `--gc-sections` then drops the code they reached.
fn drop_static_initializers(object: &Path) -> Result<()> {
    super::embedding::run_tool(
        Command::new(super::embedding::objcopy())
            .args([
                "--remove-section=.init_array*",
                "--remove-section=.rela.init_array*",
                "--remove-section=.ctors*",
                "--remove-section=.rela.ctors*",
            ])
            .arg(object),
        &format!(
            "objcopy, removing the static initializers of {}",
            object.display()
        ),
    )
}

/// Makes the registration appended to a source from the namespaces it
/// opens (`Registration::text`).
pub type RegistrationText<'a> = &'a dyn Fn(&[String]) -> String;

pub struct HostCompile<'a> {
    pub include: &'a IncludeDirs,
    pub scratch: &'a Path,
    pub preprocessor: &'a [OsString],
    pub standard: Option<&'a str>,
    pub gfx942: bool,
}

impl HostCompile<'_> {
    /// Compiles `source` into `object`, with the registration appended:
    /// `registration` makes it from the namespaces the source opens.
    pub fn compile(
        &self,
        source: &Path,
        registration: RegistrationText<'_>,
        object: &Path,
    ) -> Result<()> {
        let mirror_root = self.scratch.join("src");
        let mut mirrored = HashSet::new();
        let copy = mirror(source, &mirror_root, &mut mirrored, Some(registration))?;
        let mut command = self.command(source);
        command.arg("-c").arg(&copy).arg("-o").arg(object);
        let output = command
            .output()
            .with_context(|| format!("cannot run {:?} for the host build", host_cxx()))?;
        if output.status.success() {
            return drop_static_initializers(object);
        }
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if stderr.contains("Assembler messages")
            && let Ok(explained) = self.explain_assembly(source, &copy, &stderr)
            && !explained.is_empty()
        {
            bail!(
                "the host build of {} cannot run on ditto's CPU runtime:\n{}",
                source.display(),
                explained
            );
        }
        bail!(
            "the host build of {} failed (g++ compiles the source as hipcc's device pass sees it, \
             for ditto's CPU runtime; the hipcc build itself succeeded):\n{}",
            source.display(),
            stderr.trim_end()
        )
    }

    fn command(&self, source: &Path) -> Command {
        let mut command = Command::new(host_cxx());
        command
            .arg(format!("-std={}", self.standard.unwrap_or("c++17")))
            .args([
                "-O2",
                "-fPIC",
                "-fno-gnu-unique",
                "-fvisibility=hidden",
                "-ffunction-sections",
                "-fdata-sections",
                "-w",
            ])
            .arg("-I")
            .arg(&self.include.host)
            .arg("-I")
            .arg(&self.include.common)
            .arg("-include")
            .arg(self.include.host.join("ditto_hip_prelude.h"));
        if self.gfx942 {
            command.arg("-DDITTO_HIP_HOST_ARCH_GFX942");
        }
        if let Some(dir) = source.parent().filter(|d| !d.as_os_str().is_empty()) {
            command.arg("-iquote").arg(dir);
        }
        command.args(self.preprocessor);
        for rocm in rocm_include_dirs() {
            command.arg("-idirafter").arg(rocm);
        }
        command
            .arg("-Dmain=ditto_hip_host_build_main")
            .args(["-x", "c++"]);
        command
    }

    /// Each inline-assembly statement the assembler rejects, as
    /// "  `function` (file:line): instruction — error".
    fn explain_assembly(&self, source: &Path, copy: &Path, errors: &str) -> Result<String> {
        let assembly = self.scratch.join("explain.s");
        let status = self
            .command(source)
            .arg("-S")
            .arg(copy)
            .arg("-o")
            .arg(&assembly)
            .output()?;
        if !status.status.success() {
            bail!("no assembly");
        }
        let text = std::fs::read_to_string(&assembly)?;
        Ok(explain(&text, errors))
    }
}

/// Maps assembler errors (`file:line: Error: ...`: the assembler follows
/// the `# line "file"` markers g++ writes around inline assembly, so it
/// names the source line) onto the function of `assembly` that holds the
/// marker.
pub fn explain(assembly: &str, errors: &str) -> String {
    let lines: Vec<&str> = assembly.lines().collect();
    let mut seen = HashSet::new();
    let mut out = String::new();
    for error in errors.lines() {
        let Some((place, message)) = error.split_once(": Error:") else {
            continue;
        };
        let Some((file, number)) = place.rsplit_once(':') else {
            continue;
        };
        let Ok(number) = number.trim().parse::<usize>() else {
            continue;
        };
        let marker = format!("# {number} \"{file}\" 1");
        let at = lines.iter().position(|l| l.trim() == marker);
        let function = at
            .and_then(|at| {
                lines[..at].iter().rev().find_map(|l| {
                    let rest = l.trim().strip_prefix(".type")?;
                    let (symbol, kind) = rest.trim().split_once(',')?;
                    kind.contains("@function")
                        .then(|| symbol.trim().to_string())
                })
            })
            .map(|f| ditto_kernels::KernelNames::new(&f).signature)
            .unwrap_or_else(|| "a function".to_string());
        let instruction = at
            .and_then(|at| lines.get(at + 1))
            .map(|l| l.trim())
            .unwrap_or("");
        if seen.insert((function.clone(), place.to_string())) {
            out.push_str(&format!(
                "  `{function}` ({file}:{number}) has GCN inline assembly (`{instruction}`: {}), which \
                 only an AMD GPU runs (the host build compiles what hipcc's device pass compiles for \
                 the GPU); give it a C++ path the host build can take, or run this program on a GPU\n",
                message.trim()
            ));
        }
    }
    out
}

/// ROCm's include directory, where HIP's own headers are when they are not
/// in /usr/include: ROCM_PATH, HIP_PATH, then /opt/rocm.
fn rocm_include_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for root in [std::env::var_os("ROCM_PATH"), std::env::var_os("HIP_PATH")]
        .into_iter()
        .flatten()
        .map(PathBuf::from)
        .chain([PathBuf::from("/opt/rocm")])
    {
        let include = root.join("include");
        if include.join("hip/hip_runtime_api.h").is_file() && !dirs.contains(&include) {
            dirs.push(include);
        }
    }
    dirs
}

/// Copies `file` (rewritten) to its place under `root`, and every file it
/// includes by a relative quoted path; returns the copy's path.
fn mirror(
    file: &Path,
    root: &Path,
    done: &mut HashSet<PathBuf>,
    appended: Option<RegistrationText<'_>>,
) -> Result<PathBuf> {
    let absolute = std::fs::canonicalize(file)
        .with_context(|| format!("cannot find the HIP source {}", file.display()))?;
    let copy = root.join(absolute.strip_prefix("/").unwrap_or(&absolute));
    if !done.insert(absolute.clone()) {
        return Ok(copy);
    }
    let text =
        std::fs::read(&absolute).with_context(|| format!("cannot read {}", absolute.display()))?;
    let text = String::from_utf8_lossy(&text);
    let (rewritten, rewrites) = host_source::rewrite(&text);
    let path_text = absolute
        .to_string_lossy()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let mut body = format!("#line 1 \"{path_text}\"\n{rewritten}");
    if let Some(extra) = appended {
        body.push_str(&extra(&rewrites.namespaces));
    }
    if let Some(parent) = copy.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&copy, body)?;
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    for included in quoted_includes(&text) {
        let candidate = dir.join(&included);
        if candidate.is_file() {
            mirror(&candidate, root, done, None)?;
        }
    }
    Ok(copy)
}

/// The paths of `#include "..."` lines.
fn quoted_includes(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix('#')?.trim_start();
            let rest = rest.strip_prefix("include")?.trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest.split_once('"')?.0.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_instruction_is_traced_to_its_function_and_source_line() {
        let assembly = "\t.text\n\t.globl\t_Z6kernelPf\n\t.type\t_Z6kernelPf, @function\n_Z6kernelPf:\n#APP\n# 12 \"/src/app.hip\" 1\n\tv_add_f32 v0, v1, v2\n# 0 \"\" 2\n#NO_APP\n\tret\n";
        let errors = "/src/app.hip: Assembler messages:\n/src/app.hip:12: Error: no such instruction: `v_add_f32 v0,v1,v2'\n";
        let text = explain(assembly, errors);
        assert!(
            text.contains("`kernel(float*)` (/src/app.hip:12)"),
            "{text}"
        );
        assert!(text.contains("v_add_f32 v0, v1, v2"), "{text}");
        assert!(text.contains("no such instruction"), "{text}");
    }

    #[test]
    fn quoted_includes_are_found_and_angle_ones_left() {
        let found = quoted_includes(
            "#include <hip/hip_runtime.h>\n  #  include \"../Common/util.hpp\"\n#include\"a.h\"\n",
        );
        assert_eq!(
            found,
            vec!["../Common/util.hpp".to_string(), "a.h".to_string()]
        );
    }
}
