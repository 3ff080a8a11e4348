//! Static files, the file-system half: opening a [`FileRequest`] under a root directory without
//! ever leaving it.
//!
//! Every model serves `/files` through this module: [`Files::open`] turns a request into an
//! open file and its [`FileMeta`] (the session decides the status from that). Who calls it is
//! the model's choice (the event loop at once, the actor model's Files actor, the blocking
//! models inline); the file's bytes then go out as a body source of the pump (`drive::body`:
//! `sendfile(2)`, or bounded chunks for a transport that cannot), never read whole.
//!
//! Escapes are refused twice. The protocol layer has already refused `..`, encoded separators,
//! NUL bytes and absolute paths ([`FileRequest::parse`]); here the path is opened relative to
//! the root's descriptor with `openat2(RESOLVE_BENEATH)`, so the kernel refuses any resolution
//! that would leave the root — a symlink to `/etc`, or one planted while the request is in
//! flight. On kernels without `openat2` (before 5.6) the fallback resolves the path with
//! `canonicalize`, checks it is still below the root, and opens it with `O_NOFOLLOW`.
//!
//! Descriptors are budgeted ([`Files::budget`]): the files open for answers at once, across
//! every connection of the process, are at most a share of the process's descriptor limit
//! (half of it by default), so that clients that ask for files and never read them cannot
//! leave none for new connections; past it, and at `EMFILE` itself, a file request is answered
//! 503 with `Retry-After` ([`FileError::Busy`]) and the server goes on (said once in the log,
//! and counted in `/stats`). An HTTP/2 connection also holds at most
//! [`Limits::files_per_connection`](berth_proto::http::Limits) of them.
//!
//! Precompressed siblings: beside the file `a.css`, `a.css.br`, `a.css.zst` and `a.css.gz` are
//! looked for (opened the same way, so under the same rules) unless turned off
//! ([`Files::precompressed`]). The one the client accepts best is opened instead
//! ([`FileMeta::encoding`]); that any exists makes the answer vary with `Accept-Encoding`
//! ([`FileMeta::vary`]). A sibling is trusted to hold the file's content: berth does not check
//! that it is newer than the file (nginx's `gzip_static` does not either). For a file asked
//! for by name the sibling is looked for first and the file itself is not opened when one is
//! found, so a sibling is served even where its file is missing, as `gzip_static` serves it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use berth_proto::http::{content_type, Coding, FileError, FileMeta, FileRequest};

use crate::sys;

/// Where `/files` is served from: a root directory, or none (every file request is then 404);
/// and the site served at `/` (`berth serve --site DIR`), if any ([`FileRequest::in_site`]
/// says which a request is for). Cheap to clone; clones share the roots' descriptors.
#[derive(Clone)]
pub struct Files {
    root: Option<Arc<Root>>,
    site: Option<Arc<Root>>,
    /// Look for precompressed siblings (`.br`, `.zst`, `.gz`).
    precompressed: bool,
    /// Files open for answers, against their most (shared by every clone).
    budget: Arc<Budget>,
}

/// How many files may be open for answers at once, and how many are.
#[derive(Debug)]
struct Budget {
    max: usize,
    held: AtomicUsize,
    /// The log said once that the budget (or the process's limit) ran out.
    told: AtomicBool,
}

impl Budget {
    fn new(max: usize) -> Arc<Budget> {
        Arc::new(Budget {
            max,
            held: AtomicUsize::new(0),
            told: AtomicBool::new(false),
        })
    }

    /// Half of the process's descriptor limit (connections, listeners and the rest get the
    /// other half), or 1 Mi where there is none.
    fn default_max() -> usize {
        sys::fd::open_files_limit().map_or(1 << 20, |n| {
            usize::try_from(n / 2).unwrap_or(usize::MAX).max(1)
        })
    }

    /// One more file may be opened: its place, given back when the file closes.
    fn take(self: &Arc<Budget>) -> Option<Slot> {
        let taken = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            self.ran_out(format_args!(
                "{} files open for answers, the most allowed",
                self.max
            ));
            return None;
        }
        Some(Slot(self.clone()))
    }

    /// Says once in the log what ran out (the budget, or the process's descriptors).
    fn ran_out(&self, what: std::fmt::Arguments<'_>) {
        if !self.told.swap(true, Ordering::Relaxed) {
            log::warn!(
                "out of file descriptors for files ({what}): answering file requests 503 \
                 until some close (raise `ulimit -n`, or lower --files-per-connection); said once"
            );
        }
    }
}

/// A file's place in the budget, given back when it is dropped.
#[derive(Debug)]
struct Slot(Arc<Budget>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A file open for an answer: the file, and its place in the budget, held as long as it is
/// open.
#[derive(Debug)]
pub struct BodyFile {
    file: File,
    _slot: Slot,
}

impl BodyFile {
    /// A file that takes no place in any budget: one a job opened itself (`Reply::file`,
    /// whose descriptor its job held before berth did), and tests' own.
    pub(crate) fn unbudgeted(file: File) -> BodyFile {
        let slot = Budget::new(usize::MAX)
            .take()
            .expect("an unbounded budget has room");
        BodyFile { file, _slot: slot }
    }
}

impl std::ops::Deref for BodyFile {
    type Target = File;
    fn deref(&self) -> &File {
        &self.file
    }
}

struct Root {
    /// The root directory, opened once: every file is opened relative to it.
    dir: OwnedFd,
    /// As given, for messages.
    path: PathBuf,
    /// Canonical form, for the fallback's "still below the root" check.
    canonical: PathBuf,
    /// Whether the kernel has `openat2` (probed when the root is opened).
    openat2: bool,
}

/// An open file, ready for its bytes to be sent.
#[derive(Debug)]
pub struct OpenFile {
    /// The file, opened read-only.
    pub file: BodyFile,
    /// What the session needs to answer: size, modification time, Content-Type.
    pub meta: FileMeta,
}

/// A file found and opened, before it takes its place in the budget.
struct Found {
    file: File,
    meta: FileMeta,
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.root {
            Some(root) => write!(f, "Files({}", root.path.display())?,
            None => f.write_str("Files(none")?,
        }
        match &self.site {
            Some(site) => write!(f, ", site {})", site.path.display()),
            None => f.write_str(")"),
        }
    }
}

impl Files {
    /// Serves files below `root`, which must be a directory.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Files> {
        Ok(Files {
            root: Some(Root::open(root.as_ref())?),
            ..Files::none()
        })
    }

    /// Serves the site below `dir` (a directory) too: requests made with
    /// [`FileRequest::in_site`] are opened there, under the same rules as `/files`.
    pub fn with_site(mut self, dir: impl AsRef<Path>) -> io::Result<Files> {
        self.site = Some(Root::open(dir.as_ref())?);
        Ok(self)
    }

    /// The site's directory, if there is one.
    pub fn site(&self) -> Option<&Path> {
        self.site.as_deref().map(|r| r.path.as_path())
    }

    /// No root: every file request is answered 404.
    pub fn none() -> Files {
        Files {
            root: None,
            site: None,
            precompressed: true,
            budget: Budget::new(Budget::default_max()),
        }
    }

    /// At most `max` files open for answers at once, across every connection (default: half
    /// the process's descriptor limit); past it a file request is answered 503.
    pub fn budget(mut self, max: usize) -> Files {
        self.budget = Budget::new(max.max(1));
        self
    }

    /// Files open for answers now (`/stats`).
    pub fn files_open(&self) -> usize {
        self.budget.held.load(Ordering::Relaxed)
    }
}

impl Default for Files {
    fn default() -> Self {
        Files::none()
    }
}

impl Root {
    /// Opens `name`'s precompressed sibling for `coding` (`name.gz`, ...) if it is a regular
    /// file, under the same rules as any file.
    fn open_sibling(&self, name: &str, coding: Coding) -> Option<(File, std::fs::Metadata)> {
        self.open_regular_or_dir(&format!("{name}{}", coding.suffix()))
            .ok()
            .filter(|(_, meta)| meta.is_file())
    }

    /// Opens the directory `path` as a root.
    fn open(path: &Path) -> io::Result<Arc<Root>> {
        let path = path.to_path_buf();
        let dir = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let canonical = path.canonicalize()?;
        let dir = OwnedFd::from(dir);
        let openat2 = !matches!(
            sys::fs::openat2_beneath(&dir, c".", libc::O_RDONLY | libc::O_DIRECTORY),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS)
        );
        Ok(Arc::new(Root {
            dir,
            path,
            canonical,
            openat2,
        }))
    }
}

impl Files {
    /// Whether precompressed siblings (`name.br`, `name.zst`, `name.gz`) are looked for and
    /// served to clients that accept them (on by default).
    pub fn precompressed(mut self, yes: bool) -> Files {
        self.precompressed = yes;
        self
    }

    /// The roots' descriptors, which a forked child must keep open.
    pub(crate) fn descriptors(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        [&self.root, &self.site]
            .into_iter()
            .filter_map(|r| r.as_deref().map(|r| r.dir.as_raw_fd()))
    }

    /// The root directory, if there is one.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref().map(|r| r.path.as_path())
    }

    /// Opens the file `req` names. A directory is served by its `index.html` if it has one,
    /// at its path in directory form (`dir/`); asked for as `dir`, it is redirected there
    /// ([`FileError::Directory`]). A file asked for in directory form (`a.txt/`) is not found,
    /// as the kernel would say; anything but a regular file (a FIFO, a device) is not served.
    pub fn open(&self, req: &FileRequest) -> Result<OpenFile, FileError> {
        let slot = self.budget.take().ok_or(FileError::Busy)?;
        match self.find(req) {
            Ok(Found { file, meta }) => Ok(OpenFile {
                file: BodyFile { file, _slot: slot },
                meta,
            }),
            Err(FileError::Busy) => {
                self.budget.ran_out(format_args!("the process's limit"));
                Err(FileError::Busy)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Files::open`] without the budget.
    fn find(&self, req: &FileRequest) -> Result<Found, FileError> {
        let root = if req.in_site_root() {
            &self.site
        } else {
            &self.root
        };
        let Some(root) = root else {
            return Err(FileError::NotFound);
        };
        let rel = req.path();
        // A file asked for by name: the sibling the client takes best is opened without the
        // file itself (one open where it would be two, as nginx's `gzip_static` does).
        let named = !rel.is_empty() && !req.dir_form();
        let mut tried = [false; 3];
        if named {
            if let Some(found) = self.sibling(root, req, rel, &mut tried) {
                return Ok(found);
            }
        }
        let (file, meta) = root.open_regular_or_dir(if rel.is_empty() { "." } else { rel })?;
        if meta.is_file() && !req.dir_form() {
            return Ok(self.plain(root, opened(file, &meta, rel), rel, tried));
        }
        if !meta.is_dir() {
            return Err(FileError::NotFound);
        }
        let index = match rel {
            "" => "index.html".to_owned(),
            _ => format!("{rel}/index.html"),
        };
        let (file, meta) = root.open_regular_or_dir(&index)?;
        if !meta.is_file() {
            return Err(FileError::NotFound);
        }
        if !req.dir_form() {
            return Err(FileError::Directory);
        }
        let mut tried = [false; 3];
        if let Some(found) = self.sibling(root, req, &index, &mut tried) {
            return Ok(found);
        }
        Ok(self.plain(root, opened(file, &meta, &index), &index, tried))
    }

    /// The precompressed sibling of `name` the client takes best, if one is there: the
    /// codings it takes, best first, until one is found (a client that takes gzip costs one
    /// open, not one per coding berth knows). `tried` notes the codings looked for.
    fn sibling(
        &self,
        root: &Root,
        req: &FileRequest,
        name: &str,
        tried: &mut [bool; 3],
    ) -> Option<Found> {
        if !self.precompressed {
            return None;
        }
        req.accepted().preferred().find_map(|coding| {
            tried[coding.index()] = true;
            let (file, meta) = root.open_sibling(name, coding)?;
            Some(Found {
                file,
                meta: FileMeta {
                    encoding: Some(coding),
                    vary: true,
                    ..FileMeta::plain(
                        meta.len(),
                        meta.modified().unwrap_or(std::time::UNIX_EPOCH),
                        content_type(name),
                    )
                },
            })
        })
    }

    /// `plain`, the file `name` itself, varying with `Accept-Encoding` if a sibling not
    /// `tried` is there for another client.
    fn plain(&self, root: &Root, plain: Found, name: &str, tried: [bool; 3]) -> Found {
        let vary = self.precompressed
            && Coding::ALL
                .iter()
                .zip(tried)
                .any(|(&c, tried)| !tried && root.open_sibling(name, c).is_some());
        Found {
            meta: FileMeta { vary, ..plain.meta },
            ..plain
        }
    }
}

fn opened(file: File, meta: &std::fs::Metadata, name: &str) -> Found {
    Found {
        file,
        meta: FileMeta::plain(
            meta.len(),
            meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            content_type(name),
        ),
    }
}

impl Root {
    /// Opens `rel` (relative, no `..`: the protocol layer saw to that) below the root and
    /// reads its metadata.
    fn open_regular_or_dir(&self, rel: &str) -> Result<(File, std::fs::Metadata), FileError> {
        // O_NONBLOCK: opening a FIFO someone left in the root must not block the thread; it
        // changes nothing for regular files and directories.
        let flags = libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK;
        let file = if self.openat2 {
            let c = CString::new(rel).map_err(|_| FileError::NotFound)?;
            sys::fs::openat2_beneath(&self.dir, &c, flags).map(File::from)
        } else {
            self.open_checked(rel, flags)
        }
        .map_err(file_error)?;
        let meta = file.metadata().map_err(file_error)?;
        Ok((file, meta))
    }

    /// The fallback without `openat2`: resolve every symlink, check the result is still below
    /// the root, then open exactly that path refusing a symlink in its last component (one
    /// swapped in after the check).
    fn open_checked(&self, rel: &str, flags: libc::c_int) -> io::Result<File> {
        let resolved = self.canonical.join(rel).canonicalize()?;
        if !resolved.starts_with(&self.canonical) {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        File::options()
            .read(true)
            .custom_flags(flags | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(resolved)
    }
}

/// Maps an open or stat failure to the answer it deserves. An escape attempt (EXDEV from
/// `RESOLVE_BENEATH`, a symlink loop) is indistinguishable from a missing file on purpose.
fn file_error(e: io::Error) -> FileError {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => FileError::Forbidden,
        // Out of descriptors: the newcomer is refused, the server goes on (`Files::open` says
        // so in the log, once).
        Some(libc::EMFILE | libc::ENFILE) => FileError::Busy,
        Some(
            libc::ENOENT
            | libc::ENOTDIR
            | libc::EXDEV
            | libc::ELOOP
            | libc::ENAMETOOLONG
            | libc::EINVAL
            | libc::ENXIO
            | libc::ENODEV,
        ) => FileError::NotFound,
        _ => {
            log::warn!("opening a file failed: {e}");
            FileError::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::http::{Method, Request, Version};

    /// A scratch directory: `root/` with files, a subdirectory, symlinks in and out, and a
    /// secret next to the root.
    fn scratch(name: &str) -> PathBuf {
        let base = std::env::temp_dir().join(format!("berth-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(root.join("withindex")).unwrap();
        std::fs::write(base.join("secret.txt"), "secret").unwrap();
        std::fs::write(root.join("a.txt"), "hello").unwrap();
        std::fs::write(root.join("withindex/index.html"), "<p>hi</p>").unwrap();
        std::fs::write(root.join("sub/deeper/x.css"), "x").unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("inside-link")).unwrap();
        std::os::unix::fs::symlink("../secret.txt", root.join("outside-link")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();
        std::os::unix::fs::symlink("../..", root.join("sub/out")).unwrap();
        base
    }

    /// A bare `GET /x`: the request whose `/files` path the tests vary.
    const GET: Request<'static> = Request {
        method: Method::Get,
        target: "/x",
        path: "/x",
        query: None,
        version: Version::Http11,
        headers: &[],
        body: b"",
        peer: None,
    };

    fn req(path: &str) -> FileRequest {
        FileRequest::parse(&GET, path).unwrap()
    }

    fn check(files: &Files) {
        let open = |p: &str| files.open(&req(p)).map(|f| f.meta);
        let a = open("a.txt").unwrap();
        assert_eq!(a.len, 5);
        assert_eq!(a.content_type, "text/plain; charset=utf-8");
        assert_eq!(
            open("sub/deeper/x.css").unwrap().content_type,
            "text/css; charset=utf-8"
        );
        assert_eq!(
            open("inside-link").unwrap().len,
            5,
            "a symlink inside the root is fine"
        );
        let index = open("withindex/").unwrap();
        assert_eq!(
            (index.len, index.content_type),
            (9, "text/html; charset=utf-8")
        );
        assert_eq!(open("withindex/.").unwrap().len, 9);
        assert_eq!(open("withindex"), Err(FileError::Directory));
        for missing in ["nope", "sub", "sub/", "", "a.txt/x", "a.txt/", "a.txt/."] {
            assert_eq!(open(missing), Err(FileError::NotFound), "{missing}");
        }
        for escape in [
            "outside-link",
            "etc-link/passwd",
            "etc-link",
            "sub/up/../secret.txt",
        ] {
            let r = FileRequest::parse(&GET, escape);
            if let Ok(r) = r {
                assert_eq!(
                    files.open(&r).map(|f| f.meta),
                    Err(FileError::NotFound),
                    "{escape}"
                );
            }
        }
        assert_eq!(
            open("sub/out/secret.txt"),
            Err(FileError::NotFound),
            "a link out of the root"
        );
        assert_eq!(
            open("sub/up/a.txt").unwrap().len,
            5,
            "a link back into the root"
        );
    }

    #[test]
    fn opens_below_the_root_only() {
        let base = scratch("openat2");
        let files = Files::new(base.join("root")).unwrap();
        assert!(
            files.root.as_ref().unwrap().openat2,
            "kernel without openat2?"
        );
        check(&files);
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn fallback_without_openat2_opens_below_the_root_only() {
        let base = scratch("fallback");
        let mut files = Files::new(base.join("root")).unwrap();
        Arc::get_mut(files.root.as_mut().unwrap()).unwrap().openat2 = false;
        check(&files);
        let _ = std::fs::remove_dir_all(base);
    }

    /// A file asked for by name: the sibling the client takes is served without the file
    /// (it need not even exist, as under nginx's `gzip_static`); the file varies with
    /// `Accept-Encoding` for a client that takes no sibling; `index.html` has siblings too.
    #[test]
    fn the_sibling_the_client_takes_is_opened_first() {
        let base = scratch("siblings");
        let root = base.join("root");
        std::fs::write(root.join("a.txt.gz"), "gz of a").unwrap();
        std::fs::write(root.join("only.css.br"), "br of only").unwrap();
        std::fs::write(root.join("withindex/index.html.zst"), "zst").unwrap();
        let files = Files::new(&root).unwrap();
        let open = |rel: &str, accept: &str| {
            let headers = [berth_proto::http::Header {
                name: "Accept-Encoding",
                value: accept.as_bytes(),
            }];
            let get = Request {
                headers: &headers,
                ..GET
            };
            files
                .open(&FileRequest::parse(&get, rel).unwrap())
                .map(|f| {
                    (
                        f.meta.encoding,
                        f.meta.len,
                        f.meta.vary,
                        f.meta.content_type,
                    )
                })
        };
        let css = "text/css; charset=utf-8";
        assert_eq!(
            open("a.txt", "gzip"),
            Ok((Some(Coding::Gzip), 7, true, "text/plain; charset=utf-8"))
        );
        assert_eq!(open("a.txt", "br").map(|f| (f.0, f.2)), Ok((None, true)));
        assert_eq!(
            open("only.css", "br, gzip"),
            Ok((Some(Coding::Br), 10, true, css))
        );
        assert_eq!(open("only.css", "gzip"), Err(FileError::NotFound));
        assert_eq!(
            open("withindex/", "zstd").map(|f| f.0),
            Ok(Some(Coding::Zstd))
        );
        assert_eq!(open("withindex", "zstd"), Err(FileError::Directory));
        assert_eq!(
            open("sub/deeper/x.css", "gzip, br, zstd").map(|f| (f.0, f.2)),
            Ok((None, false))
        );
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn no_root_is_not_found() {
        assert_eq!(
            Files::none().open(&req("a.txt")).map(|f| f.meta),
            Err(FileError::NotFound)
        );
    }

    #[test]
    fn a_fifo_is_not_served_and_does_not_block() {
        let base = scratch("fifo");
        sys::fs::mkfifo(&base.join("root/pipe"), 0o644).unwrap();
        let files = Files::new(base.join("root")).unwrap();
        assert_eq!(
            files.open(&req("pipe")).map(|f| f.meta),
            Err(FileError::NotFound)
        );
        let _ = std::fs::remove_dir_all(base);
    }
}
