//! Compiling one HIP source into a host-build object: the source and the
//! headers it includes by relative path are copied, rewritten
//! (host_source.rs), into a scratch tree that mirrors their absolute paths,
//! so every relative `#include "..."` finds its rewritten copy, and `#line`
//! keeps every diagnostic pointing at the user's own files. The kernel
//! registration is appended to the copy of the source, which is compiled
//! by g++ with the host-build headers first on the include path.
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

pub struct HostCompile<'a> {
    pub include: &'a IncludeDirs,
    pub scratch: &'a Path,
    pub preprocessor: &'a [OsString],
    pub standard: Option<&'a str>,
    pub gfx942: bool,
}

impl HostCompile<'_> {
    /// Compiles `source` with `registration` appended into `object`.
    pub fn compile(&self, source: &Path, registration: &str, object: &Path) -> Result<()> {
        let mirror_root = self.scratch.join("src");
        let mut mirrored = HashSet::new();
        let copy = mirror(source, &mirror_root, &mut mirrored, Some(registration))?;
        let mut command = self.command(source);
        command.arg("-c").arg(&copy).arg("-o").arg(object);
        let output = command
            .output()
            .with_context(|| format!("cannot run {:?} for the host build", host_cxx()))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if stderr.contains("Assembler messages") {
            if let Ok(explained) = self.explain_assembly(source, &copy) {
                if !explained.is_empty() {
                    bail!(
                        "the host build of {} cannot run on ditto's CPU runtime:\n{}",
                        source.display(),
                        explained
                    );
                }
            }
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
            .arg(&self.include.common);
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
    fn explain_assembly(&self, source: &Path, copy: &Path) -> Result<String> {
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
        let assembled = Command::new("as")
            .arg(&assembly)
            .arg("-o")
            .arg(self.scratch.join("explain.o"))
            .output()?;
        let text = std::fs::read_to_string(&assembly)?;
        let errors = String::from_utf8_lossy(&assembled.stderr).into_owned();
        Ok(explain(&text, &errors))
    }
}

/// Maps `as` error lines (`file.s:N: Error: ...`) onto the function and the
/// source line of the inline assembly at line N of `assembly`.
pub fn explain(assembly: &str, errors: &str) -> String {
    let lines: Vec<&str> = assembly.lines().collect();
    let mut seen = HashSet::new();
    let mut out = String::new();
    for error in errors.lines() {
        let mut parts = error.splitn(3, ':');
        let (Some(_), Some(number), Some(message)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(number) = number.trim().parse::<usize>() else {
            continue;
        };
        let Some(message) = message.trim().strip_prefix("Error:") else {
            continue;
        };
        let index = number.saturating_sub(1).min(lines.len().saturating_sub(1));
        let mut function = None;
        let mut place = None;
        for line in lines[..=index].iter().rev() {
            let t = line.trim();
            if place.is_none() {
                if let Some(marker) = line_marker(t) {
                    place = Some(marker);
                }
            }
            if let Some(rest) = t.strip_prefix(".type") {
                if let Some((symbol, kind)) = rest.trim().split_once(',') {
                    if kind.contains("@function") {
                        function = Some(symbol.trim().to_string());
                        break;
                    }
                }
            }
        }
        let function = function
            .map(|f| ditto_kernels::KernelNames::new(&f).signature)
            .unwrap_or_else(|| "a function".to_string());
        let place = place.unwrap_or_else(|| "unknown line".to_string());
        let instruction = lines.get(number - 1).map(|l| l.trim()).unwrap_or("");
        if seen.insert((function.clone(), place.clone())) {
            out.push_str(&format!(
                "  `{function}` ({place}) has GCN inline assembly (`{instruction}`: {}), which only an \
                 AMD GPU runs; the host build sees the code hipcc's device pass compiles for gfx90a. \
                 Give it a path in C++ (e.g. under `#if !defined(__gfx90a__)`-style guards that the host \
                 build also takes) or run this program on a GPU\n",
                message.trim()
            ));
        }
    }
    out
}

/// `# 12 "file.hip" 1` (the marker g++ writes before inline assembly) as
/// "file.hip:12".
fn line_marker(line: &str) -> Option<String> {
    let rest = line.strip_prefix('#')?.trim_start();
    let (number, rest) = rest.split_once(' ')?;
    let number: usize = number.parse().ok()?;
    let file = rest.trim().strip_prefix('"')?;
    let (file, _) = file.split_once('"')?;
    Some(format!("{file}:{number}"))
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
    appended: Option<&str>,
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
    let (rewritten, _) = host_source::rewrite(&text);
    let path_text = absolute
        .to_string_lossy()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let mut body = format!("#line 1 \"{path_text}\"\n{rewritten}");
    if let Some(extra) = appended {
        body.push_str(extra);
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
        let errors = "/tmp/explain.s: Assembler messages:\n/tmp/explain.s:7: Error: no such instruction: `v_add_f32 v0,v1,v2'\n";
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
