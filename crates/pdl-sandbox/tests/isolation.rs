//! The namespace sandbox, exercised for real: each test runs commands through the
//! `pdl-sandbox-init` helper and checks what the host sees afterwards.

use std::io::Read;
use std::net::TcpListener;
use std::os::fd::FromRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pdl_sandbox::{
    NamespaceRunner, NetworkPolicy, PlainRunner, ProcessRunner, RunStatus, SandboxCommand,
    TRUNCATION_MARKER,
};

fn runner() -> NamespaceRunner {
    NamespaceRunner::new(
        PathBuf::from(env!("CARGO_BIN_EXE_pdl-sandbox-init")),
        vec![],
    )
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn work(&self) -> PathBuf {
        let w = self.dir.path().join("work");
        std::fs::create_dir_all(&w).unwrap();
        w
    }

    fn sh(&self, script: &str) -> SandboxCommand {
        let work = self.work();
        SandboxCommand::new("/bin/sh", &work, &self.dir.path().join("scratch"))
            .args(["-c", script])
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .writable(work)
            .wall_time(Duration::from_secs(30))
    }

    fn python(&self, code: &str) -> SandboxCommand {
        let work = self.work();
        SandboxCommand::new("/usr/bin/python3", &work, &self.dir.path().join("scratch"))
            .args(["-c", code])
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .writable(work)
            .wall_time(Duration::from_secs(30))
    }
}

fn output(report: &pdl_sandbox::RunReport) -> String {
    std::fs::read_to_string(&report.output_path).unwrap_or_default()
}

#[test]
fn a_command_runs_and_reports_its_exit_code() {
    let s = Scratch::new();
    let r = runner().run(&s.sh("echo hello; echo oops >&2; exit 7"));
    assert_eq!(r.status, RunStatus::Exited { code: 7 }, "{}", output(&r));
    let out = output(&r);
    assert!(out.contains("hello") && out.contains("oops"), "{out}");
}

#[test]
fn a_missing_program_is_a_spawn_failure_not_an_infrastructure_one() {
    let s = Scratch::new();
    let mut cmd = s.sh("true");
    cmd.program = PathBuf::from("/nonexistent/program");
    let r = runner().run(&cmd);
    assert!(
        matches!(r.status, RunStatus::SpawnFailed { .. }),
        "{:?}",
        r.status
    );
    assert!(!r.status.is_infrastructure_failure());
}

#[test]
fn the_environment_is_exactly_what_was_given() {
    // Cargo sets this for every test process: it stands for any host variable.
    let secret = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let s = Scratch::new();
    let r = runner().run(&s.sh("env").env("ALLOWED", "yes"));
    let out = output(&r);
    assert!(out.contains("ALLOWED=yes"), "{out}");
    assert!(!out.contains(&secret), "a host variable leaked: {out}");
    assert!(!out.contains("CARGO_MANIFEST_DIR"), "{out}");
}

#[test]
fn the_host_network_is_unreachable_but_loopback_works_inside() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let s = Scratch::new();
    let code = format!(
        "import socket\n\
         try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n\
         except OSError as e: print('refused', e)\n\
         try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('CONNECTED-OUT')\n\
         except OSError as e: print('unreachable', e)\n\
         srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n\
         c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); c.sendall(b'ping'); print('LOCAL', a.recv(4))\n"
    );
    let r = runner().run(&s.python(&code));
    let out = output(&r);
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(
        out.contains("refused") && out.contains("unreachable"),
        "{out}"
    );
    assert!(out.contains("LOCAL b'ping'"), "{out}");
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
}

#[test]
fn writes_outside_the_workspace_never_reach_the_host() {
    let marker = format!("pdl-sandbox-escape-{}", std::process::id());
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let s = Scratch::new();
    let script = format!(
        "for d in /tmp /var/tmp {home} /usr /etc /; do echo x > $d/{marker} 2>/dev/null && echo wrote $d; done; \
         echo y > $HOME/{marker} && echo wrote-home; echo z > ./{marker} && echo wrote-work; ls -A {home} | head -5; echo end"
    );
    let r = runner().run(&s.sh(&script));
    let out = output(&r);
    assert!(
        out.contains("wrote-work") && out.contains("wrote-home"),
        "{out}"
    );
    for host_dir in ["/tmp", "/var/tmp", home.as_str(), "/usr", "/etc", "/"] {
        assert!(
            !Path::new(host_dir).join(&marker).exists(),
            "{marker} appeared in the host's {host_dir}: {out}"
        );
    }
    assert!(
        s.work().join(&marker).exists(),
        "the workspace must be writable"
    );
    assert!(
        !out.contains(".ssh") && !out.contains(".cargo"),
        "the host home is visible: {out}"
    );
}

#[test]
fn root_only_files_and_runtime_sockets_are_out_of_reach() {
    let s = Scratch::new();
    let r = runner().run(&s.sh("id -u; cat /etc/shadow >/dev/null 2>&1 && echo READ-SHADOW; ls /run /var/run /srv 2>&1 | head -3; echo end"));
    let out = output(&r);
    assert!(!out.contains("READ-SHADOW"), "{out}");
    assert!(
        out.lines().next().is_some_and(|l| l.trim() != "0"),
        "the command runs as root: {out}"
    );
}

#[test]
fn an_endless_loop_ends_within_the_bound_and_its_grace() {
    let s = Scratch::new();
    let mut cmd = s.sh("trap '' TERM; while :; do :; done");
    cmd.limits.wall_time = Duration::from_secs(2);
    cmd.limits.kill_grace = Duration::from_secs(1);
    let started = Instant::now();
    let r = runner().run(&cmd);
    assert_eq!(r.status, RunStatus::TimedOut);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
}

fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let mut buf = Vec::new();
            std::fs::File::open(e.path().join("cmdline"))
                .and_then(|mut f| f.read_to_end(&mut buf))
                .is_ok()
                && String::from_utf8_lossy(&buf).contains(marker)
        })
        .count()
}

#[test]
fn a_fork_storm_leaves_no_process_behind() {
    let marker = format!("pdlforkstorm{}", std::process::id());
    let s = Scratch::new();
    // 1500 detached sleepers in new sessions, then exit at once.
    let code = format!(
        "import subprocess\nn = 0\nfor i in range(1500):\n    try:\n        subprocess.Popen(['/bin/sh', '-c', 'exec sleep 300 # {marker}'], start_new_session=True); n += 1\n    except OSError:\n        break\nprint('started', n)\n"
    );
    let mut cmd = s.python(&code);
    cmd.limits.wall_time = Duration::from_secs(60);
    let r = runner().run(&cmd);
    assert!(
        matches!(r.status, RunStatus::Exited { .. }),
        "{:?}: {}",
        r.status,
        output(&r)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        processes_with(&marker),
        0,
        "processes survived: {}",
        output(&r)
    );
}

#[test]
fn huge_output_is_cut_at_the_bound_without_buffering() {
    let s = Scratch::new();
    let mut cmd = s.sh("head -c 200000000 /dev/zero | tr '\\0' 'x'; echo done >&2");
    cmd.limits.max_output_bytes = 1 << 20;
    let r = runner().run(&cmd);
    assert!(r.output_truncated);
    assert!(r.output_bytes >= 200_000_000, "{}", r.output_bytes);
    let len = std::fs::metadata(&r.output_path).unwrap().len();
    assert!(len < (1 << 20) + 200, "the output file holds {len} bytes");
    assert!(output(&r).contains(TRUNCATION_MARKER.trim()));
}

#[test]
fn the_gateway_route_is_the_only_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gw").join("gateway.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let served2 = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 4];
            use std::io::Write;
            if stream.read_exact(&mut buf).is_ok() {
                served2.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(b"pong");
            }
        }
    });
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let s = Scratch::new();
    let code = format!(
        "import socket\nc = socket.create_connection(('127.0.0.1', 18181), timeout=5); c.sendall(b'ping'); print('GATEWAY', c.recv(4))\n\
         try:\n    socket.create_connection(('127.0.0.1', {host_port}), timeout=2); print('ESCAPED')\nexcept OSError: print('blocked')\n"
    );
    let cmd = s.python(&code).network(NetworkPolicy::Gateway {
        port: 18181,
        socket: socket.clone(),
    });
    let r = runner().run(&cmd);
    let out = output(&r);
    assert!(out.contains("GATEWAY b'pong'"), "{out}");
    assert!(out.contains("blocked") && !out.contains("ESCAPED"), "{out}");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert!(host.accept().is_err());
}

#[test]
fn the_plain_runner_kills_its_whole_group_on_timeout() {
    let s = Scratch::new();
    let marker = format!("pdlplaingroup{}", std::process::id());
    let mut cmd = s.sh(&format!("sh -c 'sleep 300 # {marker}' & sleep 300"));
    cmd.limits.wall_time = Duration::from_secs(1);
    cmd.limits.kill_grace = Duration::from_millis(300);
    let r = PlainRunner.run(&cmd);
    assert_eq!(r.status, RunStatus::TimedOut);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(processes_with(&marker), 0);
}

/// Whether this machine offers run cgroups; where it does not, the tests of
/// aggregate limits fail unless `PDL_SWE_ALLOW_NO_CGROUPS=1` says that is known.
fn cgroups_required() -> bool {
    if pdl_sandbox::cgroup_scope() != pdl_sandbox::LimitScope::None {
        return true;
    }
    assert!(
        std::env::var("PDL_SWE_ALLOW_NO_CGROUPS").as_deref() == Ok("1"),
        "this machine offers no usable cgroups (v2 with delegated memory and pids, or writable v1); \
         set PDL_SWE_ALLOW_NO_CGROUPS=1 to run without the aggregate-limit tests"
    );
    false
}

#[test]
fn memory_is_bounded_for_the_whole_run_not_per_process() {
    if !cgroups_required() {
        return;
    }
    let s = Scratch::new();
    // Four children of 300 MiB each: every one under the per-process bound,
    // together over the run's 512 MiB.
    let code = "import os, mmap, time\n\
        kids = []\n\
        for i in range(4):\n\
        \x20   pid = os.fork()\n\
        \x20   if pid == 0:\n\
        \x20       m = mmap.mmap(-1, 300 << 20)\n\
        \x20       for off in range(0, len(m), 4096): m[off] = 1\n\
        \x20       time.sleep(3); os._exit(0)\n\
        \x20   kids.append(pid)\n\
        codes = [os.waitpid(p, 0)[1] for p in kids]\n\
        print('CODES', codes)\n";
    let mut cmd = s.python(code);
    cmd.limits.memory_bytes = Some(512 << 20);
    cmd.limits.process_memory_bytes = Some(1 << 30);
    let r = runner().run(&cmd);
    let out = output(&r);
    assert!(
        r.oom_kills > 0,
        "no process was stopped at the bound: {out}"
    );
    assert!(out.contains("CODES"), "{:?}: {out}", r.status);
    assert!(out.contains(" 9"), "a child should have been killed: {out}");
    assert_ne!(r.enforced.memory_scope, pdl_sandbox::LimitScope::None);
    assert_eq!(r.enforced.memory_bytes, Some(512 << 20));
}

#[test]
fn a_fork_storm_cannot_starve_a_neighbouring_run() {
    if !cgroups_required() {
        return;
    }
    let storm = Scratch::new();
    let mut bomb = storm.sh("i=0; while [ $i -lt 2000 ]; do sleep 5 & i=$((i+1)); done; wait");
    bomb.limits.max_processes = Some(64);
    bomb.limits.wall_time = Duration::from_secs(8);
    let neighbour = Scratch::new();
    let mut honest =
        neighbour.sh("sleep 1; for i in 1 2 3 4 5 6 7 8 9 10; do (true) & done; wait; echo FINE");
    honest.limits.max_processes = Some(64);
    let r = runner();
    let storm_thread = std::thread::spawn({
        let r = r.clone();
        move || r.run(&bomb)
    });
    let ok = r.run(&honest);
    let _ = storm_thread.join().unwrap();
    assert_eq!(ok.status, RunStatus::Exited { code: 0 }, "{}", output(&ok));
    assert!(output(&ok).contains("FINE"));
}

/// Memory held by the run's in-memory files belongs to no process: when it
/// fills the run's bound the kernel kills the command, never the sandbox's own
/// helper, and the run ends out of memory (the run's doing), not as a sandbox
/// failure (the harness's).
#[test]
fn filling_in_memory_scratch_ends_out_of_memory_not_as_a_sandbox_failure() {
    if !cgroups_required() {
        return;
    }
    let s = Scratch::new();
    let mut cmd = s.sh("exec cat /dev/zero > /tmp/fill");
    cmd.memory_scratch = Some(1 << 30);
    cmd.limits.memory_bytes = Some(96 << 20);
    cmd.limits.wall_time = Duration::from_secs(20);
    let r = runner().run(&cmd);
    assert!(r.oom_kills > 0, "{:?}: {}", r.status, output(&r));
    assert_eq!(r.status, RunStatus::OutOfMemory, "{}", output(&r));
}

/// A descriptor the harness itself inherited without close-on-exec (from the
/// shell that started it, say) never reaches a sandboxed command.
#[test]
fn descriptors_the_harness_inherited_stay_behind() {
    // SAFETY: open, fcntl and dup2 on numbers this test owns.
    let stray = unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        assert!(fd >= 0);
        assert_eq!(libc::dup2(fd, 251), 251);
        libc::close(fd);
        libc::fcntl(251, libc::F_SETFD, 0);
        251
    };
    let s = Scratch::new();
    let code = "import os\n\
        try:\n\
        \x20   os.fstat(251); print('OPEN')\n\
        except OSError:\n\
        \x20   print('CLOSED')\n";
    let r = runner().run(&s.python(code));
    // SAFETY: closing the number opened above.
    unsafe { libc::close(stray) };
    assert!(output(&r).contains("CLOSED"), "{}", output(&r));
    let plain = PlainRunner.run(&s.python(code));
    assert!(output(&plain).contains("CLOSED"), "{}", output(&plain));
}

/// A path handed over as data can be read but nothing in it executed or
/// loaded, even where a wider read-only bind shows it.
#[test]
fn data_paths_are_read_never_executed() {
    let s = Scratch::new();
    let data = s.dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let tool = data.join("tool");
    std::fs::write(&tool, "#!/bin/sh\necho RAN\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "cat {0} >/dev/null && echo READ; {0}; echo code $?",
        tool.display()
    );
    let r = runner().run(&s.sh(&script).data(data.clone()));
    let out = output(&r);
    assert!(out.contains("READ"), "{out}");
    assert!(!out.contains("RAN"), "{out}");
    assert!(out.contains("code 126"), "{out}");
}

/// The OOM killer takes the command's processes before the sandbox's helper
/// (pid 1 of the run): memory the run holds in files of no process cannot get
/// the helper killed and turn the run's own failure into the harness's.
#[test]
fn the_oom_killer_takes_the_command_before_the_helper() {
    let s = Scratch::new();
    let r =
        runner().run(&s.sh(
            "echo self $(cat /proc/self/oom_score_adj); echo helper $(cat /proc/1/oom_score_adj)",
        ));
    let out = output(&r);
    assert_eq!(r.status, RunStatus::Exited { code: 0 }, "{out}");
    assert!(out.contains("self 1000"), "{out}");
    let helper: i32 = out
        .split("helper ")
        .nth(1)
        .and_then(|t| t.trim().parse().ok())
        .expect("the helper's score");
    assert!(helper < 1000, "{out}");
}

/// A run of many busy processes gets one run's share of the CPU, not one
/// share per process: a neighbouring run's fixed work takes about as long as
/// it does alone, not tens of times longer.
#[test]
fn a_cpu_hog_cannot_starve_a_neighbouring_run() {
    if !cgroups_required() {
        return;
    }
    let work = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo DONE";
    let r = runner();
    let alone_scratch = Scratch::new();
    let started = std::time::Instant::now();
    let alone = r.run(&alone_scratch.sh(work));
    let alone_s = started.elapsed().as_secs_f64();
    assert_eq!(
        alone.status,
        RunStatus::Exited { code: 0 },
        "{}",
        output(&alone)
    );
    assert!(alone.enforced.cpu_shared, "{:?}", alone.enforced);
    let hog_scratch = Scratch::new();
    let mut hog = hog_scratch
        .sh("i=0; while [ $i -lt 60 ]; do (while :; do :; done) & i=$((i+1)); done; wait");
    hog.limits.wall_time = Duration::from_secs((alone_s * 12.0).ceil() as u64 + 4);
    let hog_thread = std::thread::spawn({
        let r = r.clone();
        move || r.run(&hog)
    });
    std::thread::sleep(Duration::from_millis(500));
    let neighbour = Scratch::new();
    let started = std::time::Instant::now();
    let shared = r.run(&neighbour.sh(work));
    let shared_s = started.elapsed().as_secs_f64();
    let hog_report = hog_thread.join().unwrap();
    assert_eq!(
        shared.status,
        RunStatus::Exited { code: 0 },
        "{}",
        output(&shared)
    );
    assert_eq!(hog_report.status, RunStatus::TimedOut);
    // Without a CPU group of its own the neighbour would get 1/61 of the
    // machine: about 30 times slower on two cores.
    assert!(
        shared_s < alone_s * 6.0 + 1.0,
        "the neighbour took {shared_s:.2} s beside the hog, {alone_s:.2} s alone"
    );
}

#[test]
fn descriptors_handed_over_reach_the_command_and_nothing_else() {
    let s = Scratch::new();
    let (read, write) = {
        let mut fds = [0; 2];
        // SAFETY: a valid array for pipe2 to fill.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just made and are ours.
        unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        }
    };
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::fs::File::from(read).read_to_string(&mut text).unwrap();
        text
    });
    let code = "import os\n\
        os.write(7, b'through\\n')\n\
        for n in (3, 4):\n\
        \x20   try:\n\
        \x20       os.fstat(n); print('OPEN', n)\n\
        \x20   except OSError:\n\
        \x20       print('CLOSED', n)\n";
    let r = runner().run_with(
        &s.python(code),
        vec![pdl_sandbox::PassedFd {
            target: 7,
            fd: write,
        }],
    );
    assert_eq!(r.status, RunStatus::Exited { code: 0 }, "{}", output(&r));
    assert_eq!(reader.join().unwrap(), "through\n");
    // The sandbox's own status and spec descriptors never reach the command.
    let out = output(&r);
    assert!(
        out.contains("CLOSED 3") && out.contains("CLOSED 4"),
        "{out}"
    );
    let bad = runner().run_with(
        &s.sh("true"),
        vec![pdl_sandbox::PassedFd {
            target: 3,
            fd: std::fs::File::open("/dev/null").unwrap().into(),
        }],
    );
    assert!(bad.status.is_infrastructure_failure(), "{:?}", bad.status);
}

#[test]
fn in_memory_scratch_is_bounded_private_and_noexec() {
    let s = Scratch::new();
    let script = "echo HOME=$HOME; dd if=/dev/zero of=/tmp/big bs=1M count=8 2>&1; \
        printf '#!/bin/sh\\necho RAN\\n' > /tmp/x.sh; chmod +x /tmp/x.sh; /tmp/x.sh || echo NOEXEC; \
        printf '#!/bin/sh\\necho RAN\\n' > ./y.sh; chmod +x ./y.sh; ./y.sh || echo WORK-NOEXEC; \
        touch $HOME/h && echo HOME-WRITABLE";
    let mut cmd = s.sh(script).memory_scratch(4 << 20);
    cmd.noexec = true;
    let r = runner().run(&cmd);
    let out = output(&r);
    assert!(
        out.contains(&format!("HOME={}", pdl_sandbox::PRIVATE_HOME)),
        "{out}"
    );
    assert!(
        out.contains("No space left"),
        "the scratch is not bounded: {out}"
    );
    assert!(
        out.contains("NOEXEC") && out.contains("WORK-NOEXEC") && !out.contains("RAN"),
        "{out}"
    );
    assert!(out.contains("HOME-WRITABLE"), "{out}");
    assert_eq!(r.enforced.scratch_bytes, Some(4 << 20));
    assert!(r.enforced.noexec);
    assert!(!s.dir.path().join("scratch/tmp/big").exists());
}

#[test]
fn shared_memory_and_memory_files_are_no_way_to_run_code() {
    // Red-team finding: a shared library written to /dev/shm (or to a memfd
    // and loaded through /proc/self/fd) put native code below every check.
    let s = Scratch::new();
    let code = r#"
import os, shutil, subprocess
shutil.copy("/bin/true", "/dev/shm/t")
os.chmod("/dev/shm/t", 0o755)
try:
    subprocess.run(["/dev/shm/t"], check=True)
    print("SHM-RAN")
except OSError as e:
    print("SHM-NOEXEC", e.errno)
fd = os.memfd_create("x")
os.write(fd, open("/bin/true", "rb").read())
try:
    subprocess.run(["/proc/self/fd/%d" % fd], check=True, pass_fds=(fd,))
    print("MEMFD-RAN")
except OSError as e:
    print("MEMFD-NOEXEC", e.errno)
"#;
    let mut cmd = s.python(code).memory_scratch(16 << 20);
    cmd.noexec = true;
    let r = runner().run(&cmd);
    let out = output(&r);
    assert!(
        out.contains("SHM-NOEXEC") && !out.contains("SHM-RAN"),
        "{out}"
    );
    // memfd_noexec is set in the run's PID namespace (kernel 6.3 and later,
    // as root on the host): a memory file cannot be run. (It can still be
    // mapped executable: the grader's audit hook refuses extension modules
    // loaded from outside the environment, so Python cannot load it.)
    assert!(
        out.contains("MEMFD-NOEXEC") && !out.contains("MEMFD-RAN"),
        "{out}"
    );
}

#[test]
fn masked_host_files_read_as_empty() {
    let s = Scratch::new();
    let r = runner()
        .mask(PathBuf::from("/etc/os-release"))
        .run(&s.sh("wc -c < /etc/os-release; cat /etc/os-release | head -1"));
    assert_eq!(r.status, RunStatus::Exited { code: 0 }, "{}", output(&r));
    assert_eq!(output(&r).trim(), "0", "{}", output(&r));
    assert!(r
        .enforced
        .masked
        .contains(&std::fs::canonicalize("/etc/os-release").unwrap()));
    // The helper itself (here pdl-sandbox-init) is masked by default.
    let helper = std::fs::canonicalize(env!("CARGO_BIN_EXE_pdl-sandbox-init")).unwrap();
    assert!(runner()
        .run(&s.sh("true"))
        .enforced
        .masked
        .contains(&helper));
}

#[test]
fn installed_copies_of_the_helper_read_as_empty() {
    // A pip install of the harness leaves a copy in a folder a run may read
    // (the interpreter's `bin`), and some installers leave hard links.
    let s = Scratch::new();
    let helper = std::fs::canonicalize(env!("CARGO_BIN_EXE_pdl-sandbox-init")).unwrap();
    let install = s.dir.path().join("venv/bin");
    let other = s.dir.path().join("cache");
    std::fs::create_dir_all(&install).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    // Hard links need the same file system as the helper: made beside it.
    let link_dir = tempfile::tempdir_in(helper.parent().unwrap()).unwrap();
    let copy = install.join("pdl-sandbox-init");
    std::fs::copy(&helper, &copy).unwrap();
    let linked = link_dir.path().join("renamed-link");
    std::fs::hard_link(&helper, &linked).unwrap();
    std::fs::write(other.join("pdl-sandbox-init.txt"), "not a copy").unwrap();
    // A renamed copy (the same bytes under another name), and a file with
    // the name installs give the program while this copy runs under another
    // one (another version: other bytes, the same kind of embedded data).
    let renamed = install.join("renamed-copy");
    std::fs::copy(&helper, &renamed).unwrap();
    let installed_name = other.join("pdl-swe");
    std::fs::write(&installed_name, "another version").unwrap();
    let dirs = [
        install.clone(),
        other.clone(),
        link_dir.path().to_path_buf(),
    ];
    let mut found = pdl_sandbox::installed_copies(&helper, &dirs, &["pdl-swe"]);
    found.sort();
    let mut expected = vec![
        std::fs::canonicalize(&copy).unwrap(),
        std::fs::canonicalize(&linked).unwrap(),
        std::fs::canonicalize(&renamed).unwrap(),
        std::fs::canonicalize(&installed_name).unwrap(),
    ];
    expected.sort();
    assert_eq!(found, expected);
    let cmd = s
        .sh(&format!(
            "wc -c < {}; wc -c < {}; wc -c < {}; wc -c < {}; wc -c < {}/pdl-sandbox-init.txt",
            copy.display(),
            linked.display(),
            renamed.display(),
            installed_name.display(),
            other.display()
        ))
        .readable(install)
        .readable(other)
        .readable(link_dir.path().to_path_buf());
    let r = runner().mask_copies(&dirs, &["pdl-swe"]).run(&cmd);
    assert_eq!(r.status, RunStatus::Exited { code: 0 }, "{}", output(&r));
    let sizes: Vec<String> = output(&r).split_whitespace().map(String::from).collect();
    assert_eq!(sizes, ["0", "0", "0", "0", "10"], "{}", output(&r));
    for path in &expected {
        assert!(r.enforced.masked.contains(path), "{:?}", r.enforced.masked);
    }
}

#[test]
fn the_output_file_is_never_written_through_a_link() {
    let s = Scratch::new();
    let victim = s.dir.path().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let cmd = s.sh("echo overwritten");
    std::fs::create_dir_all(cmd.output.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&victim, &cmd.output).unwrap();
    let r = runner().run(&cmd);
    assert!(r.status.is_infrastructure_failure(), "{:?}", r.status);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
}

#[test]
fn the_tail_of_long_output_is_kept_in_memory() {
    let s = Scratch::new();
    let mut cmd =
        s.sh("i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done; echo LAST-LINE");
    cmd.limits.max_output_bytes = 1000;
    let r = runner().run(&cmd);
    assert!(r.output_truncated);
    assert!(
        r.output_tail(200).trim_end().ends_with("LAST-LINE"),
        "{}",
        r.output_tail(200)
    );
    assert!(std::fs::metadata(&r.output_path).unwrap().len() < 2000);
}

#[test]
fn a_bound_too_far_to_represent_never_panics() {
    for bound in [Duration::MAX, Duration::from_secs(i64::MAX as u64)] {
        let s = Scratch::new();
        let r = runner().run(&s.sh("echo done").wall_time(bound));
        assert_eq!(
            r.status,
            RunStatus::Exited { code: 0 },
            "{}",
            r.output_tail(500)
        );
        let s = Scratch::new();
        let r = PlainRunner.run(&s.sh("echo done").wall_time(bound));
        assert_eq!(r.status, RunStatus::Exited { code: 0 });
    }
}
