//! What a hipcc command line asks for, as far as the host build cares: the
//! sources it compiles, the objects and archives it links, where the output
//! goes, and the flags that change how a source reads (include paths,
//! macros, language standard, target architecture). Everything else is
//! hipcc's business and is passed to hipcc untouched.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Default, PartialEq)]
pub struct HipccArgs {
    /// HIP sources compiled by this command, in order.
    pub sources: Vec<PathBuf>,
    /// Objects and archives this command links.
    pub inputs: Vec<PathBuf>,
    /// `-o`.
    pub output: Option<PathBuf>,
    /// `-c`: compile only, one object per source.
    pub compile_only: bool,
    /// `-E`, `-S`, `-M`/`-MM`, `--version`, `-fsyntax-only`...: no object
    /// and no program is made, so no host build either.
    pub no_output: bool,
    /// `-fgpu-rdc`: objects hold device bitcode, not code objects.
    pub relocatable_device_code: bool,
    /// `-shared`.
    pub shared: bool,
    /// `--emit-static-lib`: the output is a static library of the sources
    /// (hipcc compiles and archives in one step); the host builds travel in
    /// it as one extra member per source (`embedding::add_to_archive`).
    pub static_library: bool,
    /// `--genco`: the output is a code object the program loads itself
    /// (hipModuleLoad); its host build is `<output>.host.so`.
    pub code_object_only: bool,
    /// `-L` directories and `-l` names, to find the static libraries a link
    /// takes.
    pub link_dirs: Vec<PathBuf>,
    pub libs: Vec<String>,
    /// Flags for g++ that change how the source reads: -I, -isystem,
    /// -iquote, -idirafter, -include, -D, -U.
    pub preprocessor: Vec<OsString>,
    /// `-std=...` when it names C++17 or later.
    pub standard: Option<String>,
    /// `--offload-arch=` / `--amdgpu-target=` values.
    pub offload_archs: Vec<String>,
    /// Flags for a device-only recompile of one source (everything that is
    /// neither an input, an output nor a link flag).
    pub compile_flags: Vec<OsString>,
}

const SOURCE_EXTENSIONS: &[&str] = &["hip", "cu", "cpp", "cc", "cxx", "c++", "C", "cp", "CPP"];

/// Flags whose value is the next argument.
const WITH_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-include",
    "-D",
    "-U",
    "-x",
    "-L",
    "-l",
    "-MF",
    "-MT",
    "-MQ",
    "-Xlinker",
    "-Xclang",
    "-Xoffload-linker",
    "-Xarch_device",
    "-Xarch_host",
    "-target",
    "--hip-path",
    "--rocm-path",
    "--hip-device-lib-path",
];

pub fn parse(args: &[OsString]) -> HipccArgs {
    let mut parsed = HipccArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let text = arg.to_string_lossy().into_owned();
        let value = || args.get(i + 1).cloned();
        if WITH_VALUE.contains(&text.as_str()) {
            let v = value();
            match text.as_str() {
                "-o" => parsed.output = v.map(PathBuf::from),
                "-I" | "-isystem" | "-iquote" | "-idirafter" | "-include" | "-D" | "-U" => {
                    parsed.preprocessor.push(arg.clone());
                    parsed.compile_flags.push(arg.clone());
                    if let Some(v) = v {
                        parsed.preprocessor.push(v.clone());
                        parsed.compile_flags.push(v);
                    }
                }
                "-L" => parsed.link_dirs.extend(v.map(PathBuf::from)),
                "-l" => parsed
                    .libs
                    .extend(v.map(|v| v.to_string_lossy().into_owned())),
                "-Xlinker" | "-Xoffload-linker" => {}
                "-MF" | "-MT" | "-MQ" => {}
                _ => {
                    parsed.compile_flags.push(arg.clone());
                    if let Some(v) = v {
                        parsed.compile_flags.push(v);
                    }
                }
            }
            i += 2;
            continue;
        }
        i += 1;
        match text.as_str() {
            "-c" => parsed.compile_only = true,
            "-E" | "-S" | "-M" | "-MM" | "-fsyntax-only" | "--version" | "-###" | "--help" => {
                parsed.no_output = true
            }
            "-fgpu-rdc" => {
                parsed.relocatable_device_code = true;
                parsed.compile_flags.push(arg.clone());
            }
            "-fno-gpu-rdc" => {
                parsed.relocatable_device_code = false;
                parsed.compile_flags.push(arg.clone());
            }
            "-shared" => parsed.shared = true,
            "--emit-static-lib" => parsed.static_library = true,
            "--genco" => parsed.code_object_only = true,
            "-MD" | "-MMD" | "-MP" => {}
            _ if text.starts_with("-o") && text.len() > 2 => {
                parsed.output = Some(PathBuf::from(&text[2..]));
            }
            _ if ["-I", "-D", "-U"]
                .iter()
                .any(|p| text.starts_with(p) && text.len() > 2) =>
            {
                parsed.preprocessor.push(arg.clone());
                parsed.compile_flags.push(arg.clone());
            }
            _ if text.starts_with("-std=") => {
                let standard = &text[5..];
                if cxx17_or_later(standard) {
                    parsed.standard = Some(standard.to_string());
                }
                parsed.compile_flags.push(arg.clone());
            }
            _ if text.starts_with("--offload-arch=") || text.starts_with("--amdgpu-target=") => {
                let value = &text[text.find('=').unwrap_or(0) + 1..];
                parsed
                    .offload_archs
                    .extend(value.split(',').map(|a| a.to_string()));
                parsed.compile_flags.push(arg.clone());
            }
            _ if text.starts_with("-L") => parsed.link_dirs.push(PathBuf::from(&text[2..])),
            _ if text.starts_with("-l") => parsed.libs.push(text[2..].to_string()),
            _ if text.starts_with("-Wl,") => {}
            _ if text.starts_with('-') => parsed.compile_flags.push(arg.clone()),
            _ => {
                let path = PathBuf::from(arg);
                let extension = path
                    .extension()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if SOURCE_EXTENSIONS.contains(&extension.as_str()) {
                    parsed.sources.push(path);
                } else if matches!(extension.as_str(), "o" | "obj" | "a" | "lo") {
                    parsed.inputs.push(path);
                }
            }
        }
    }
    parsed
}

/// Whether a `-std=` value is C++17 or later (the host build's kernel
/// language needs C++17; an older or a C standard is replaced by c++17).
fn cxx17_or_later(standard: &str) -> bool {
    let Some(version) = standard
        .strip_prefix("c++")
        .or_else(|| standard.strip_prefix("gnu++"))
    else {
        return false;
    };
    matches!(
        version,
        "17" | "1z" | "20" | "2a" | "23" | "2b" | "26" | "2c"
    )
}

impl HipccArgs {
    /// The object hipcc writes for `source` under `-c`: `-o` when there is
    /// one source, else the source's stem with `.o` in the working directory.
    pub fn object_of(&self, source: &std::path::Path) -> PathBuf {
        if let (Some(out), 1) = (&self.output, self.sources.len()) {
            return out.clone();
        }
        let stem = source.file_stem().unwrap_or_default();
        PathBuf::from(stem).with_extension("o")
    }

    /// The static libraries `-l` names that the `-L` directories hold.
    pub fn static_libs(&self) -> Vec<PathBuf> {
        self.libs
            .iter()
            .filter_map(|name| {
                self.link_dirs
                    .iter()
                    .map(|dir| dir.join(format!("lib{name}.a")))
                    .find(|path| path.is_file())
            })
            .collect()
    }

    /// The program or library a link writes.
    pub fn linked_output(&self) -> PathBuf {
        self.output
            .clone()
            .unwrap_or_else(|| PathBuf::from("a.out"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_one_step_build_names_its_source_output_and_flags() {
        let a = parse(&os(&[
            "--offload-arch=gfx90a",
            "-O2",
            "-std=c++20",
            "-I",
            "../Common",
            "-DN=4",
            "main.hip",
            "-o",
            "app",
            "-lm",
        ]));
        assert_eq!(a.sources, vec![PathBuf::from("main.hip")]);
        assert_eq!(a.output, Some(PathBuf::from("app")));
        assert!(!a.compile_only);
        assert_eq!(a.standard.as_deref(), Some("c++20"));
        assert_eq!(a.offload_archs, vec!["gfx90a".to_string()]);
        assert_eq!(a.preprocessor, os(&["-I", "../Common", "-DN=4"]));
        assert_eq!(
            a.compile_flags,
            os(&[
                "--offload-arch=gfx90a",
                "-O2",
                "-std=c++20",
                "-I",
                "../Common",
                "-DN=4"
            ])
        );
    }

    #[test]
    fn compile_and_link_steps_are_told_apart() {
        let c = parse(&os(&["-c", "-fgpu-rdc", "lib.hip", "-olib.o"]));
        assert!(c.compile_only && c.relocatable_device_code);
        assert_eq!(
            c.object_of(&PathBuf::from("lib.hip")),
            PathBuf::from("lib.o")
        );
        let l = parse(&os(&["main.o", "libdev.a", "-L.", "-ldev", "-o", "app"]));
        assert!(l.sources.is_empty());
        assert_eq!(
            l.inputs,
            vec![PathBuf::from("main.o"), PathBuf::from("libdev.a")]
        );
        assert_eq!(l.linked_output(), PathBuf::from("app"));
        assert_eq!(l.link_dirs, vec![PathBuf::from(".")]);
        assert_eq!(l.libs, vec!["dev".to_string()]);
        let two = parse(&os(&["-c", "a.hip", "dir/b.cu"]));
        assert_eq!(
            two.object_of(&PathBuf::from("dir/b.cu")),
            PathBuf::from("b.o")
        );
    }

    #[test]
    fn preprocessing_and_version_queries_make_no_host_build() {
        assert!(parse(&os(&["--version"])).no_output);
        assert!(parse(&os(&["-E", "a.hip"])).no_output);
        assert_eq!(parse(&os(&["-std=c++14", "a.hip"])).standard, None);
    }
}
