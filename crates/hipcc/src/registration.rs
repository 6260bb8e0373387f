//! Which kernels a host build registers: every kernel of the source's own
//! code objects, named as C++ from its mangled name, each line of the form
//! the kernel language takes (DITTO_KERNEL_AS with the kernel's type, so
//! that overloads and template instances are told apart). An extern "C"
//! kernel's symbol carries no namespace, so its line is placed where every
//! namespace of the source is visible (`text`).

use std::collections::BTreeSet;

use ditto_kernels::{BundledCodeError, KernelNames};

/// A kernel the host build cannot name, and why.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unnamable {
    pub kernel: String,
    pub why: &'static str,
}

#[derive(Debug, Default)]
pub struct Registration {
    /// `DITTO_KERNEL...` lines, sorted, without repeats.
    pub lines: BTreeSet<String>,
    pub unnamable: BTreeSet<Unnamable>,
}

/// What the host build of one source registers: its kernels and its
/// device variables (symbol names as in hipcc's code object).
/// `unconfirmed_variables`: read-only symbols of a code object, which may
/// be `__constant__` variables or `constexpr` class members; the device
/// pass's IR says which (`confirm_variables`).
#[derive(Debug, Default)]
pub struct DeviceCode {
    pub kernels: Vec<KernelNames>,
    pub variables: Vec<String>,
    pub unconfirmed_variables: Vec<String>,
}

impl DeviceCode {
    /// Keeps the unconfirmed variables that `ir` (the same source's device
    /// pass) lists as device variables.
    pub fn confirm_variables(&mut self, ir: &DeviceCode) {
        for name in std::mem::take(&mut self.unconfirmed_variables) {
            if ir.variables.contains(&name) && !self.variables.contains(&name) {
                self.variables.push(name);
            }
        }
    }
}

/// The kernels and variables of every AMDGPU code object in `bytes` (an
/// executable, an object, an offload bundle or a code object). A file
/// without device code has none; `Err` is `ditto-kernels`' reason.
pub fn device_code_in(bytes: &[u8]) -> Result<DeviceCode, BundledCodeError> {
    let code = ditto_kernels::bundled_device_code(bytes)?;
    Ok(DeviceCode {
        kernels: code.kernels.iter().map(|k| KernelNames::new(k)).collect(),
        variables: code.variables,
        unconfirmed_variables: code.read_only_variables,
    })
}

/// The kernels (`define ... amdgpu_kernel ... @name(`) and device
/// variables (`@name = ... addrspace(1|4) ... global|constant`, not
/// internal) of a
/// device pass's LLVM IR text.
pub fn device_code_in_ir(text: &str) -> DeviceCode {
    let variables = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('@')?;
            let (name, definition) = rest.split_once(" = ")?;
            // `externally_initialized`: what the host may write through
            // HIP (`__device__`, `__constant__`), not a `constexpr` the
            // device pass emitted.
            let device = (definition.contains("addrspace(1) ")
                || definition.contains("addrspace(4) "))
                && definition.contains("externally_initialized");
            let local = ["internal ", "private ", "external ", "extern_weak "]
                .iter()
                .any(|k| definition.starts_with(k) || definition.contains(&format!(" {k}")));
            (device
                && !local
                && (definition.contains("global ") || definition.contains("constant ")))
            .then(|| name.trim_matches('"').to_string())
        })
        .filter(|n| !n.starts_with("__hip_cuid") && !n.starts_with("llvm."))
        .collect();
    DeviceCode {
        kernels: kernels_in_ir(text),
        variables,
        unconfirmed_variables: Vec::new(),
    }
}

fn kernels_in_ir(text: &str) -> Vec<KernelNames> {
    text.lines()
        .filter(|l| l.starts_with("define ") && l.contains(" amdgpu_kernel "))
        .filter_map(|l| {
            let at = l.find(" @")? + 2;
            let rest = &l[at..];
            let name = match rest.strip_prefix('"') {
                Some(quoted) => quoted.split('"').next()?,
                None => rest.split('(').next()?,
            };
            Some(KernelNames::new(name))
        })
        .collect()
}

impl Registration {
    pub fn add(&mut self, kernel: &KernelNames) {
        match line_for(kernel) {
            Ok(line) => {
                self.lines.insert(line);
            }
            Err(why) => {
                self.unnamable.insert(Unnamable {
                    kernel: kernel.signature.clone(),
                    why,
                });
            }
        }
    }

    /// Registers the device variable whose code-object symbol is `symbol`.
    pub fn add_variable(&mut self, symbol: &str) {
        let name = ditto_kernels::demangle(symbol).unwrap_or_else(|| symbol.to_string());
        // Names reserved to the implementation are HIP's own (its device
        // headers' `__HIP_Coordinates<...>::x`, `__hip_device_heap`, ...).
        if name.starts_with("__") {
            return;
        }
        if symbol.contains(".static.") || name.contains("(anonymous namespace)") {
            self.unnamable.insert(Unnamable {
                kernel: name,
                why: "it is a file-local (static) device variable, which no registration can name",
            });
            return;
        }
        self.lines
            .insert(format!("DITTO_VARIABLE(\"{symbol}\", {name})"));
    }

    /// The text appended to the host build's copy of the source, whose
    /// named namespaces are `namespaces` (qualified, outer ones first).
    /// extern "C" kernels (`DITTO_KERNEL(name)`) are registered in a
    /// namespace of ditto's that uses every one of them, so a kernel
    /// declared in any of them is found (extern "C" functions of one name
    /// are one function, so none is ambiguous).
    pub fn text(&self, namespaces: &[String]) -> String {
        let mut text = String::from("\n#line 1 \"<ditto hipcc: kernel registration>\"\n");
        let (extern_c, typed): (Vec<&String>, Vec<&String>) = self
            .lines
            .iter()
            .partition(|l| l.starts_with("DITTO_KERNEL("));
        for line in typed {
            text.push_str(line);
            text.push('\n');
        }
        if !extern_c.is_empty() {
            text.push_str("namespace ditto_extern_c_kernels {\n");
            for namespace in namespaces {
                text.push_str(&format!("using namespace ::{namespace};\n"));
            }
            for line in extern_c {
                text.push_str(line);
                text.push('\n');
            }
            text.push_str("}\n");
        }
        text
    }
}

fn line_for(kernel: &KernelNames) -> Result<String, &'static str> {
    let name = &kernel.name;
    if name.contains("(anonymous namespace)") {
        return Err("it is in an anonymous namespace, which no other file can name");
    }
    if name.contains("lambda") || name.contains("{unnamed") || name.contains('\'') {
        return Err("it is a lambda or an unnamed type, which C++ cannot name");
    }
    match &kernel.params_text {
        Some(params) if params.contains("(anonymous namespace)") || params.contains("lambda") => {
            Err("one of its parameter types cannot be named")
        }
        Some(params) => Ok(format!(
            "DITTO_KERNEL_AS(void (*)({}), {name})",
            if params.is_empty() { "" } else { params }
        )),
        // extern "C": the symbol is the name.
        None => Ok(format!("DITTO_KERNEL({name})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_registered_with_their_type_so_overloads_are_told_apart() {
        let mut r = Registration::default();
        r.add(&KernelNames::new("_Z12scale_valuesIfEvPT_S1_S0_i"));
        r.add(&KernelNames::new("_Z5scalePfi.kd"));
        r.add(&KernelNames::new("_Z5scalePdi"));
        r.add(&KernelNames::new("_Z5scalePfi"));
        r.add(&KernelNames::new("plain_c_kernel"));
        let lines: Vec<&str> = r.lines.iter().map(String::as_str).collect();
        assert_eq!(
            lines,
            vec![
                "DITTO_KERNEL(plain_c_kernel)",
                "DITTO_KERNEL_AS(void (*)(double*, int), scale)",
                "DITTO_KERNEL_AS(void (*)(float*, float*, float, int), scale_values<float>)",
                "DITTO_KERNEL_AS(void (*)(float*, int), scale)",
            ]
        );
        assert!(r.unnamable.is_empty());
    }

    #[test]
    fn device_variables_are_registered_under_their_symbol_names() {
        let mut r = Registration::default();
        r.add_variable("_ZN2ns5tableE");
        r.add_variable("counter");
        r.add_variable("_ZL5local.static.4d22c59b");
        r.add_variable("_ZN17__HIP_CoordinatesI14__HIP_BlockDimE1xE");
        let lines: Vec<&str> = r.lines.iter().map(String::as_str).collect();
        assert_eq!(
            lines,
            vec![
                "DITTO_VARIABLE(\"_ZN2ns5tableE\", ns::table)",
                "DITTO_VARIABLE(\"counter\", counter)",
            ]
        );
        assert_eq!(r.unnamable.len(), 1);
        let ir = "@counter = addrspace(1) externally_initialized global i32 0, align 4\n@_ZL1s = internal addrspace(1) global i32 0\n@table = protected addrspace(4) externally_initialized constant [4 x float] zeroinitializer\n@__hip_cuid_abc = addrspace(1) global i8 0\n@_ZN5burn6Kernel6cBlockE = weak_odr hidden addrspace(4) constant i32 16, comdat, align 4\n";
        let code = device_code_in_ir(ir);
        assert_eq!(
            code.variables,
            vec!["counter".to_string(), "table".to_string()]
        );
    }

    #[test]
    fn extern_c_kernels_are_registered_where_every_namespace_is_visible() {
        let mut r = Registration::default();
        r.add(&KernelNames::new("burn_kernel"));
        r.add(&KernelNames::new("_Z5scalePfi"));
        let text = r.text(&["burn".to_string(), "burn::inner".to_string()]);
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            lines,
            vec![
                "DITTO_KERNEL_AS(void (*)(float*, int), scale)",
                "namespace ditto_extern_c_kernels {",
                "using namespace ::burn;",
                "using namespace ::burn::inner;",
                "DITTO_KERNEL(burn_kernel)",
                "}",
            ]
        );
        let mut typed_only = Registration::default();
        typed_only.add(&KernelNames::new("_Z5scalePfi"));
        assert!(!typed_only.text(&["burn".to_string()]).contains("namespace"));
    }

    #[test]
    fn kernels_are_read_from_the_device_pass_ir() {
        let ir = "define hidden void @_Z13device_squarei(i32 %0) #0 {\ndefine protected amdgpu_kernel void @_Z13square_kernelPiPKij(ptr addrspace(1) %0) #1 {\ndefine amdgpu_kernel void @\"weird name\"() {\n";
        let names: Vec<String> = device_code_in_ir(ir)
            .kernels
            .into_iter()
            .map(|k| k.mangled)
            .collect();
        assert_eq!(
            names,
            vec![
                "_Z13square_kernelPiPKij".to_string(),
                "weird name".to_string()
            ]
        );
    }

    #[test]
    fn a_kernel_in_an_anonymous_namespace_is_named_as_unnamable() {
        let mut r = Registration::default();
        r.add(&KernelNames::new("_ZN12_GLOBAL__N_16hiddenEPf"));
        assert!(r.lines.is_empty());
        let u = r.unnamable.iter().next().unwrap();
        assert!(u.kernel.contains("hidden"), "{u:?}");
        assert!(u.why.contains("anonymous namespace"));
    }
}
