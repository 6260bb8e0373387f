//! A library loaded at run time: dlopen (RTLD_NOW | RTLD_LOCAL, never
//! dlclosed: its code may be running), its symbols as function pointers,
//! and what the dynamic loader says when either fails. The CUDA driver and
//! CUPTI are loaded so in the tool, the driver in the collector and the
//! replay process, and the HSA runtime in the collector and the replay
//! process.

use std::ffi::{CStr, CString, OsStr, c_void};
use std::os::unix::ffi::OsStrExt;

/// What the dynamic loader says of its last failure.
pub fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a thread-local C string valid until
    // the next dl* call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic-loader error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Why [`Library::open`] opened nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The name holds a NUL byte.
    #[error("bad library name `{0}`")]
    BadName(String),
    /// dlopen failed; what the dynamic loader said.
    #[error("{0}")]
    Loader(String),
}

/// A library opened with dlopen; never closed (its code may be running).
#[derive(Debug, Clone, Copy)]
pub struct Library(*mut c_void);

impl Library {
    /// dlopens `name` (a path or a SONAME searched the usual way), its
    /// bytes as they are: a path that is not UTF-8 opens too.
    pub fn open(name: impl AsRef<OsStr>) -> Result<Library, OpenError> {
        let name = name.as_ref();
        let c = CString::new(name.as_bytes())
            .map_err(|_| OpenError::BadName(name.to_string_lossy().into_owned()))?;
        // SAFETY: a valid C string.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            Err(OpenError::Loader(dlerror_text()))
        } else {
            Ok(Library(handle))
        }
    }

    /// The address of `symbol`, if the library has one.
    pub fn symbol(&self, symbol: &str) -> Option<*mut c_void> {
        let c = CString::new(symbol).ok()?;
        // SAFETY: a live dlopen handle and a valid C string.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }
}

/// A symbol's address as the function-pointer type `F`.
///
/// # Safety
/// `p` is the address of a function whose C signature is exactly `F`.
pub unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    // A type of another size does not compile (checked when `F` is known):
    // nothing here can panic inside an application.
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: same size (checked); the caller vouches for the signature.
    unsafe { std::mem::transmute_copy(&p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_says_what_the_loader_said_and_a_bad_name_says_so() {
        let Err(OpenError::Loader(text)) = Library::open("/nonexistent/libcuda.so.1") else {
            panic!("a missing library opens");
        };
        assert!(text.contains("/nonexistent/libcuda.so.1"), "{text}");
        assert_eq!(
            Library::open("lib\0cuda").unwrap_err().to_string(),
            "bad library name `lib\0cuda`"
        );
    }

    #[test]
    fn symbols_are_found_by_name_and_called_through_their_type() {
        let libc = Library::open("libc.so.6").expect("libc opens");
        assert!(libc.symbol("no_such_symbol_in_libc").is_none());
        assert!(libc.symbol("bad\0name").is_none());
        let getpid = libc.symbol("getpid").expect("libc has getpid");
        // SAFETY: getpid's C signature.
        let getpid: unsafe extern "C" fn() -> libc::pid_t = unsafe { as_fn(getpid) };
        // SAFETY: no arguments, no preconditions.
        assert_eq!(unsafe { getpid() }, std::process::id() as libc::pid_t);
    }

    #[test]
    fn a_path_that_is_not_utf8_opens_as_its_bytes() {
        use std::os::unix::ffi::OsStrExt;
        // A link named with a byte that is not UTF-8, to the libc already loaded.
        let libc = std::fs::read_to_string("/proc/self/maps")
            .expect("maps")
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .expect("libc is mapped")
            .to_string();
        let dir = std::env::temp_dir().join(format!("library-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join(OsStr::from_bytes(b"libc-\xff.so"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&libc, &link).unwrap();
        let opened = Library::open(&link);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(opened.expect("the link opens").symbol("getpid").is_some());
    }
}
