//! Reading a whole tree that someone else shaped ([`walk`]): every entry by
//! its directory's descriptor, never through a link, with bounds on how many
//! entries, how deep, how long a path and how many bytes are read.
//!
//! A path longer than `PATH_MAX` is no obstacle (nothing is opened by its full
//! path), a FIFO never blocks (files are opened non-blocking and must be
//! regular), a sparse or endless file is read only up to the bound the caller
//! asks for, and a file swapped for something else between the look and the
//! open is caught by comparing the two.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Bounds on a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkLimits {
    /// Entries (files, folders, links, ...) seen in all.
    pub max_entries: usize,
    /// Folders nested below the root.
    pub max_depth: usize,
    /// Bytes of a relative path.
    pub max_path_bytes: usize,
    /// Bytes read from files in all.
    pub max_read_bytes: u64,
}

impl Default for WalkLimits {
    fn default() -> Self {
        WalkLimits {
            max_entries: 100_000,
            max_depth: 64,
            max_path_bytes: 4096,
            max_read_bytes: 256 << 20,
        }
    }
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkKind {
    /// A regular file.
    File {
        /// Its size.
        size: u64,
        /// Its permission bits.
        mode: u32,
    },
    /// A folder.
    Dir,
    /// A symbolic link, with its target (at most 4 KiB of it, lossy UTF-8).
    Symlink(String),
    /// A FIFO, socket or device.
    Other(&'static str),
}

/// What the walk should do with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Nothing more (a folder is not entered, a file not read).
    Skip,
    /// Enter the folder.
    Descend,
    /// Read the file, at most this many bytes.
    Read(u64),
}

/// One entry the walk reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    /// Its path relative to the root, with `/` separators.
    pub path: String,
    /// What it is.
    pub kind: WalkKind,
    /// Its content, when asked for and within the bound (`None` otherwise).
    pub content: Option<Vec<u8>>,
    /// True when it was asked for but is larger than the bound.
    pub too_large: bool,
}

/// Why a walk stopped.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The root itself cannot be opened.
    #[error("{}: {source}", path.display())]
    Root {
        /// The root.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// More entries than allowed.
    #[error("more than {0} files and folders")]
    TooManyEntries(usize),
    /// Folders nested deeper than allowed.
    #[error("folders nested more than {limit} deep (at {path})")]
    TooDeep {
        /// The bound.
        limit: usize,
        /// Where it was passed (cut to 200 bytes).
        path: String,
    },
    /// A path longer than allowed.
    #[error("a path longer than {limit} bytes (starting {path})")]
    PathTooLong {
        /// The bound.
        limit: usize,
        /// Its first 200 bytes.
        path: String,
    },
    /// A name that is not UTF-8.
    #[error("a file name that is not UTF-8 (in {folder})")]
    NotUtf8 {
        /// The folder it is in.
        folder: String,
    },
    /// More bytes to read than allowed.
    #[error("more than {0} bytes of files to read")]
    TooMuchToRead(u64),
    /// An entry could not be read.
    #[error("{path}: {source}")]
    Entry {
        /// Its relative path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl WalkError {
    /// True when the tree's shape (not the machine) stopped the walk.
    pub fn is_tree_fault(&self) -> bool {
        !matches!(self, WalkError::Root { .. })
    }
}

fn type_of(t: FileType) -> &'static str {
    match t {
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

fn cut(path: &str) -> String {
    let mut end = path.len().min(200);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    path[..end].to_string()
}

struct Walker<'a, F> {
    limits: &'a WalkLimits,
    decide: F,
    out: Vec<Walked>,
    seen: usize,
    read: u64,
}

/// Walks the tree at `root`, asking `decide` what to do with each entry (in
/// name order, folders before their contents), and returns every entry it was
/// told about with the contents it read. The root is opened as named; nothing
/// beneath it is opened through a link.
pub fn walk(
    root: &Path,
    limits: &WalkLimits,
    decide: impl FnMut(&str, &WalkKind) -> Visit,
) -> Result<Vec<Walked>, WalkError> {
    let fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| WalkError::Root {
        path: root.to_path_buf(),
        source: e.into(),
    })?;
    let mut walker = Walker {
        limits,
        decide,
        out: Vec::new(),
        seen: 0,
        read: 0,
    };
    walker.folder(&fd, "", 0)?;
    Ok(walker.out)
}

impl<F: FnMut(&str, &WalkKind) -> Visit> Walker<'_, F> {
    fn folder(&mut self, dir: &OwnedFd, prefix: &str, depth: usize) -> Result<(), WalkError> {
        let entry_error = |path: &str, e: rustix::io::Errno| WalkError::Entry {
            path: cut(path),
            source: e.into(),
        };
        let mut names: Vec<Vec<u8>> = Vec::new();
        {
            let listing = rustix::fs::openat(
                dir,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| entry_error(prefix, e))?;
            let entries =
                rustix::fs::Dir::read_from(&listing).map_err(|e| entry_error(prefix, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| entry_error(prefix, e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                self.seen += 1;
                if self.seen > self.limits.max_entries {
                    return Err(WalkError::TooManyEntries(self.limits.max_entries));
                }
                names.push(name.to_vec());
            }
        }
        names.sort();
        for name in names {
            let Ok(text) = std::str::from_utf8(&name) else {
                return Err(WalkError::NotUtf8 {
                    folder: if prefix.is_empty() {
                        ".".into()
                    } else {
                        cut(prefix)
                    },
                });
            };
            let path = if prefix.is_empty() {
                text.to_string()
            } else {
                format!("{prefix}/{text}")
            };
            if path.len() > self.limits.max_path_bytes {
                return Err(WalkError::PathTooLong {
                    limit: self.limits.max_path_bytes,
                    path: cut(&path),
                });
            }
            let name_os = std::ffi::OsStr::from_bytes(&name);
            let stat = rustix::fs::statat(dir, name_os, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| entry_error(&path, e))?;
            let file_type = FileType::from_raw_mode(stat.st_mode);
            let kind = match file_type {
                FileType::RegularFile => WalkKind::File {
                    size: stat.st_size as u64,
                    mode: stat.st_mode & 0o7777,
                },
                FileType::Directory => WalkKind::Dir,
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(dir, name_os, Vec::new())
                        .map(|t| {
                            let bytes = t.as_bytes();
                            String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]).into_owned()
                        })
                        .unwrap_or_default();
                    WalkKind::Symlink(target)
                }
                other => WalkKind::Other(type_of(other)),
            };
            let visit = (self.decide)(&path, &kind);
            match (&kind, visit) {
                (WalkKind::Dir, Visit::Descend) => {
                    self.out.push(Walked {
                        path: path.clone(),
                        kind,
                        content: None,
                        too_large: false,
                    });
                    if depth + 1 > self.limits.max_depth {
                        return Err(WalkError::TooDeep {
                            limit: self.limits.max_depth,
                            path: cut(&path),
                        });
                    }
                    let sub = rustix::fs::openat(
                        dir,
                        name_os,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| entry_error(&path, e))?;
                    self.folder(&sub, &path, depth + 1)?;
                }
                (WalkKind::File { size, .. }, Visit::Read(limit)) => {
                    let size = *size;
                    let (content, too_large) = if size > limit {
                        (None, true)
                    } else {
                        let bytes = self.read_file(dir, name_os, &stat, limit, &path)?;
                        let too_large = bytes.is_none();
                        (bytes, too_large)
                    };
                    self.out.push(Walked {
                        path,
                        kind,
                        content,
                        too_large,
                    });
                }
                _ => self.out.push(Walked {
                    path,
                    kind,
                    content: None,
                    too_large: false,
                }),
            }
        }
        Ok(())
    }

    /// The file's bytes, or `None` when it holds more than `limit`.
    fn read_file(
        &mut self,
        dir: &OwnedFd,
        name: &std::ffi::OsStr,
        seen: &rustix::fs::Stat,
        limit: u64,
        path: &str,
    ) -> Result<Option<Vec<u8>>, WalkError> {
        let entry_error = |e: std::io::Error| WalkError::Entry {
            path: cut(path),
            source: e,
        };
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| entry_error(e.into()))?;
        let now = rustix::fs::fstat(&fd).map_err(|e| entry_error(e.into()))?;
        if FileType::from_raw_mode(now.st_mode) != FileType::RegularFile
            || now.st_ino != seen.st_ino
            || now.st_dev != seen.st_dev
        {
            return Err(entry_error(std::io::Error::other(
                "changed while it was being read",
            )));
        }
        let budget = self.limits.max_read_bytes.saturating_sub(self.read);
        if budget == 0 {
            return Err(WalkError::TooMuchToRead(self.limits.max_read_bytes));
        }
        let cap = limit.min(budget);
        let mut bytes = Vec::new();
        File::from(fd)
            .take(cap + 1)
            .read_to_end(&mut bytes)
            .map_err(entry_error)?;
        if bytes.len() as u64 > cap {
            if cap < limit {
                return Err(WalkError::TooMuchToRead(self.limits.max_read_bytes));
            }
            return Ok(None);
        }
        self.read += bytes.len() as u64;
        Ok(Some(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything(_: &str, kind: &WalkKind) -> Visit {
        match kind {
            WalkKind::Dir => Visit::Descend,
            WalkKind::File { .. } => Visit::Read(1 << 20),
            _ => Visit::Skip,
        }
    }

    #[test]
    fn entries_come_in_order_with_their_kinds_and_contents() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/c")).unwrap();
        std::fs::write(root.join("a.txt"), "A").unwrap();
        std::fs::write(root.join("b/c/d.py"), "D").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("b/link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("b/pipe").as_path(),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let got = walk(root, &WalkLimits::default(), everything).unwrap();
        let summary: Vec<(String, String)> = got
            .iter()
            .map(|w| {
                (
                    w.path.clone(),
                    match (&w.kind, &w.content) {
                        (WalkKind::File { .. }, Some(c)) => String::from_utf8(c.clone()).unwrap(),
                        (WalkKind::Dir, _) => "dir".into(),
                        (WalkKind::Symlink(t), _) => format!("-> {t}"),
                        (WalkKind::Other(k), _) => k.to_string(),
                        _ => "?".into(),
                    },
                )
            })
            .collect();
        let want: Vec<(String, String)> = [
            ("a.txt", "A"),
            ("b", "dir"),
            ("b/c", "dir"),
            ("b/c/d.py", "D"),
            ("b/link", "-> /etc/passwd"),
            ("b/pipe", "FIFO"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(summary, want);
    }

    #[test]
    fn paths_beyond_path_max_are_walked_by_descriptor_until_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        // 30 folders of 200-byte names: over PATH_MAX in all.
        let name = "d".repeat(200);
        let mut fd = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        for _ in 0..30 {
            rustix::fs::mkdirat(&fd, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
            fd = rustix::fs::openat(
                &fd,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
        }
        let limits = WalkLimits {
            max_path_bytes: 100_000,
            ..WalkLimits::default()
        };
        let got = walk(dir.path(), &limits, everything).unwrap();
        assert_eq!(got.len(), 30);
        let err = walk(dir.path(), &WalkLimits::default(), everything).unwrap_err();
        assert!(matches!(err, WalkError::PathTooLong { .. }), "{err}");
        assert!(err.is_tree_fault());
    }

    #[test]
    fn sparse_files_are_not_read_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("sparse")).unwrap();
        f.set_len(512 << 20).unwrap();
        let got = walk(dir.path(), &WalkLimits::default(), |_, k| match k {
            WalkKind::File { .. } => Visit::Read(1 << 20),
            _ => Visit::Skip,
        })
        .unwrap();
        assert!(got[0].too_large && got[0].content.is_none());
    }

    #[test]
    fn counts_depth_and_read_totals_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("f{i}")), vec![b'x'; 100]).unwrap();
        }
        let few = WalkLimits {
            max_entries: 10,
            ..WalkLimits::default()
        };
        assert!(matches!(
            walk(dir.path(), &few, everything).unwrap_err(),
            WalkError::TooManyEntries(10)
        ));
        let little = WalkLimits {
            max_read_bytes: 1000,
            ..WalkLimits::default()
        };
        assert!(matches!(
            walk(dir.path(), &little, everything).unwrap_err(),
            WalkError::TooMuchToRead(1000)
        ));
        std::fs::create_dir_all(dir.path().join("a/b/c/d")).unwrap();
        let shallow = WalkLimits {
            max_depth: 2,
            ..WalkLimits::default()
        };
        assert!(matches!(
            walk(dir.path(), &shallow, everything).unwrap_err(),
            WalkError::TooDeep { .. }
        ));
    }
}
