//! The HTTP server under the gateway and the replay model: a tokio runtime of its
//! own, listeners bound before `start` returns (so bind errors surface at once),
//! HTTP/1.1 connections with a bound on how long a client may take to send a
//! request's headers (an idle keep-alive connection included) and on how many
//! connections each listener serves at once, and a graceful stop. Its public
//! items are [`StartError`], [`ServerLimits`] and [`serve_tcp`].

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

/// How long a stop waits for responses in flight before cutting them off.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Bounds on a server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// How long a client may take to send a request's headers, counted from
    /// when the connection is ready for a request (so an idle keep-alive
    /// connection is closed after this long too).
    pub header_read_timeout: Duration,
    /// Connections served at once per listener; further ones wait in the
    /// listen queue until one closes.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    /// 30 seconds for headers, 512 connections per listener.
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

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
        limits: ServerLimits,
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
            tasks.push(runtime.spawn(serve(listener, app, stop, limits)));
            if let (Some(std_unix), Some(path)) = (std_unix, unix) {
                let listener = tokio::net::UnixListener::from_std(std_unix).map_err(|source| {
                    StartError::Unix {
                        path: path.to_path_buf(),
                        source,
                    }
                })?;
                let stop = stop_rx.clone();
                tasks.push(runtime.spawn(serve(listener, router, stop, limits)));
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

/// Serves `router` on `listener` (already bound, on the calling runtime) until
/// `stop` turns true, with the same bounds as the gateway's listeners: the
/// evaluation service runs its API this way.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    router: Router,
    stop: watch::Receiver<bool>,
    limits: ServerLimits,
) {
    serve(listener, router, stop, limits).await
}

/// Accepts connections until a stop is asked for, at most
/// `limits.max_connections` at once, and serves `router` on each; on stop,
/// each connection finishes the response in flight and closes.
async fn serve<L: Accept>(
    listener: L,
    router: Router,
    stop: watch::Receiver<bool>,
    limits: ServerLimits,
) {
    let max = limits.max_connections.clamp(1, 1 << 20);
    let slots = std::sync::Arc::new(Semaphore::new(max));
    let accepting = stop.clone();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = stopped(accepting.clone()) => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept_stream() => match accepted {
                Ok(stream) => stream,
                Err(_) => {
                    // Out of descriptors or a transient failure: wait a little.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(accepting.clone()) => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(true);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stopped(stop) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(permit);
        });
    }
    // Stopping: wait for the connections still finishing their responses.
    let _ = slots
        .acquire_many(u32::try_from(max).unwrap_or(u32::MAX))
        .await;
}

/// A listener whose connections are served.
trait Accept: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept_stream(&self) -> impl std::future::Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_stream(&self) -> io::Result<Self::Stream> {
        let (stream, _) = self.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_stream(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
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
