//! The helper side of the namespace sandbox: everything here runs in the helper
//! process and its forks ([`init_main`] is the entry point). See the parent
//! module for how a run is set up.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{InitSpec, SANDBOX_ID, SPEC_FD, STATUS_FD};
use crate::command::{NetworkPolicy, PRIVATE_HOME};
use crate::supervise::{apply_resource_limits, pipe, set_oom_score_adj};

/// Host folders bound read-only when they exist.
const SYSTEM_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

fn status_line(line: &str) {
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    // SAFETY: writing a buffer to a descriptor we own; errors are ignored on purpose.
    unsafe {
        libc::write(STATUS_FD, bytes.as_ptr().cast(), bytes.len());
    }
}

fn fail(message: impl AsRef<str>) -> ! {
    status_line(&format!("error {}", message.as_ref().replace('\n', " ")));
    // SAFETY: ending the process without unwinding is what we want here.
    unsafe { libc::_exit(125) }
}

fn errno_message(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes())
        .unwrap_or_else(|_| fail(format!("path with NUL: {}", p.display())))
}

fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let source = source.map(cstr);
    let target_c = cstr(target);
    let fstype = fstype.map(|s| CString::new(s).expect("static fs type"));
    let data = data.map(|s| CString::new(s).expect("static mount data"));
    // SAFETY: every pointer is either null or a valid NUL-terminated string that
    // outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target_c.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    };
    if rc != 0 {
        return Err(errno_message(&format!("mount {}", target.display())));
    }
    Ok(())
}

fn inside(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap_or(host))
}

/// Binds `host` at the same path under `root`, read-only unless `writable`,
/// `noexec` when asked.
fn bind(root: &Path, host: &Path, writable: bool, noexec: bool) -> Result<(), String> {
    let meta = std::fs::metadata(host).map_err(|e| format!("{}: {e}", host.display()))?;
    let target = inside(root, host);
    if meta.is_dir() {
        std::fs::create_dir_all(&target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("mkdir {}: {e}", parent.display()))?;
        }
        if !target.exists() {
            File::create(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
        }
    }
    // System folders may hold submounts; the command's own paths never need theirs.
    let recursive = if SYSTEM_PATHS.iter().any(|s| Path::new(s) == host) {
        libc::MS_REC
    } else {
        0
    };
    mount(Some(host), &target, None, libc::MS_BIND | recursive, None)?;
    let mut flags =
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | locked_flags(&target);
    if !writable {
        flags |= libc::MS_RDONLY;
    }
    if noexec {
        flags |= libc::MS_NOEXEC;
    }
    mount(None, &target, None, flags, None)
}

/// A fresh tmpfs of at most `size` bytes at `target`, owned by the command's
/// user.
fn private_tmpfs(target: &Path, size: u64, mode: &str, noexec: bool) -> Result<(), String> {
    std::fs::create_dir_all(target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if noexec {
        flags |= libc::MS_NOEXEC;
    }
    let data = format!("size={size},mode={mode},uid={SANDBOX_ID},gid={SANDBOX_ID}");
    mount(
        Some(Path::new("tmpfs")),
        target,
        Some("tmpfs"),
        flags,
        Some(&data),
    )
}

/// The flags of the mount under `path` that a remount in a user namespace must
/// keep (the kernel refuses to clear them).
fn locked_flags(path: &Path) -> libc::c_ulong {
    let c = cstr(path);
    // SAFETY: statvfs fills the zeroed struct we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let mut flags = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    flags
}

fn build_root(spec: &InitSpec) -> Result<(), String> {
    let root = &spec.root;
    let cmd = &spec.command;
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    mount(
        Some(Path::new("tmpfs")),
        root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755,size=16m"),
    )?;
    let mut bound: Vec<PathBuf> = Vec::new();
    for sys in SYSTEM_PATHS {
        let host = Path::new(sys);
        let Ok(meta) = std::fs::symlink_metadata(host) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(host).map_err(|e| format!("{sys}: {e}"))?;
            std::os::unix::fs::symlink(&target, inside(root, host))
                .map_err(|e| format!("symlink {sys}: {e}"))?;
        } else if meta.is_dir() {
            bind(root, host, false, false)?;
            bound.push(host.to_path_buf());
        }
    }
    // Private /tmp and /var/tmp: fresh tmpfs mounts, or the command's own
    // scratch folder on the host.
    for t in ["/tmp", "/var/tmp"] {
        let target = inside(root, Path::new(t));
        match cmd.memory_scratch {
            Some(size) => private_tmpfs(&target, size, "1777", cmd.noexec)?,
            None => {
                std::fs::create_dir_all(&target).map_err(|e| format!("mkdir {t}: {e}"))?;
                mount(Some(&cmd.tmp), &target, None, libc::MS_BIND, None)?;
                let mut flags = libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_NOSUID
                    | libc::MS_NODEV
                    | locked_flags(&target);
                if cmd.noexec {
                    flags |= libc::MS_NOEXEC;
                }
                mount(None, &target, None, flags, None)?;
            }
        }
    }
    let covered = |p: &Path, bound: &[PathBuf]| bound.iter().any(|b| p.starts_with(b));
    for path in &cmd.readable {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if !canonical.exists() || covered(&canonical, &bound) {
            continue;
        }
        bind(root, &canonical, false, false)?;
        bound.push(canonical);
    }
    for path in &cmd.data {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if canonical.exists() {
            bind(root, &canonical, false, true)?;
        }
    }
    for path in &cmd.writable {
        bind(root, path, true, cmd.noexec)?;
    }
    match cmd.memory_scratch {
        Some(size) => private_tmpfs(
            &inside(root, Path::new(PRIVATE_HOME)),
            size,
            "0700",
            cmd.noexec,
        )?,
        None => bind(root, &cmd.home, true, cmd.noexec)?,
    }
    if let NetworkPolicy::Gateway { socket, .. } = &cmd.network {
        let dir = socket.parent().ok_or("the gateway socket has no folder")?;
        bind(root, dir, false, false)?;
    }
    // The harness's own executable (which may embed data no run may read) is
    // hidden behind an empty file wherever a bind made it visible.
    let empty = root.join(".empty");
    File::create(&empty).map_err(|e| format!("create {}: {e}", empty.display()))?;
    for host in &spec.mask {
        let target = inside(root, host);
        if std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_file()) {
            mount(Some(&empty), &target, None, libc::MS_BIND, None)?;
            mount(
                None,
                &target,
                None,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked_flags(&target),
                None,
            )?;
        }
    }
    // A minimal /dev.
    let dev = root.join("dev");
    std::fs::create_dir_all(&dev).map_err(|e| format!("mkdir /dev: {e}"))?;
    mount(
        Some(Path::new("tmpfs")),
        &dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=1m"),
    )?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new("/dev").join(node);
        if !host.exists() {
            continue;
        }
        let target = dev.join(node);
        File::create(&target).map_err(|e| format!("create /dev/{node}: {e}"))?;
        mount(Some(&host), &target, None, libc::MS_BIND, None)?;
    }
    for (link, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(to, dev.join(link))
            .map_err(|e| format!("symlink /dev/{link}: {e}"))?;
    }
    let shm = dev.join("shm");
    std::fs::create_dir_all(&shm).map_err(|e| format!("mkdir /dev/shm: {e}"))?;
    // Shared memory is as writable as /tmp: no more executable than it.
    let mut shm_flags = libc::MS_NOSUID | libc::MS_NODEV;
    if cmd.noexec {
        shm_flags |= libc::MS_NOEXEC;
    }
    mount(
        Some(Path::new("tmpfs")),
        &shm,
        Some("tmpfs"),
        shm_flags,
        Some("mode=1777,size=64m"),
    )?;
    let proc_dir = root.join("proc");
    std::fs::create_dir_all(&proc_dir).map_err(|e| format!("mkdir /proc: {e}"))?;
    mount(
        Some(Path::new("proc")),
        &proc_dir,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    // Pivot.
    let old = root.join(".oldroot");
    std::fs::create_dir_all(&old).map_err(|e| format!("mkdir .oldroot: {e}"))?;
    std::env::set_current_dir(root).map_err(|e| format!("chdir new root: {e}"))?;
    let dot = CString::new(".").expect("static");
    let old_rel = CString::new(".oldroot").expect("static");
    // SAFETY: pivot_root with two valid NUL-terminated paths.
    if unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), old_rel.as_ptr()) } != 0 {
        return Err(errno_message("pivot_root"));
    }
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    let old_abs = CString::new("/.oldroot").expect("static");
    // SAFETY: unmounting a path we just created.
    if unsafe { libc::umount2(old_abs.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(errno_message("umount old root"));
    }
    let _ = std::fs::remove_dir("/.oldroot");
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )?;
    Ok(())
}

fn loopback_up() -> Result<(), String> {
    // SAFETY: a plain datagram socket used only for the interface ioctls below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno_message("socket"));
    }
    // SAFETY: `fd` was just returned by socket() and is ours.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo\0".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(errno_message("SIOCGIFFLAGS lo"));
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(errno_message("SIOCSIFFLAGS lo"));
        }
    }
    Ok(())
}

/// Forwards connections to `127.0.0.1:port` to the gateway's Unix socket. Runs in
/// its own process inside the sandbox until the namespace ends. It keeps the
/// sandbox's setup identity (not the command's), so it can reach the harness's
/// socket; it only copies bytes.
fn gateway_forwarder(port: u16, socket: &Path, ready: OwnedFd) -> ! {
    let listener = match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => fail(format!(
            "gateway route: cannot listen on 127.0.0.1:{port}: {e}"
        )),
    };
    let _ = File::from(ready).write_all(b"r");
    for stream in listener.incoming() {
        let Ok(client) = stream else { continue };
        let socket = socket.to_path_buf();
        std::thread::spawn(move || {
            let Ok(upstream) = std::os::unix::net::UnixStream::connect(&socket) else {
                return;
            };
            let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), upstream.try_clone()) else {
                return;
            };
            let (mut c1, mut u1) = (client, upstream);
            let t = std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut u2);
                let _ = u2.shutdown(std::net::Shutdown::Write);
            });
            let _ = std::io::copy(&mut u1, &mut c1);
            let _ = c1.shutdown(std::net::Shutdown::Write);
            let _ = t.join();
        });
    }
    // SAFETY: leaving the forwarder process.
    unsafe { libc::_exit(0) }
}

fn write_file(path: &str, content: &str) -> Result<(), String> {
    std::fs::write(path, content).map_err(|e| format!("write {path}: {e}"))
}

/// Gives up every privilege of the sandbox's first process. As root on the host,
/// the uid inside maps to host nobody; otherwise a nested user namespace maps the
/// uid to `SANDBOX_ID`, and exec drops the capabilities.
fn drop_privileges(host_is_root: bool) {
    // SAFETY: plain credential syscalls; failures end the process.
    unsafe {
        if host_is_root {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                fail(errno_message("setgroups"));
            }
            if libc::setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) != 0 {
                fail(errno_message("setresgid"));
            }
            if libc::setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) != 0 {
                fail(errno_message("setresuid"));
            }
        } else {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                fail(errno_message("unshare nested user namespace"));
            }
            if let Err(e) = write_file("/proc/self/setgroups", "deny")
                .and_then(|_| write_file("/proc/self/uid_map", &format!("{SANDBOX_ID} 0 1\n")))
                .and_then(|_| write_file("/proc/self/gid_map", &format!("{SANDBOX_ID} 0 1\n")))
            {
                fail(e);
            }
            if libc::setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) != 0
                || libc::setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) != 0
            {
                fail(errno_message("switch to the sandbox user"));
            }
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            fail(errno_message("no_new_privs"));
        }
    }
}

fn wait_status_line(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        "exit 255".into()
    }
}

/// The sandbox's first process: build the root, start the command, reap, report.
fn namespace_init(spec: InitSpec, sync_read: OwnedFd) -> ! {
    // Wait for the outside to write our maps.
    let mut byte = [0u8; 1];
    if File::from(sync_read).read_exact(&mut byte).is_err() {
        fail("the helper did not finish the user namespace maps");
    }
    let host_is_root = spec.host_uid == 0;
    if let Err(e) = build_root(&spec) {
        fail(e);
    }
    if let Err(e) = loopback_up() {
        fail(e);
    }
    if spec.command.noexec {
        // No memory file the command makes can be executed either (a shared
        // library written to a memfd and loaded through /proc/self/fd). The
        // setting belongs to this PID namespace and can only be raised; a
        // kernel without it (before 6.3) or an unprivileged host leaves
        // memfds as they were, and the noexec mounts still hold.
        let _ = write_file("/proc/sys/vm/memfd_noexec", "2");
    }
    let host = CString::new("pdl-sandbox").expect("static");
    // SAFETY: a valid buffer and length.
    unsafe { libc::sethostname(host.as_ptr(), 11) };
    let cmd = &spec.command;
    if let NetworkPolicy::Gateway { port, socket } = &cmd.network {
        let (ready_read, ready_write) = pipe().unwrap_or_else(|e| fail(format!("route pipe: {e}")));
        // SAFETY: fork in a single-threaded process.
        match unsafe { libc::fork() } {
            -1 => fail(errno_message("fork gateway route")),
            0 => {
                drop(ready_read);
                gateway_forwarder(*port, socket, ready_write)
            }
            _ => {}
        }
        drop(ready_write);
        // The command starts once the route listens.
        let mut byte = [0u8; 1];
        if File::from(ready_read).read_exact(&mut byte).is_err() {
            fail("the gateway route did not start");
        }
    }
    // SAFETY: fork in a single-threaded process.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail(errno_message("fork command"));
    }
    if child == 0 {
        // The OOM killer takes the command's processes first, whatever their
        // size: raising the score needs no privilege (lowering the helper's
        // does, and is only tried).
        set_oom_score_adj(b"1000");
        drop_privileges(host_is_root);
        apply_resource_limits(&cmd.limits, host_is_root);
        let mut exec = Command::new(&cmd.program);
        exec.args(&cmd.args)
            .env_clear()
            .envs(&cmd.env)
            .env("HOME", cmd.home_inside())
            .env("TMPDIR", "/tmp")
            .current_dir(&cmd.cwd);
        let error = exec.exec();
        status_line(&format!("spawn_error {}: {error}", cmd.program.display()));
        // SAFETY: leaving the failed child.
        unsafe { libc::_exit(127) }
    }
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child of this process.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == child {
            status_line(&wait_status_line(status));
            // SAFETY: ending pid 1 ends the namespace and every process in it.
            unsafe { libc::_exit(0) }
        }
        if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            fail(errno_message("waitpid"));
        }
    }
}

/// The helper's entry point: reads the spec from descriptor 4, creates the
/// namespaces and reports on descriptor 3. Must run in a fresh,
/// single-threaded process (call it first thing in `main`). Never returns.
pub fn init_main() -> ! {
    // SAFETY: making the status descriptor close-on-exec so the command never
    // inherits it.
    unsafe { libc::fcntl(STATUS_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the runner handed the spec pipe's read end over at SPEC_FD; this
    // process owns it from here on.
    let spec_file = unsafe { File::from_raw_fd(SPEC_FD) };
    let mut bytes = Vec::new();
    let spec: InitSpec = match spec_file
        .take(64 << 20)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => fail(format!("cannot read the sandbox spec: {e}")),
    };
    let (sync_read, sync_write) = pipe().unwrap_or_else(|e| fail(format!("sync pipe: {e}")));
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    // SAFETY: a fork-like clone (no new stack, no shared memory) of a
    // single-threaded process.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        fail(format!(
            "{} (user namespaces may be disabled: check `sysctl user.max_user_namespaces` and `kernel.unprivileged_userns_clone`, or pass --sandbox none)",
            errno_message("cannot create namespaces")
        ));
    }
    if pid == 0 {
        // Should the helper die (the harness gone), the namespace goes with
        // it: its first process's death ends every process in it.
        // SAFETY: prctl with integer arguments on this process.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
        drop(sync_write);
        namespace_init(spec, sync_read);
    }
    drop(sync_read);
    // The harness's SIGTERM is for the command; this process waits for the
    // namespace to end (or for the SIGKILL that follows the grace period).
    // SAFETY: changing this process's own disposition.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    let pid = pid as i32;
    let maps = if spec.host_uid == 0 {
        (
            None,
            format!("0 0 1\n{SANDBOX_ID} {} 1\n", spec.run_id),
            format!("0 0 1\n{SANDBOX_ID} {} 1\n", spec.run_id),
        )
    } else {
        (
            Some("deny"),
            format!("0 {} 1\n", spec.host_uid),
            format!("0 {} 1\n", spec.host_gid),
        )
    };
    let written = maps
        .0
        .map_or(Ok(()), |d| write_file(&format!("/proc/{pid}/setgroups"), d))
        .and_then(|_| write_file(&format!("/proc/{pid}/uid_map"), &maps.1))
        .and_then(|_| write_file(&format!("/proc/{pid}/gid_map"), &maps.2));
    if let Err(e) = written {
        // SAFETY: ending the half-made namespace.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        fail(format!("cannot write the user namespace maps: {e}"));
    }
    let mut sync = File::from(sync_write);
    let _ = sync.write_all(b"g");
    drop(sync);
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            fail(errno_message("waitpid namespace init"));
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        125
    };
    // SAFETY: leaving the helper.
    unsafe { libc::_exit(code) }
}
