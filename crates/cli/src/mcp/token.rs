//! The bearer token of `ditto mcp --http`: 32 bytes from the kernel's
//! random source, written as 64 hex digits, required on every request as
//! `Authorization: Bearer TOKEN` and compared in constant time; and the
//! file that holds it for the owner's agents, as Jupyter's runtime files
//! do: `mcp-ADDRESS.token`, mode 0600, in a directory of the owner's
//! (`$XDG_RUNTIME_DIR/ditto`, else `~/.local/state/ditto`, mode 0700),
//! removed when the server stops.
//!
//! Owns making, checking and storing the token. Never writes it anywhere
//! else, never through a link, and never echoes what a client sent.

use http::HeaderValue;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Random bytes in a token.
const TOKEN_BYTES: usize = 32;

/// A server's secret: what a client must send to be served.
pub struct Token {
    hex: String,
}

impl Token {
    /// A new token from the kernel's random source (getrandom).
    pub fn generate() -> std::io::Result<Token> {
        let mut bytes = [0u8; TOKEN_BYTES];
        let mut filled = 0;
        while filled < bytes.len() {
            let rest = &mut bytes[filled..];
            // SAFETY: the buffer is ours and `rest.len()` bytes long.
            let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
                continue;
            }
            filled += n as usize;
        }
        Ok(Token::from_bytes(&bytes))
    }

    pub(super) fn from_bytes(bytes: &[u8]) -> Token {
        Token {
            hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The token as a client sends it (after `Bearer `).
    pub fn as_str(&self) -> &str {
        &self.hex
    }

    /// Whether `authorization` (a request's one `Authorization` header)
    /// is `Bearer` and this token; the scheme in any case, as RFC 9110
    /// has it. The comparison takes the same time wherever the first
    /// difference is.
    pub fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let value = value.as_bytes();
        let Some(space) = value.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, rest) = value.split_at(space);
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        let sent = rest.trim_ascii_start();
        same_bytes(sent, self.hex.as_bytes())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// `a == b`, in a time that depends on their lengths only.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Why the token file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error(
        "cannot find a private directory for the MCP server's token: neither XDG_RUNTIME_DIR \
         nor HOME is set; set XDG_RUNTIME_DIR to a directory only you can open"
    )]
    NoDirectory,
    #[error(
        "{dir}: owned by uid {owner}, not by you (uid {uid}): the MCP server's token is not \
         written there; remove it, or set XDG_RUNTIME_DIR to a directory only you can open"
    )]
    NotOurs { dir: PathBuf, owner: u32, uid: u32 },
    #[error(
        "cannot write the MCP server's token to {path}: {error}; set XDG_RUNTIME_DIR to a \
         directory only you can open (a link is never followed there)"
    )]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The directory for token files: `$XDG_RUNTIME_DIR/ditto` where that is
/// set to an absolute path, else `$HOME/.local/state/ditto`.
pub fn token_dir(xdg_runtime_dir: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let absolute = |v: Option<&str>| v.filter(|v| v.starts_with('/')).map(PathBuf::from);
    if let Some(runtime) = absolute(xdg_runtime_dir) {
        return Some(runtime.join("ditto"));
    }
    absolute(home).map(|home| home.join(".local/state/ditto"))
}

/// The token file's name for a server at `address`.
fn file_name(address: SocketAddr) -> String {
    format!("mcp-{address}.token")
}

/// The token, written for the owner; the file goes when this is dropped.
#[derive(Debug)]
pub struct TokenFile {
    dir: OwnedFd,
    name: String,
    path: PathBuf,
}

impl TokenFile {
    /// Writes `token` for the server at `address` into [`token_dir`] of
    /// this process's environment.
    pub fn write(token: &Token, address: SocketAddr) -> Result<TokenFile, TokenFileError> {
        let var = |name| std::env::var(name).ok();
        let dir = token_dir(var("XDG_RUNTIME_DIR").as_deref(), var("HOME").as_deref())
            .ok_or(TokenFileError::NoDirectory)?;
        TokenFile::write_in(&dir, token, address)
    }

    /// Writes `token` into `dir` (made mode 0700 where missing, its parent
    /// too; it must be this uid's, and is made 0700 if it is not), as
    /// a new file of mode 0600 (a stale one of that name, left by a server
    /// that was killed, is replaced).
    pub fn write_in(
        dir: &Path,
        token: &Token,
        address: SocketAddr,
    ) -> Result<TokenFile, TokenFileError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error: std::io::Error| TokenFileError::Io { path, error }
        };
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io(dir)(e.into())),
        }
        let handle = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(dir)(e.into()))?;
        let stat = rustix::fs::fstat(&handle).map_err(|e| io(dir)(e.into()))?;
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        if stat.st_uid != uid {
            return Err(TokenFileError::NotOurs {
                dir: dir.to_path_buf(),
                owner: stat.st_uid,
                uid,
            });
        }
        if stat.st_mode & 0o077 != 0 {
            rustix::fs::fchmod(&handle, Mode::from_raw_mode(0o700))
                .map_err(|e| io(dir)(e.into()))?;
        }
        let name = file_name(address);
        let path = dir.join(&name);
        match rustix::fs::unlinkat(&handle, name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(io(&path)(e.into())),
        }
        let file = rustix::fs::openat(
            &handle,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(&path)(e.into()))?;
        let stored = TokenFile {
            dir: handle,
            name,
            path,
        };
        std::fs::File::from(file)
            .write_all(format!("{}\n", token.as_str()).as_bytes())
            .map_err(io(&stored.path))?;
        Ok(stored)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).unwrap()
    }

    #[test]
    fn a_token_is_64_hex_digits_and_never_the_same_twice() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.as_str().len(), 64);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), b.as_str());
        assert_eq!(format!("{a:?}"), "Token(…)");
    }

    #[test]
    fn only_bearer_and_the_token_itself_are_admitted() {
        let token = Token::from_bytes(&[0xab; 32]);
        let hex = "ab".repeat(32);
        assert!(token.admits(Some(&header(&format!("Bearer {hex}")))));
        assert!(token.admits(Some(&header(&format!("bearer  {hex}")))));
        for refused in [
            String::new(),
            "Bearer".into(),
            "Bearer ".into(),
            hex.clone(),
            format!("Basic {hex}"),
            format!("Bearer {}", &hex[..63]),
            format!("Bearer {hex}0"),
            format!("Bearer {}", hex.to_uppercase()),
            format!("Bearer {}ac", &hex[..62]),
            format!("Bearer {hex} "),
        ] {
            assert!(!token.admits(Some(&header(&refused))), "{refused:?}");
        }
        assert!(!token.admits(None));
    }

    #[test]
    fn same_bytes_is_equality() {
        assert!(same_bytes(b"", b""));
        assert!(same_bytes(b"abc", b"abc"));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"ab"));
        assert!(!same_bytes(b"xbc", b"abc"));
    }

    #[test]
    fn the_directory_is_the_runtime_one_else_under_home() {
        assert_eq!(
            token_dir(Some("/run/user/1000"), Some("/home/a")),
            Some(PathBuf::from("/run/user/1000/ditto"))
        );
        assert_eq!(
            token_dir(Some("relative"), Some("/home/a")),
            Some(PathBuf::from("/home/a/.local/state/ditto"))
        );
        assert_eq!(
            token_dir(None, Some("/home/a")),
            Some(PathBuf::from("/home/a/.local/state/ditto"))
        );
        assert_eq!(token_dir(Some(""), None), None);
    }

    fn address() -> SocketAddr {
        "127.0.0.1:8080".parse().unwrap()
    }

    #[test]
    fn the_file_is_the_owners_only_and_goes_with_the_server() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run/ditto");
        let token = Token::generate().unwrap();
        let file = TokenFile::write_in(&dir, &token, address()).unwrap();
        assert_eq!(file.path(), dir.join("mcp-127.0.0.1:8080.token"));
        let meta = std::fs::metadata(file.path()).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        let dir_meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(dir_meta.mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::read_to_string(file.path()).unwrap(),
            format!("{}\n", token.as_str())
        );
        let path = file.path().to_path_buf();
        drop(file);
        assert!(!path.exists());
    }

    #[test]
    fn a_stale_file_is_replaced_and_an_open_directory_closed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ditto");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        // A link where the file goes: removed, never written through.
        let victim = root.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("mcp-127.0.0.1:8080.token")).unwrap();
        let token = Token::generate().unwrap();
        let file = TokenFile::write_in(&dir, &token, address()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let meta = std::fs::symlink_metadata(file.path()).unwrap();
        assert!(meta.is_file());
        assert_eq!(
            std::fs::metadata(&dir).unwrap().mode() & 0o777,
            0o700,
            "the directory is closed to others"
        );
    }

    #[test]
    fn another_users_directory_is_refused_naming_its_owner() {
        // SAFETY: getuid cannot fail.
        assert_eq!(
            unsafe { libc::getuid() },
            0,
            "this test gives a directory to another uid, which needs root (CI runs as root)"
        );
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ditto");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let e = TokenFile::write_in(&dir, &Token::generate().unwrap(), address()).unwrap_err();
        assert!(
            matches!(
                e,
                TokenFileError::NotOurs {
                    owner: 65534,
                    uid: 0,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}: owned by uid 65534", dir.display()))
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn a_link_for_the_directory_is_refused_naming_it() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let dir = root.path().join("ditto");
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        let e = TokenFile::write_in(&dir, &Token::generate().unwrap(), address()).unwrap_err();
        let message = e.to_string();
        assert!(
            message.contains(&dir.display().to_string()) && message.contains("XDG_RUNTIME_DIR"),
            "{message}"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
