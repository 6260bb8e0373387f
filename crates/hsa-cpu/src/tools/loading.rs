//! Tool loading (ROCr `Runtime::LoadTools`). Owns the list of loaded tool
//! libraries. Candidates: every HSA_TOOLS_LIB entry (split on spaces; `"`
//! quotes a name with spaces, `\` escapes the next character; order
//! 0..n-1), then, from ROCm 5.3, every already-loaded library that itself
//! exports `uint32_t HSA_AMD_TOOL_PRIORITY` (order `priority + n`); a
//! library found both ways is loaded once at its lowest order. Each is
//! opened RTLD_LAZY, as ROCr does, and gets
//! `OnLoad(&table, runtime_major, failed_count, failed_names)`; one whose
//! OnLoad returns false, or (from 5.3) one without OnLoad, is dlclosed and
//! its name appended to the failed list passed to later tools; ROCm 5.2
//! keeps a library without OnLoad loaded. OnUnload runs in reverse order;
//! a tool is dlclosed only after every OnUnload ran and the table was reset.
//! Never loads a tool outside `hsa_init`. What differs by release comes in
//! a [`Loading`].

use hsa::*;
use std::ffi::{CStr, CString, c_char, c_int, c_void};

type OnLoadFn = unsafe extern "C" fn(*mut HsaApiTable, u64, u64, *const *const c_char) -> bool;
type OnUnloadFn = unsafe extern "C" fn();

/// How the served release loads tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loading {
    /// Whether loaded libraries exporting HSA_AMD_TOOL_PRIORITY are
    /// discovered (ROCm 5.3 and later).
    pub discover_loaded: bool,
    /// Whether a library without OnLoad stays loaded (ROCm 5.2).
    pub keep_without_on_load: bool,
}

pub struct LoadedTool {
    pub name: String,
    handle: usize,
}

struct Candidate {
    order: u64,
    name: String,
    handle: usize,
}

/// Base address of an object's lowest PT_LOAD segment.
unsafe fn load_base(info: &libc::dl_phdr_info) -> usize {
    let mut lowest = usize::MAX;
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr holds dlpi_phnum headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD {
            lowest = lowest.min(ph.p_vaddr as usize);
        }
    }
    info.dlpi_addr as usize
        + if lowest == usize::MAX {
            0
        } else {
            lowest & !0xfff
        }
}

unsafe extern "C" fn collect_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our Vec as data.
    unsafe {
        let info = &*info;
        let found = &mut *(data as *mut Vec<(String, usize)>);
        if !info.dlpi_name.is_null() {
            let name = CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned();
            if !name.is_empty() {
                found.push((name, load_base(info)));
            }
        }
    }
    0
}

/// Loaded libraries that define HSA_AMD_TOOL_PRIORITY themselves.
fn discovered_tools(n_env: u64) -> Vec<Candidate> {
    let mut objects: Vec<(String, usize)> = Vec::new();
    // SAFETY: the callback only reads the info and pushes into `objects`.
    unsafe { libc::dl_iterate_phdr(Some(collect_object), &mut objects as *mut _ as *mut c_void) };
    let mut out = Vec::new();
    for (name, base) in objects {
        let Ok(cname) = CString::new(name.clone()) else {
            continue;
        };
        // SAFETY: NOLOAD only takes a reference to an object already loaded.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: dlsym/dladdr on a live handle.
        let defined_here = unsafe {
            let sym = libc::dlsym(handle, c"HSA_AMD_TOOL_PRIORITY".as_ptr());
            let mut dl: libc::Dl_info = std::mem::zeroed();
            // dlsym searches dependencies too: keep only a definition inside this object.
            let ok =
                !sym.is_null() && libc::dladdr(sym, &mut dl) != 0 && dl.dli_fbase as usize == base;
            ok.then(|| *(sym as *const u32))
        };
        match defined_here {
            Some(priority) => out.push(Candidate {
                order: priority as u64 + n_env,
                name,
                handle: handle as usize,
            }),
            // SAFETY: dropping the reference taken above.
            None => unsafe {
                libc::dlclose(handle);
            },
        }
    }
    out
}

/// HSA_TOOLS_LIB split as ROCr's `parse_tool_names`: on spaces, `"`
/// quoting a name with spaces, `\` escaping the next character.
pub fn tool_names(value: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut name = String::new();
    let mut quoted = false;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => name.extend(chars.next()),
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !name.is_empty() {
                    names.push(std::mem::take(&mut name));
                }
            }
            c => name.push(c),
        }
    }
    if !name.is_empty() {
        names.push(name);
    }
    names
}

/// Loads the tools, calling their OnLoad with `table`.
///
/// # Safety
/// `table` is a valid API table that outlives every tool.
pub(crate) unsafe fn load(table: *mut HsaApiTable, loading: Loading) -> Vec<LoadedTool> {
    let env = std::env::var("HSA_TOOLS_LIB").unwrap_or_default();
    let env_names = tool_names(&env);
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut failed: Vec<CString> = Vec::new();
    for (i, name) in env_names.iter().enumerate() {
        let Ok(cname) = CString::new(name.as_str()) else {
            continue;
        };
        // SAFETY: loading a library named by the user, as ROCr does.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_LAZY) };
        if handle.is_null() {
            failed.push(cname);
            continue;
        }
        candidates.push(Candidate {
            order: i as u64,
            name: name.to_string(),
            handle: handle as usize,
        });
    }
    if loading.discover_loaded {
        candidates.extend(discovered_tools(env_names.len() as u64));
    }
    candidates.sort_by_key(|c| c.order);
    let mut seen: Vec<usize> = Vec::new();
    let mut loaded = Vec::new();
    for c in candidates {
        if seen.contains(&c.handle) {
            // The same library found again at a higher order: drop the extra reference.
            // SAFETY: the reference was taken by dlopen above.
            unsafe { libc::dlclose(c.handle as *mut c_void) };
            continue;
        }
        seen.push(c.handle);
        // SAFETY: dlsym on a live handle.
        let on_load = unsafe { libc::dlsym(c.handle as *mut c_void, c"OnLoad".as_ptr()) };
        if on_load.is_null() && loading.keep_without_on_load {
            loaded.push(LoadedTool {
                name: c.name,
                handle: c.handle,
            });
            continue;
        }
        let ok = !on_load.is_null() && {
            // SAFETY: OnLoad has the documented signature.
            let f: OnLoadFn = unsafe { std::mem::transmute(on_load) };
            let names: Vec<*const c_char> = failed.iter().map(|n| n.as_ptr()).collect();
            // SAFETY: the table lives for the whole runtime; names outlive the call.
            unsafe {
                f(
                    table,
                    (*table).version.major_id as u64,
                    names.len() as u64,
                    if names.is_empty() {
                        std::ptr::null()
                    } else {
                        names.as_ptr()
                    },
                )
            }
        };
        if ok {
            loaded.push(LoadedTool {
                name: c.name,
                handle: c.handle,
            });
        } else {
            // SAFETY: closing the reference taken above.
            unsafe { libc::dlclose(c.handle as *mut c_void) };
            failed.push(CString::new(c.name).unwrap_or_default());
        }
    }
    loaded
}

/// Runs OnUnload of every tool in reverse load order. Closes nothing: an
/// earlier tool's OnUnload may still call through wraps of a later one.
pub(crate) fn run_on_unload(tools: &[LoadedTool]) {
    for t in tools.iter().rev() {
        // SAFETY: dlsym on a handle we hold; OnUnload has the documented signature.
        unsafe {
            let f = libc::dlsym(t.handle as *mut c_void, c"OnUnload".as_ptr());
            if !f.is_null() {
                let f: OnUnloadFn = std::mem::transmute(f);
                f();
            }
        }
    }
}

/// dlcloses the tools, in reverse load order. Only once no table slot
/// points into them any more (ROCr resets its table before closing tools).
pub(crate) fn close(tools: Vec<LoadedTool>) {
    for t in tools.into_iter().rev() {
        // SAFETY: dropping the reference taken when the tool was loaded.
        unsafe { libc::dlclose(t.handle as *mut c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_split_as_rocr_splits_them() {
        assert_eq!(tool_names(""), Vec::<String>::new());
        assert_eq!(tool_names("  a.so   b.so "), ["a.so", "b.so"]);
        assert_eq!(
            tool_names(r#""/my tools/a.so" b\ c.so"#),
            ["/my tools/a.so", "b c.so"]
        );
    }
}
