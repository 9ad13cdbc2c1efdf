//! A file system of its own for what one run may fill: [`ScratchFs`].
//!
//! A folder bound writable into a sandbox lives on the harness's file system
//! (the host's `/tmp` by default). Bytes written there are charged to the run's
//! memory group, but inodes are not bounded per run: an empty file costs under
//! a kilobyte of memory, so a run within its memory bound can still take every
//! inode of the shared file system, and with them the grading folders of
//! every other run. Mounting a `tmpfs` with its own `size` and `nr_inodes` at
//! the folder gives the run a file system it can fill without touching anyone
//! else's. Mounting needs `CAP_SYS_ADMIN` in the host's namespaces (the
//! harness running as root); without it [`ScratchFs::mount`] says why and the
//! caller records that the folder is shared.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The mount source of a scratch file system: this prefix and the pid of the
/// harness that mounted it, so that a later harness can tell one left by a
/// harness that is gone ([`detach_orphans`]).
const SOURCE_PREFIX: &str = "pdl-swe-scratch-";

/// Detaches the scratch file systems that harnesses no longer running left
/// mounted (a harness killed with SIGKILL cannot detach its own); returns
/// where they were. Best effort: what cannot be read or detached is left.
pub fn detach_orphans() -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut detached = Vec::new();
    for line in table.lines() {
        // "id parent major:minor root mountpoint options ... - fstype source superoptions"
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let mut tail = after.split(' ');
        let (Some("tmpfs"), Some(source)) = (tail.next(), tail.next()) else {
            continue;
        };
        let Some(pid) = source
            .strip_prefix(SOURCE_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let Some(mountpoint) = before.split(' ').nth(4) else {
            continue;
        };
        let path = PathBuf::from(unescape_mountinfo(mountpoint));
        if detach(&path).is_ok() {
            detached.push(path);
        }
    }
    detached
}

/// Undoes mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(value as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every scratch file system mounted now, for [`detach_all`].
static MOUNTED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Detaches every scratch file system still mounted: for a process about to
/// exit without unwinding (a second Ctrl-C), so that no mount outlives it.
pub fn detach_all() {
    let mounted = std::mem::take(&mut *MOUNTED.lock().unwrap_or_else(|e| e.into_inner()));
    for path in mounted {
        let _ = detach(&path);
    }
}

/// The bounds of one scratch file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchBounds {
    /// Bytes of file content (the run's memory group is charged as well).
    pub bytes: u64,
    /// Files, folders and links together.
    pub inodes: u64,
}

impl Default for ScratchBounds {
    fn default() -> Self {
        ScratchBounds {
            bytes: 4 << 30,
            inodes: 500_000,
        }
    }
}

/// A `tmpfs` mounted at a folder for as long as the value lives; dropping it
/// detaches the mount (lazily, so a process still inside cannot keep it).
#[derive(Debug)]
pub struct ScratchFs {
    path: PathBuf,
    bounds: ScratchBounds,
}

impl ScratchFs {
    /// Mounts a fresh `tmpfs` with `bounds` at `path` (created if missing;
    /// whatever a mount left there by a killed harness is detached first),
    /// mode 0700, `nosuid`, `nodev`.
    pub fn mount(path: &Path, bounds: ScratchBounds) -> io::Result<ScratchFs> {
        std::fs::create_dir_all(path)?;
        // A harness killed earlier may have left its mount here: never stack.
        while detach(path).is_ok() {}
        let target = cstring(path)?;
        let data = CString::new(format!(
            "size={},nr_inodes={},mode=0700",
            bounds.bytes.max(4096),
            bounds.inodes.max(16)
        ))
        .expect("no NUL in mount options");
        // SAFETY: every pointer is a valid NUL-terminated string that outlives
        // the call.
        let source = CString::new(format!("{SOURCE_PREFIX}{}", std::process::id()))
            .expect("no NUL in a number");
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        MOUNTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf());
        Ok(ScratchFs {
            path: path.to_path_buf(),
            bounds,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its bounds.
    pub fn bounds(&self) -> ScratchBounds {
        self.bounds
    }
}

impl Drop for ScratchFs {
    fn drop(&mut self) {
        MOUNTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.path);
        let _ = detach(&self.path);
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// Detaches the mount at `path`; an error when nothing is mounted there.
fn detach(path: &Path) -> io::Result<()> {
    let target = cstring(path)?;
    // SAFETY: `target` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mounting needs root; `PDL_SWE_ALLOW_UNPRIVILEGED=1` lets a developer
    /// without it run the other tests (CI never sets it).
    fn may_mount() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root || std::env::var_os("PDL_SWE_ALLOW_UNPRIVILEGED").is_some(),
            "scratch file systems need root; set PDL_SWE_ALLOW_UNPRIVILEGED=1 to run without"
        );
        root
    }

    #[test]
    fn a_scratch_fs_bounds_inodes_and_bytes_and_goes_away_when_dropped() {
        if !may_mount() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("scratch");
        let fs = ScratchFs::mount(
            &at,
            ScratchBounds {
                bytes: 1 << 20,
                inodes: 100,
            },
        )
        .unwrap();
        let mut made = 0;
        let full = loop {
            match std::fs::write(at.join(format!("f{made}")), b"") {
                Ok(()) => made += 1,
                Err(e) => break e,
            }
            assert!(made < 1000, "the inode bound did not hold");
        };
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
        assert!(made < 100, "{made}");
        // The host's file system is untouched.
        std::fs::write(dir.path().join("beside"), b"x").unwrap();
        let big = std::fs::write(at.join("big"), vec![1u8; 2 << 20]);
        assert!(big.is_err());
        drop(fs);
        assert_eq!(std::fs::read_dir(&at).unwrap().count(), 0);
        // The source names this harness; a mount of a harness that is gone is
        // found and detached by the next one.
        let other = ScratchFs::mount(&at, ScratchBounds::default()).unwrap();
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(table.contains(&format!("{SOURCE_PREFIX}{}", std::process::id())));
        std::mem::forget(other);
        assert!(detach_orphans().is_empty(), "our own mount is no orphan");
        detach(&at).unwrap();
        assert_eq!(unescape_mountinfo("/tmp/a\\040b"), "/tmp/a b");
        // A mount left behind is detached, never stacked.
        let first = ScratchFs::mount(&at, ScratchBounds::default()).unwrap();
        std::fs::write(at.join("old"), b"x").unwrap();
        std::mem::forget(first);
        let second = ScratchFs::mount(&at, ScratchBounds::default()).unwrap();
        assert!(!at.join("old").exists());
        drop(second);
        assert!(!at.join("old").exists());
        assert!(detach(&at).is_err(), "a mount was left behind");
    }
}
