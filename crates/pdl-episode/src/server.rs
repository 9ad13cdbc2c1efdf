//! The HTTP server under the gateway and the replay model: a tokio runtime of its
//! own, listeners bound before `start` returns (so bind errors surface at once),
//! and a graceful stop. Its only public item is [`StartError`].

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a stop waits for responses in flight before cutting them off.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The async runtime could not be built.
    #[error("cannot start the {name} runtime: {source}")]
    Runtime {
        /// Which server.
        name: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The TCP address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Tcp {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The Unix socket could not be bound.
    #[error("cannot listen on Unix socket {}: {source}", path.display())]
    Unix {
        /// The socket path asked for.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A running HTTP server.
pub(crate) struct HttpServer {
    runtime: Option<Runtime>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    tcp_addr: SocketAddr,
    unix_path: Option<PathBuf>,
}

impl HttpServer {
    /// Binds the listeners and starts serving `router` on them.
    pub(crate) fn start(
        name: &'static str,
        router: Router,
        tcp: SocketAddr,
        unix: Option<&Path>,
    ) -> Result<HttpServer, StartError> {
        let threads = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(2, 4);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|source| StartError::Runtime { name, source })?;

        let std_tcp = std::net::TcpListener::bind(tcp)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| StartError::Tcp { addr: tcp, source })?;
        let tcp_addr = std_tcp
            .local_addr()
            .map_err(|source| StartError::Tcp { addr: tcp, source })?;
        let std_unix = match unix {
            Some(path) => Some(bind_unix(path).map_err(|source| StartError::Unix {
                path: path.to_path_buf(),
                source,
            })?),
            None => None,
        };

        let (shutdown, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        {
            let _guard = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(std_tcp)
                .map_err(|source| StartError::Tcp { addr: tcp, source })?;
            let app = router.clone();
            let stop = stop_rx.clone();
            tasks.push(runtime.spawn(async move {
                // The serve future only ends on shutdown; accept errors are retried inside.
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stopped(stop))
                    .await;
            }));
            if let (Some(std_unix), Some(path)) = (std_unix, unix) {
                let listener = tokio::net::UnixListener::from_std(std_unix).map_err(|source| {
                    StartError::Unix {
                        path: path.to_path_buf(),
                        source,
                    }
                })?;
                let stop = stop_rx.clone();
                tasks.push(runtime.spawn(async move {
                    let _ = axum::serve(listener, router)
                        .with_graceful_shutdown(stopped(stop))
                        .await;
                }));
            }
        }
        Ok(HttpServer {
            runtime: Some(runtime),
            shutdown,
            tasks,
            tcp_addr,
            unix_path: unix.map(Path::to_path_buf),
        })
    }

    /// The bound TCP address.
    pub(crate) fn tcp_addr(&self) -> SocketAddr {
        self.tcp_addr
    }

    /// The bound Unix socket, if any.
    pub(crate) fn unix_path(&self) -> Option<&Path> {
        self.unix_path.as_deref()
    }

    /// Blocks until the process gets SIGINT (Ctrl-C) or SIGTERM.
    pub(crate) fn wait_for_signal(&self) -> io::Result<()> {
        let Some(runtime) = &self.runtime else {
            return Ok(());
        };
        runtime.block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                result = tokio::signal::ctrl_c() => result,
                _ = term.recv() => Ok(()),
            }
        })
    }

    /// Stops accepting, lets responses in flight finish for a grace period, then
    /// ends the runtime and removes the Unix socket file. Idempotent.
    pub(crate) fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(runtime) = self.runtime.take() {
            let tasks = std::mem::take(&mut self.tasks);
            if tokio::runtime::Handle::try_current().is_ok() {
                // Blocking is not allowed inside an async context.
                runtime.shutdown_background();
            } else {
                runtime.block_on(async {
                    let _ = tokio::time::timeout(STOP_GRACE, async {
                        for task in tasks {
                            let _ = task.await;
                        }
                    })
                    .await;
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            }
        }
        if let Some(path) = self.unix_path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Resolves once a stop is asked for.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Binds a Unix socket, replacing a stale socket file left at `path`.
fn bind_unix(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another server is listening on it",
                ));
            }
            std::fs::remove_file(path)?;
        } else {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            ));
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
