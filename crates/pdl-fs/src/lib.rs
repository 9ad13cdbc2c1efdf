//! Files beneath a directory, opened without following symbolic links.
//!
//! A [`Dir`] is an open directory (a file descriptor). Every path given to its
//! methods is relative to it, made only of plain components (no `..`, no
//! absolute path, no empty component), and is resolved without following a
//! symbolic link at any step: with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` where the kernel has it, else one component at a time
//! with `openat(O_NOFOLLOW)`. A file opened through a [`Dir`] must be a regular
//! file. So a link or a FIFO that someone planted in a run folder or an agent's
//! workspace is an error naming the path, never followed or blocked on.
//!
//! The directory a [`Dir`] is opened on is the caller's choice (a `--out` folder,
//! a workspace root) and is opened as named.
//!
//! ```no_run
//! use pdl_fs::{Dir, OpenMode};
//! use std::io::Write;
//!
//! let run = Dir::create("runs/latest".as_ref())?;
//! let mut log = run.open_file("logs/task/episode.log".as_ref(), OpenMode::Append)?;
//! writeln!(log, "started")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod walk;

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

/// Whether `openat2` is worth trying (cleared the first time the kernel lacks it).
static OPENAT2: AtomicBool = AtomicBool::new(true);

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read an existing file.
    Read,
    /// Append, creating the file (and its folders) if missing.
    Append,
    /// Read and append, creating the file (and its folders) if missing.
    ReadAppend,
    /// Write from the start, creating the file (and its folders) or emptying it.
    Truncate,
    /// Create a file that must not exist yet (creating its folders).
    CreateNew,
}

impl OpenMode {
    fn creates(self) -> bool {
        self != OpenMode::Read
    }

    fn flags(self) -> OFlags {
        match self {
            OpenMode::Read => OFlags::RDONLY,
            OpenMode::Append => OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
            OpenMode::ReadAppend => OFlags::RDWR | OFlags::APPEND | OFlags::CREATE,
            OpenMode::Truncate => OFlags::WRONLY | OFlags::TRUNC | OFlags::CREATE,
            OpenMode::CreateNew => OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
        }
    }
}

/// A path that could not be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct FsError {
    /// The full path (the directory's path joined with the relative one).
    pub path: PathBuf,
    /// What went wrong.
    pub kind: FsErrorKind,
}

/// What went wrong, for an [`FsError`].
#[derive(Debug, thiserror::Error)]
pub enum FsErrorKind {
    /// The path is, or passes through, a symbolic link.
    #[error("is a symbolic link or passes through one; links are not followed here")]
    Symlink,
    /// The path names something other than what was asked for.
    #[error("is a {found}, not a {wanted}")]
    WrongType {
        /// What was found (`directory`, `FIFO`, ...).
        found: &'static str,
        /// What was needed.
        wanted: &'static str,
    },
    /// The relative path is absolute, empty, or has a `..` or `.` component.
    #[error("is not a plain relative path beneath the directory")]
    NotBeneath,
    /// The file is larger than the caller accepts.
    #[error("is larger than {limit} bytes")]
    TooLarge {
        /// The most bytes accepted.
        limit: u64,
    },
    /// Any other failure.
    #[error("{0}")]
    Io(#[source] io::Error),
}

impl FsError {
    fn new(path: PathBuf, kind: FsErrorKind) -> FsError {
        FsError { path, kind }
    }

    /// True when the path does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.kind, FsErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl From<FsError> for io::Error {
    fn from(e: FsError) -> io::Error {
        let kind = match &e.kind {
            FsErrorKind::Io(inner) => inner.kind(),
            FsErrorKind::NotBeneath => io::ErrorKind::InvalidInput,
            FsErrorKind::TooLarge { .. } => io::ErrorKind::InvalidData,
            FsErrorKind::Symlink | FsErrorKind::WrongType { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// What a path names, read without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file of this many bytes.
    File(u64),
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (FIFO, socket, device).
    Other,
}

/// An open directory; see the [crate docs](crate).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    openat2: bool,
}

impl Dir {
    /// Opens the directory at `path` (links in `path` itself are followed: the
    /// caller named it).
    pub fn open(path: &Path) -> Result<Dir, FsError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::new(path.to_path_buf(), FsErrorKind::Io(e.into())))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
            openat2: true,
        })
    }

    /// Creates the directory at `path` and its parents as needed, then opens it.
    pub fn create(path: &Path) -> Result<Dir, FsError> {
        std::fs::create_dir_all(path)
            .map_err(|e| FsError::new(path.to_path_buf(), FsErrorKind::Io(e)))?;
        Dir::open(path)
    }

    /// The same directory resolved one component at a time, never with
    /// `openat2` (what happens on kernels without it).
    pub fn without_openat2(self) -> Dir {
        Dir {
            openat2: false,
            ..self
        }
    }

    /// The directory's path, as opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's path joined with `rel`, for messages.
    pub fn display_path(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// Sets this directory's permission bits (such as `0o700`) through its
    /// descriptor, so a link swapped in at its path is not what changes.
    pub fn set_mode(&self, mode: u32) -> Result<(), FsError> {
        rustix::fs::fchmod(&self.fd, Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| FsError::new(self.path.clone(), FsErrorKind::Io(e.into())))
    }

    fn err(&self, rel: &Path, kind: FsErrorKind) -> FsError {
        FsError::new(self.path.join(rel), kind)
    }

    fn io_err(&self, rel: &Path, e: rustix::io::Errno) -> FsError {
        let kind = match e {
            rustix::io::Errno::LOOP => FsErrorKind::Symlink,
            rustix::io::Errno::XDEV => FsErrorKind::NotBeneath,
            rustix::io::Errno::NOTDIR => FsErrorKind::WrongType {
                found: "file",
                wanted: "directory",
            },
            e => FsErrorKind::Io(e.into()),
        };
        self.err(rel, kind)
    }

    /// The plain components of `rel`, or an error.
    fn components<'a>(&self, rel: &'a Path) -> Result<Vec<&'a OsStr>, FsError> {
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(name) => parts.push(name),
                _ => return Err(self.err(rel, FsErrorKind::NotBeneath)),
            }
        }
        if parts.is_empty() || parts.iter().any(|p| p.as_bytes().contains(&0)) {
            return Err(self.err(rel, FsErrorKind::NotBeneath));
        }
        Ok(parts)
    }

    /// Opens (creating if asked) the directory `parts` beneath `self`, one
    /// component at a time, refusing links.
    fn walk(&self, rel: &Path, parts: &[&OsStr], create: bool) -> Result<OwnedFd, FsError> {
        let mut current = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.io_err(rel, e))?;
        for part in parts {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let next = match rustix::fs::openat(&current, *part, flags, Mode::empty()) {
                Err(rustix::io::Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&current, *part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(self.io_err(rel, e)),
                    }
                    rustix::fs::openat(&current, *part, flags, Mode::empty())
                }
                other => other,
            }
            .map_err(|e| self.classify(rel, &current, part, e, "directory"))?;
            current = next;
        }
        Ok(current)
    }

    /// Turns an `openat` failure on `part` into an error that says what is there.
    fn classify(
        &self,
        rel: &Path,
        parent: &OwnedFd,
        part: &OsStr,
        e: rustix::io::Errno,
        wanted: &'static str,
    ) -> FsError {
        if matches!(
            e,
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NXIO
        ) {
            if let Ok(stat) = rustix::fs::statat(parent, part, AtFlags::SYMLINK_NOFOLLOW) {
                let t = FileType::from_raw_mode(stat.st_mode);
                if t == FileType::Symlink {
                    return self.err(rel, FsErrorKind::Symlink);
                }
                return self.err(
                    rel,
                    FsErrorKind::WrongType {
                        found: type_name(t),
                        wanted,
                    },
                );
            }
        }
        self.io_err(rel, e)
    }

    /// Opens the directory `rel` beneath this one, creating it (and its
    /// parents) when `create` is true.
    pub fn open_dir(&self, rel: &Path, create: bool) -> Result<Dir, FsError> {
        let parts = self.components(rel)?;
        let fd = self.walk(rel, &parts, create)?;
        Ok(Dir {
            fd,
            path: self.path.join(rel),
            openat2: self.openat2,
        })
    }

    /// Opens the regular file `rel` beneath this directory.
    pub fn open_file(&self, rel: &Path, mode: OpenMode) -> Result<File, FsError> {
        let parts = self.components(rel)?;
        let (name, parents) = parts.split_last().expect("at least one component");
        let flags = mode.flags() | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let perms = if mode.creates() {
            Mode::from_raw_mode(0o644)
        } else {
            Mode::empty()
        };
        let fd = match self.open_beneath(rel, flags, perms, mode) {
            Some(result) => result?,
            None => {
                let parent = self.walk(rel, parents, mode.creates())?;
                rustix::fs::openat(&parent, *name, flags, perms)
                    .map_err(|e| self.classify(rel, &parent, name, e, "regular file"))?
            }
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.io_err(rel, e))?;
        let t = FileType::from_raw_mode(stat.st_mode);
        if t != FileType::RegularFile {
            return Err(self.err(
                rel,
                FsErrorKind::WrongType {
                    found: type_name(t),
                    wanted: "regular file",
                },
            ));
        }
        // Back to blocking I/O (the flag only kept a FIFO from blocking the open).
        let flags = rustix::fs::fcntl_getfl(&fd).map_err(|e| self.io_err(rel, e))?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK).map_err(|e| self.io_err(rel, e))?;
        Ok(File::from(fd))
    }

    /// One `openat2` that refuses every link, when the kernel has it and the
    /// open creates no folder; `None` to walk instead.
    fn open_beneath(
        &self,
        rel: &Path,
        flags: OFlags,
        perms: Mode,
        mode: OpenMode,
    ) -> Option<Result<OwnedFd, FsError>> {
        if !self.openat2 || !OPENAT2.load(Ordering::Relaxed) {
            return None;
        }
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.fd, rel, flags, perms, resolve) {
            Ok(fd) => Some(Ok(fd)),
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                OPENAT2.store(false, Ordering::Relaxed);
                None
            }
            // A missing folder is created by the walk; a link or a wrong type is
            // named by it.
            Err(rustix::io::Errno::NOENT) if mode.creates() => None,
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NXIO) => {
                None
            }
            Err(e) => Some(Err(self.io_err(rel, e))),
        }
    }

    /// Reads the whole regular file `rel`, at most `limit` bytes; `Ok(None)`
    /// when it does not exist.
    pub fn read(&self, rel: &Path, limit: u64) -> Result<Option<Vec<u8>>, FsError> {
        let mut file = match self.open_file(rel, OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        (&mut file)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| self.err(rel, FsErrorKind::Io(e)))?;
        if bytes.len() as u64 > limit {
            return Err(self.err(rel, FsErrorKind::TooLarge { limit }));
        }
        Ok(Some(bytes))
    }

    /// Writes `bytes` to `rel`, replacing it (creating folders as needed).
    pub fn write(&self, rel: &Path, bytes: &[u8]) -> Result<(), FsError> {
        let mut file = self.open_file(rel, OpenMode::Truncate)?;
        file.write_all(bytes)
            .and_then(|()| file.flush())
            .map_err(|e| self.err(rel, FsErrorKind::Io(e)))
    }

    /// Writes `bytes` to a temporary file beside `rel`, then renames it over
    /// `rel`: a reader sees the old content or the new, never a mix. A link at
    /// `rel` is replaced, not followed.
    pub fn write_atomic(&self, rel: &Path, bytes: &[u8]) -> Result<(), FsError> {
        let parts = self.components(rel)?;
        let (name, parents) = parts.split_last().expect("at least one component");
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp_rel = rel.with_file_name(&tmp_name);
        let _ = self.remove_file(&tmp_rel);
        let mut file = self.open_file(&tmp_rel, OpenMode::CreateNew)?;
        file.write_all(bytes)
            .and_then(|()| file.sync_data())
            .map_err(|e| self.err(&tmp_rel, FsErrorKind::Io(e)))?;
        let parent = self.walk(rel, parents, true)?;
        rustix::fs::renameat(&parent, &tmp_name, &parent, *name).map_err(|e| self.io_err(rel, e))
    }

    /// Removes the file (or link) `rel`; a missing one is not an error.
    pub fn remove_file(&self, rel: &Path) -> Result<(), FsError> {
        let parts = self.components(rel)?;
        let (name, parents) = parts.split_last().expect("at least one component");
        let parent = match self.walk(rel, parents, false) {
            Ok(fd) => fd,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        match rustix::fs::unlinkat(&parent, *name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(self.io_err(rel, e)),
        }
    }

    /// What `rel` names, without following a link; `Ok(None)` when nothing.
    pub fn entry(&self, rel: &Path) -> Result<Option<EntryKind>, FsError> {
        let parts = self.components(rel)?;
        let (name, parents) = parts.split_last().expect("at least one component");
        let parent = match self.walk(rel, parents, false) {
            Ok(fd) => fd,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&parent, *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => EntryKind::File(stat.st_size as u64),
                FileType::Directory => EntryKind::Dir,
                FileType::Symlink => EntryKind::Symlink,
                _ => EntryKind::Other,
            })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(self.io_err(rel, e)),
        }
    }

    /// True when `rel` is a regular file reached without a link.
    pub fn is_file(&self, rel: &Path) -> bool {
        matches!(self.entry(rel), Ok(Some(EntryKind::File(_))))
    }

    /// The names in this directory with what each is, sorted by name.
    pub fn list(&self) -> Result<Vec<(String, EntryKind)>, FsError> {
        let fd = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.io_err(Path::new("."), e))?;
        let dir = rustix::fs::Dir::new(fd).map_err(|e| self.io_err(Path::new("."), e))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| self.io_err(Path::new("."), e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = String::from_utf8_lossy(name).into_owned();
            let kind = self.entry(Path::new(&name))?.unwrap_or(EntryKind::Other);
            out.push((name, kind));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Copies at most `limit` bytes from `from` into `rel` (replacing it);
    /// returns the bytes copied and whether `from` had more.
    pub fn copy_from(
        &self,
        rel: &Path,
        from: &mut dyn Read,
        limit: u64,
    ) -> Result<(u64, bool), FsError> {
        let mut file = self.open_file(rel, OpenMode::Truncate)?;
        let copied = io::copy(&mut from.take(limit), &mut file)
            .map_err(|e| self.err(rel, FsErrorKind::Io(e)))?;
        let mut probe = [0u8; 1];
        let more = copied == limit && from.read(&mut probe).map(|n| n > 0).unwrap_or(false);
        Ok((copied, more))
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Opens the file at `path` with its last component not followed: the folders
/// above it are the caller's choice and are created as needed.
pub fn open_file_nofollow(path: &Path, mode: OpenMode) -> Result<File, FsError> {
    let name = path
        .file_name()
        .ok_or_else(|| FsError::new(path.to_path_buf(), FsErrorKind::NotBeneath))?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = match (parent, mode.creates()) {
        (Some(p), true) => Dir::create(p)?,
        (Some(p), false) => Dir::open(p)?,
        (None, _) => Dir::open(Path::new("."))?,
    };
    dir.open_file(Path::new(name), mode)
        .map_err(|e| FsError::new(path.to_path_buf(), e.kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn both(dir: &Path) -> [Dir; 2] {
        [
            Dir::open(dir).unwrap(),
            Dir::open(dir).unwrap().without_openat2(),
        ]
    }

    #[test]
    fn a_folder_is_made_private_through_its_descriptor() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let sub = dir.open_dir(Path::new("private"), true).unwrap();
        sub.set_mode(0o700).unwrap();
        let mode = std::fs::metadata(tmp.path().join("private"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn files_and_folders_are_created_beneath() {
        let tmp = tempfile::tempdir().unwrap();
        for (i, dir) in both(tmp.path()).into_iter().enumerate() {
            let rel = PathBuf::from(format!("a{i}/b/c.txt"));
            let mut f = dir.open_file(&rel, OpenMode::Append).unwrap();
            f.write_all(b"one\n").unwrap();
            dir.open_file(&rel, OpenMode::Append)
                .unwrap()
                .write_all(b"two\n")
                .unwrap();
            assert_eq!(
                dir.read(&rel, 100).unwrap().unwrap(),
                b"one\ntwo\n".to_vec()
            );
            assert!(matches!(
                dir.read(&rel, 3).unwrap_err().kind,
                FsErrorKind::TooLarge { limit: 3 }
            ));
            assert_eq!(dir.read(Path::new("missing"), 10).unwrap(), None);
            dir.write_atomic(&rel, b"new").unwrap();
            assert_eq!(dir.read(&rel, 100).unwrap().unwrap(), b"new".to_vec());
            assert_eq!(dir.entry(&rel).unwrap(), Some(EntryKind::File(3)));
        }
    }

    #[test]
    fn links_are_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim.txt"), "keep").unwrap();
        symlink(outside.join("victim.txt"), root.join("file-link")).unwrap();
        symlink(outside.join("absent.txt"), root.join("dangling")).unwrap();
        symlink(&outside, root.join("dir-link")).unwrap();
        for dir in both(&root) {
            for rel in [
                "file-link",
                "dangling",
                "dir-link/victim.txt",
                "dir-link/new.txt",
            ] {
                for mode in [
                    OpenMode::Read,
                    OpenMode::Append,
                    OpenMode::Truncate,
                    OpenMode::CreateNew,
                ] {
                    let err = dir.open_file(Path::new(rel), mode).unwrap_err();
                    assert!(
                        matches!(err.kind, FsErrorKind::Symlink | FsErrorKind::Io(_)),
                        "{rel} {mode:?}: {err}"
                    );
                    assert!(err.to_string().contains(rel), "{err}");
                }
            }
            let err = dir
                .open_file(Path::new("file-link"), OpenMode::Append)
                .unwrap_err();
            assert!(matches!(err.kind, FsErrorKind::Symlink), "{err}");
            assert!(dir.open_dir(Path::new("dir-link"), true).is_err());
            assert!(dir.write(Path::new("dangling"), b"x").is_err());
            assert_eq!(
                dir.entry(Path::new("dangling")).unwrap(),
                Some(EntryKind::Symlink)
            );
            assert!(!dir.is_file(Path::new("file-link")));
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("victim.txt")).unwrap(),
            "keep"
        );
        assert!(!outside.join("absent.txt").exists());
        assert!(!outside.join("new.txt").exists());
    }

    #[test]
    fn paths_must_stay_beneath_and_files_must_be_regular() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            tmp.path().join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        for dir in both(tmp.path()) {
            for rel in ["../x", "/etc/passwd", "", "a/../b", "./a"] {
                let err = dir.open_file(Path::new(rel), OpenMode::Read).unwrap_err();
                assert!(matches!(err.kind, FsErrorKind::NotBeneath), "{rel}: {err}");
            }
            let err = dir.open_file(Path::new("sub"), OpenMode::Read).unwrap_err();
            assert!(
                matches!(
                    err.kind,
                    FsErrorKind::WrongType {
                        found: "directory",
                        ..
                    }
                ),
                "{err}"
            );
            for mode in [OpenMode::Read, OpenMode::Append] {
                let err = dir.open_file(Path::new("fifo"), mode).unwrap_err();
                assert!(err.to_string().contains("fifo"), "{err}");
            }
        }
    }

    #[test]
    fn a_symlinked_final_component_is_refused_through_the_path_helper() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("victim"), "v").unwrap();
        symlink(tmp.path().join("victim"), tmp.path().join("results.jsonl")).unwrap();
        let err = open_file_nofollow(&tmp.path().join("results.jsonl"), OpenMode::ReadAppend)
            .unwrap_err();
        assert!(matches!(err.kind, FsErrorKind::Symlink), "{err}");
        assert!(err.to_string().contains("results.jsonl"), "{err}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("victim")).unwrap(),
            "v"
        );
    }
}
