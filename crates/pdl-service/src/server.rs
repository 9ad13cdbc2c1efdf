//! `pdl-swe serve`: the HTTP JSON API ([`router`]), the web page, and the
//! workers, over one database ([`serve`]).
//!
//! Every route but `GET /api/health` and the page's static files needs an API
//! key (`Authorization: Bearer KEY`), looked up by its hash. Each key has a
//! request rate (per minute), runs per day, predictions per run and upload
//! bytes per day; requests have body size bounds and a time bound, and the
//! listener bounds how long a client may take to send its headers. A refused
//! upload changes nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use pdl_grader::predictions::{parse_predictions, PredictionEntry};
use pdl_grader::{Grader, ResultRecord};
use serde::Deserialize;

use crate::api::{
    rfc3339, ApiError, DatasetDetail, DatasetInfo, Health, LeaderboardRow, QuotaInfo, RunInfo,
    RunReport, Usage, WhoAmI,
};
use crate::db::{random_hex, DatasetRow, Db, DbError, KeyRow, Quotas, Role, RunRow};
use crate::keys::hash_key;
use crate::store::{
    agent_view_tar, read_upload, write_canonical, TaskCache, UploadError, UploadFormat,
};
use crate::view::{submitter_record, task_view};
use crate::worker::{StoredEntry, WorkerContext};

/// The web page (static, embedded).
const INDEX_HTML: &str = include_str!("../web/index.html");
/// The web page's script.
const APP_JS: &str = include_str!("../web/app.js");
/// The OpenAPI description of the API.
pub const OPENAPI_YAML: &str = include_str!("../../../docs/openapi.yaml");

/// Every route of the API as (method, path), as the OpenAPI description must
/// list them.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/api/health"),
    ("get", "/api/whoami"),
    ("get", "/api/datasets"),
    ("post", "/api/datasets"),
    ("get", "/api/datasets/{name}"),
    ("get", "/api/datasets/{name}/agent-view"),
    ("get", "/api/datasets/{name}/leaderboard"),
    ("get", "/api/runs"),
    ("post", "/api/runs"),
    ("get", "/api/runs/{id}"),
    ("delete", "/api/runs/{id}"),
    ("get", "/api/runs/{id}/report"),
    ("get", "/api/runs/{id}/report.html"),
];

/// Something the service reports (the binary prints it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// The API listens here.
    Listening(SocketAddr),
    /// One request was answered (never with its key or body).
    Request {
        /// Method.
        method: String,
        /// Path, without the query.
        path: String,
        /// Status.
        status: u16,
        /// Time taken.
        millis: u128,
        /// The key's name, when one was given and known.
        key: Option<String>,
    },
    /// A worker's trouble.
    Worker(String),
    /// The service is stopping.
    Stopping,
}

/// Where the service's events go.
pub type Log = dyn Fn(LogEvent) + Send + Sync;

/// The longest model name a run may carry.
pub const MAX_MODEL_NAME_BYTES: usize = 200;

/// Bounds on requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest dataset upload.
    pub max_dataset_bytes: usize,
    /// Largest predictions file.
    pub max_predictions_bytes: usize,
    /// Largest body of any other request.
    pub max_other_bytes: usize,
    /// Longest a request may take to be answered.
    pub request_timeout: Duration,
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_dataset_bytes: 512 << 20,
            max_predictions_bytes: 64 << 20,
            max_other_bytes: 64 << 10,
            request_timeout: Duration::from_secs(300),
            header_read_timeout: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on (port 0: any free port; the bound address is
    /// reported as [`LogEvent::Listening`]).
    pub listen: SocketAddr,
    /// The data folder: the SQLite database (by default) and the datasets.
    pub data_dir: PathBuf,
    /// A database URL (`postgres://…` or `sqlite://…`); default: SQLite in
    /// the data folder.
    pub database: Option<String>,
    /// Workers grading at once.
    pub workers: usize,
    /// The cache folder (ladder fingerprints).
    pub cache_dir: PathBuf,
    /// Request bounds.
    pub limits: Limits,
    /// How long a worker's claim on a job holds without renewal.
    pub lease: Duration,
    /// How often an idle worker looks for work.
    pub poll: Duration,
    /// How often a submitter's view of a run moves on (see
    /// [`Db::with_publish_every`]).
    pub publish_every: Duration,
}

/// Why the service could not start or went down.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data folder could not be made.
    #[error("cannot use the data folder {}: {source}", path.display())]
    DataDir {
        /// The folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The runtime could not start.
    #[error("cannot start the service's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

/// The database URL of a configuration: `--database`, or SQLite in the data
/// folder.
pub fn database_url(data_dir: &Path, database: Option<&str>) -> String {
    match database {
        Some(url) => url.to_string(),
        None => format!(
            "sqlite://{}?mode=rwc",
            data_dir.join("service.db").display()
        ),
    }
}

/// Makes the data folder (mode 0700) with its `datasets/` and `tmp/`.
pub fn prepare_data_dir(data_dir: &Path) -> Result<PathBuf, ServeError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| ServeError::DataDir {
        path: data_dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(data_dir).map_err(err)?;
    std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    let data_dir = data_dir.canonicalize().map_err(err)?;
    for sub in ["datasets", "tmp"] {
        std::fs::create_dir_all(data_dir.join(sub)).map_err(err)?;
    }
    Ok(data_dir)
}

/// Creates an API key named `name` and returns it (the only time it is seen;
/// only its hash is stored).
pub fn create_key(
    data_dir: &Path,
    database: Option<&str>,
    name: &str,
    role: Role,
    quotas: Quotas,
) -> Result<String, ServeError> {
    let data_dir = prepare_data_dir(data_dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(async {
        let db = Db::open(&database_url(&data_dir, database)).await?;
        let key = crate::keys::new_key();
        let stored = db.create_key(name, role, &hash_key(&key), quotas).await;
        db.close().await;
        stored?;
        Ok(key)
    })
}

/// Runs the service until `should_stop` turns true: the API on
/// `config.listen`, `config.workers` workers grading with `grader`.
pub fn serve(
    config: &ServeConfig,
    grader: &Grader,
    should_stop: &(dyn Fn() -> bool + Sync),
    log: Arc<Log>,
) -> Result<(), ServeError> {
    let data_dir = prepare_data_dir(&config.data_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pdl-serve")
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let db = runtime
        .block_on(Db::open(&database_url(
            &data_dir,
            config.database.as_deref(),
        )))?
        .with_publish_every(config.publish_every.as_millis().min(i64::MAX as u128) as i64);
    let listener = std::net::TcpListener::bind(config.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| ServeError::Listen {
            addr: config.listen,
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: config.listen,
        source,
    })?;
    let tasks = Arc::new(TaskCache::default());
    let state = Arc::new(AppState {
        db: db.clone(),
        data_dir: data_dir.clone(),
        tasks: tasks.clone(),
        limits: config.limits,
        windows: Mutex::new(HashMap::new()),
        uploading: Mutex::new(HashSet::new()),
        uploads: Arc::new(tokio::sync::Semaphore::new(MAX_UPLOADS_AT_ONCE)),
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = {
        let _guard = runtime.enter();
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|source| ServeError::Listen {
                addr: config.listen,
                source,
            })?;
        let router = router(state, log.clone());
        let limits = pdl_episode::ServerLimits {
            header_read_timeout: config.limits.header_read_timeout,
            max_connections: config.limits.max_connections,
        };
        runtime.spawn(pdl_episode::server::serve_tcp(
            listener, router, stop_rx, limits,
        ))
    };
    log(LogEvent::Listening(bound));
    let instance = random_hex(4);
    let ctx = WorkerContext {
        db: db.clone(),
        handle: runtime.handle().clone(),
        grader,
        data_dir: &data_dir,
        cache_dir: &config.cache_dir,
        tasks,
        lease: config.lease,
        poll: config.poll,
        should_stop,
        log: &*log,
    };
    let ctx = &ctx;
    std::thread::scope(|scope| {
        for i in 0..config.workers.max(1) {
            let owner = format!("{instance}-{i}");
            scope.spawn(move || crate::worker::work(ctx, &owner));
        }
        while !should_stop() {
            std::thread::sleep(Duration::from_millis(100));
        }
        log(LogEvent::Stopping);
        let _ = stop_tx.send(true);
    });
    runtime.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        db.close().await;
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Shared by every request.
struct AppState {
    db: Db,
    data_dir: PathBuf,
    tasks: Arc<TaskCache>,
    limits: Limits,
    /// Per key: the start of its current minute and the requests in it.
    windows: Mutex<HashMap<String, (Instant, i64)>>,
    /// Keys with an upload (a dataset or predictions) being received: one
    /// at a time per key, since a body is held in memory until it is read.
    uploading: Mutex<HashSet<String>>,
    /// Uploads being received at once, from all keys.
    uploads: Arc<tokio::sync::Semaphore>,
}

/// Uploads the service receives at once (each held in memory up to its
/// route's bound until it is read).
pub const MAX_UPLOADS_AT_ONCE: usize = 4;

/// The bytes a prediction is charged beyond its own: what its job, record and
/// score take to store.
pub const STORED_BYTES_PER_PREDICTION: i64 = 2048;

/// Lets one upload of a key in at a time, and [`MAX_UPLOADS_AT_ONCE`] of all
/// keys (the others wait): a body is held in memory until it is read.
async fn one_upload_at_a_time(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    if !state
        .uploading
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.id.clone())
    {
        return Failure::new(
            StatusCode::TOO_MANY_REQUESTS,
            "this key is already sending an upload; send one at a time",
        )
        .into_response();
    }
    let response = match state.uploads.clone().acquire_owned().await {
        Ok(_permit) => next.run(req).await,
        Err(_) => {
            Failure::new(StatusCode::SERVICE_UNAVAILABLE, "the service is stopping").into_response()
        }
    };
    state
        .uploading
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key.id);
    response
}

type Shared = Arc<AppState>;

/// An error answer: a status and a message.
#[derive(Debug)]
pub struct Failure(StatusCode, String);

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Failure(status, message.into())
    }
    fn bad(message: impl Into<String>) -> Self {
        Failure::new(StatusCode::BAD_REQUEST, message)
    }
    fn not_found(what: &str) -> Self {
        Failure::new(StatusCode::NOT_FOUND, format!("no {what}"))
    }
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Self {
        Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        // Messages may repeat what the client sent (a run ID in the path).
        let error = crate::keys::redact_keys(&self.1);
        (self.0, Json(ApiError { error })).into_response()
    }
}

type Answer<T> = Result<T, Failure>;

/// The API's router (with the page and its script) over `state`.
fn router(state: Shared, log: Arc<Log>) -> Router {
    let limits = state.limits;
    let api = Router::new()
        .route("/api/whoami", get(whoami))
        .route(
            "/api/datasets",
            get(list_datasets)
                .post(upload_dataset)
                .layer(DefaultBodyLimit::max(limits.max_dataset_bytes))
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    one_upload_at_a_time,
                )),
        )
        .route("/api/datasets/{name}", get(dataset_detail))
        .route("/api/datasets/{name}/agent-view", get(agent_view))
        .route("/api/datasets/{name}/leaderboard", get(leaderboard))
        .route(
            "/api/runs",
            get(list_runs)
                .post(submit)
                .layer(DefaultBodyLimit::max(limits.max_predictions_bytes))
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    one_upload_at_a_time,
                )),
        )
        .route("/api/runs/{id}", get(run_status).delete(delete_run))
        .route("/api/runs/{id}/report", get(run_report))
        .route("/api/runs/{id}/report.html", get(run_report_html))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(app_js))
        .route("/openapi.yaml", get(openapi))
        .route("/api/health", get(health))
        .merge(api)
        .fallback(|| async { Failure::not_found("such route") })
        .layer(DefaultBodyLimit::max(limits.max_other_bytes))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let log = log.clone();
            async move { logged(req, next, limits, &*log).await }
        }))
        .with_state(state)
}

/// Bounds a request's time and logs it (method, path, status, key name).
async fn logged(
    req: Request,
    next: Next,
    limits: Limits,
    log: &(dyn Fn(LogEvent) + Send + Sync),
) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    // A key sent in the path (where it does not belong) is not logged.
    let path = crate::keys::loggable_path(req.uri().path());
    let body_limit = match (req.method(), path.as_str()) {
        (&axum::http::Method::POST, "/api/datasets") => limits.max_dataset_bytes,
        (&axum::http::Method::POST, "/api/runs") => limits.max_predictions_bytes,
        _ => limits.max_other_bytes,
    };
    let too_large = || {
        Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than this request's {body_limit} bytes"),
        )
        .into_response()
    };
    // A declared length over the bound is refused before a byte of the body
    // is read.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut response = if declared.is_some_and(|n| n > body_limit as u64) {
        too_large()
    } else {
        match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
            Ok(r) => r,
            Err(_) => Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the request took longer than {} s",
                    limits.request_timeout.as_secs()
                ),
            )
            .into_response(),
        }
    };
    // The body limit's own answer is plain text; every error is JSON.
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE
        && !response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"))
    {
        let key = response.extensions().get::<KeyName>().cloned();
        response = too_large();
        if let Some(key) = key {
            response.extensions_mut().insert(key);
        }
    }
    let key = response.extensions().get::<KeyName>().map(|k| k.0.clone());
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    log(LogEvent::Request {
        method,
        path,
        status: response.status().as_u16(),
        millis: started.elapsed().as_millis(),
        key,
    });
    response
}

/// The name of the key a response was made for (for the log).
#[derive(Clone)]
struct KeyName(String);

/// Finds the request's key by its hash, applies its request rate, and hands
/// it to the handler.
async fn authenticate(State(state): State<Shared>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        // The scheme is case-insensitive (RFC 9110).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim())
        .filter(|k| !k.is_empty());
    let Some(presented) = presented else {
        return Failure::new(
            StatusCode::UNAUTHORIZED,
            "an API key is needed: Authorization: Bearer KEY",
        )
        .into_response();
    };
    let key = match state.db.key_by_hash(&hash_key(presented)).await {
        Ok(Some(key)) => key,
        Ok(None) => {
            return Failure::new(StatusCode::UNAUTHORIZED, "unknown API key").into_response()
        }
        Err(e) => return Failure::from(e).into_response(),
    };
    if let Some(wait) = over_rate(&state, &key) {
        let mut r = Failure::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "rate limit: at most {} requests a minute for this key",
                key.quotas.requests_per_minute
            ),
        )
        .into_response();
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wait.as_secs().max(1)),
        );
        r.extensions_mut().insert(KeyName(key.name.clone()));
        return r;
    }
    let name = KeyName(key.name.clone());
    req.extensions_mut().insert(key);
    let mut response = next.run(req).await;
    response.extensions_mut().insert(name);
    response
}

/// When `key` is over its rate: how long until its window ends.
fn over_rate(state: &AppState, key: &KeyRow) -> Option<Duration> {
    let mut windows = state.windows.lock().expect("not poisoned");
    let now = Instant::now();
    let window = windows.entry(key.id.clone()).or_insert((now, 0));
    if now.duration_since(window.0) >= Duration::from_secs(60) {
        *window = (now, 0);
    }
    if window.1 >= key.quotas.requests_per_minute {
        return Some(Duration::from_secs(60).saturating_sub(now.duration_since(window.0)));
    }
    window.1 += 1;
    None
}

async fn index() -> Response {
    let mut r = (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; frame-src blob:; img-src 'self' data:",
        ),
    );
    r
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML).into_response()
}

async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: pdl_grader::HARNESS_VERSION.into(),
    })
}

async fn whoami(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
) -> Answer<Json<WhoAmI>> {
    let used = Usage {
        runs: state.db.runs_used(&key).await?,
        bytes: state.db.bytes_used(&key).await?,
    };
    let q = &key.quotas;
    Ok(Json(WhoAmI {
        quotas: QuotaInfo {
            runs_per_day: q.runs_per_day,
            predictions_per_run: q.predictions_per_run,
            upload_bytes_per_day: q.upload_bytes_per_day,
            requests_per_minute: q.requests_per_minute,
        },
        used,
        name: key.name,
        role: key.role.name().into(),
    }))
}

fn dataset_info(d: &DatasetRow, key: &KeyRow) -> DatasetInfo {
    DatasetInfo {
        name: d.name.clone(),
        tasks: d.tasks,
        public_ladders: d.public_ladders,
        created_at: rfc3339(d.created_at),
        grants: (key.role == Role::Admin).then(|| d.grants.clone()),
    }
}

async fn list_datasets(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
) -> Answer<Json<Vec<DatasetInfo>>> {
    let rows = state.db.datasets_for(&key).await?;
    Ok(Json(rows.iter().map(|d| dataset_info(d, &key)).collect()))
}

/// Query of `POST /api/datasets`.
#[derive(Debug, Deserialize)]
struct UploadQuery {
    name: Option<String>,
    format: Option<String>,
    filename: Option<String>,
    /// Comma-separated key names.
    grants: Option<String>,
    public_ladders: Option<bool>,
}

/// Dataset and key names: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`, and nothing
/// that may be a key (others see these names).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !crate::keys::may_hold_a_key(name)
}

async fn upload_dataset(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    Query(q): Query<UploadQuery>,
    body: Bytes,
) -> Answer<(StatusCode, Json<DatasetInfo>)> {
    if key.role != Role::Admin {
        return Err(Failure::new(
            StatusCode::FORBIDDEN,
            "only an admin key may upload datasets",
        ));
    }
    let name = q.name.unwrap_or_default();
    if !valid_name(&name) {
        return Err(Failure::bad(format!(
            "`name`: `{}` is not a dataset name (letters, digits, `.`, `_`, `-`; at most 128; nothing that may be an API key)",
            crate::keys::redact_keys(&name)
        )));
    }
    if state.db.dataset_name_taken(&name).await? {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            format!("`name`: a dataset called `{name}` exists"),
        ));
    }
    let grant_names: Vec<String> = q
        .grants
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let (grants, missing) = state.db.keys_by_name(&grant_names).await?;
    if !missing.is_empty() {
        return Err(Failure::bad(format!(
            "`grants`: no key called {}",
            missing.join(", ")
        )));
    }
    let format = UploadFormat::resolve(q.format.as_deref(), &body).map_err(Failure::bad)?;
    let filename = q.filename.unwrap_or_else(|| "upload".into());
    let id = random_hex(8);
    let file = format!("datasets/{id}.jsonl");
    let data_dir = state.data_dir.clone();
    let target = data_dir.join(&file);
    let bytes = body.len() as i64;
    let tasks = tokio::task::spawn_blocking(move || -> Result<i64, UploadError> {
        let tasks = read_upload(&body, format, &filename, &data_dir.join("tmp"))?;
        write_canonical(&tasks, &target).map_err(|e| UploadError::Io(std::io::Error::other(e)))?;
        Ok(tasks.len() as i64)
    })
    .await
    .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| match e {
        UploadError::Invalid(m) => Failure::new(StatusCode::UNPROCESSABLE_ENTITY, m),
        UploadError::Io(e) => Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    })?;
    let public = q.public_ladders.unwrap_or(false);
    match state
        .db
        .create_dataset(
            &id, &name, &file, tasks, public, &key.id, bytes, &grants, &key,
        )
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(quota)) => {
            let _ = std::fs::remove_file(state.data_dir.join(&file));
            return Err(Failure::new(
                StatusCode::TOO_MANY_REQUESTS,
                quota.to_string(),
            ));
        }
        Err(e) => {
            let _ = std::fs::remove_file(state.data_dir.join(&file));
            return Err(Failure::new(
                StatusCode::CONFLICT,
                format!("the dataset could not be stored: {e}"),
            ));
        }
    }
    let row = state
        .db
        .dataset_by_id(&id)
        .await?
        .ok_or_else(|| Failure::not_found("dataset"))?;
    Ok((StatusCode::CREATED, Json(dataset_info(&row, &key))))
}

async fn dataset_for(state: &AppState, key: &KeyRow, name: &str) -> Answer<DatasetRow> {
    state
        .db
        .dataset_for(key, name)
        .await?
        .ok_or_else(|| Failure::not_found(&format!("dataset called `{name}` for this key")))
}

async fn tasks_of(state: &Shared, d: &DatasetRow) -> Answer<Arc<Vec<pdl_task::Task>>> {
    let (cache, dir, id, file) = (
        state.tasks.clone(),
        state.data_dir.clone(),
        d.id.clone(),
        d.file.clone(),
    );
    tokio::task::spawn_blocking(move || cache.get(&dir, &id, &file))
        .await
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e))
}

async fn dataset_detail(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(name): UrlPath<String>,
) -> Answer<Json<DatasetDetail>> {
    let d = dataset_for(&state, &key, &name).await?;
    let tasks = tasks_of(&state, &d).await?;
    Ok(Json(DatasetDetail {
        dataset: dataset_info(&d, &key),
        tasks: tasks
            .iter()
            .map(|t| task_view(t, d.public_ladders))
            .collect(),
    }))
}

async fn agent_view(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(name): UrlPath<String>,
) -> Answer<Response> {
    let d = dataset_for(&state, &key, &name).await?;
    let tasks = tasks_of(&state, &d).await?;
    let scratch = state.data_dir.join("tmp");
    let tar = tokio::task::spawn_blocking(move || agent_view_tar(&tasks, &scratch))
        .await
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let disposition = format!("attachment; filename=\"{name}-agent-view.tar\"");
    let mut r = ([(header::CONTENT_TYPE, "application/x-tar")], tar).into_response();
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}

async fn leaderboard(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(name): UrlPath<String>,
) -> Answer<Json<Vec<LeaderboardRow>>> {
    let d = dataset_for(&state, &key, &name).await?;
    let rows = state.db.leaderboard(&d.id, &key).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| LeaderboardRow {
                submitter: r.submitter,
                model: r.model,
                mean_reward: r.mean_reward,
                records: r.records,
                runs: r.runs,
            })
            .collect(),
    ))
}

fn run_info(r: &RunRow) -> RunInfo {
    let state = if r.done >= r.total {
        "finished"
    } else if r.done > 0 || r.running > 0 {
        "running"
    } else {
        "queued"
    };
    RunInfo {
        id: r.id.clone(),
        dataset: r.dataset.clone(),
        submitted_by: r.key_name.clone(),
        created_at: rfc3339(r.created_at),
        state: state.into(),
        total: r.total,
        done: r.done,
        running: r.running,
        mean_reward: r.mean_reward,
        verdicts: r.verdicts.clone(),
    }
}

/// Query of `POST /api/runs`.
#[derive(Debug, Deserialize)]
struct SubmitQuery {
    dataset: Option<String>,
    filename: Option<String>,
}

async fn submit(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    Query(q): Query<SubmitQuery>,
    body: Bytes,
) -> Answer<(StatusCode, Json<RunInfo>)> {
    let name = q
        .dataset
        .ok_or_else(|| Failure::bad("`dataset`: name the dataset to grade against"))?;
    let d = dataset_for(&state, &key, &name).await?;
    let filename = q.filename.unwrap_or_else(|| "predictions".into());
    let entries = parse_predictions(&body, &filename).map_err(Failure::bad)?;
    if entries.is_empty() {
        return Err(Failure::bad(format!("{filename}: holds no prediction")));
    }
    // Model names are shown to every submitter of the dataset (the
    // leaderboard): bounded, like any name.
    for entry in &entries {
        if let PredictionEntry::Valid(p) = entry {
            if p.model_name_or_path.len() > MAX_MODEL_NAME_BYTES {
                return Err(Failure::bad(format!(
                    "{filename}: {}: model_name_or_path is longer than {MAX_MODEL_NAME_BYTES} bytes",
                    p.location
                )));
            }
            if crate::keys::may_hold_a_key(&p.model_name_or_path) {
                return Err(Failure::bad(format!(
                    "{filename}: {}: model_name_or_path looks like an API key (every submitter of the dataset sees model names)",
                    p.location
                )));
            }
        }
    }
    // A file with no gradable entry at all is refused whole: it would only
    // spend a run on invalid records. (One bad entry among good ones costs
    // only itself, as in a local grade.)
    if let Some(PredictionEntry::Invalid(first)) = entries
        .iter()
        .all(|e| matches!(e, PredictionEntry::Invalid(_)))
        .then(|| entries.first())
        .flatten()
    {
        return Err(Failure::bad(format!(
            "{filename}: no entry can be graded; {}: {}",
            first.location, first.reason
        )));
    }
    if entries.len() as i64 > key.quotas.predictions_per_run {
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "quota: at most {} predictions a run for this key; {filename} has {}",
                key.quotas.predictions_per_run,
                entries.len()
            ),
        ));
    }
    let stored: Vec<String> = entries
        .iter()
        .map(|e| serde_json::to_string(&StoredEntry::from(e)).expect("plain data serializes"))
        .collect();
    // The quotas are checked and charged in the run's own transaction.
    // Each prediction is charged what its job, record and score take to
    // store too: a file of many tiny (even invalid) lines is not cheap.
    let charged = body.len() as i64 + stored.len() as i64 * STORED_BYTES_PER_PREDICTION;
    let id = state
        .db
        .create_run(&key, &d.id, charged, &stored)
        .await?
        .map_err(|quota| Failure::new(StatusCode::TOO_MANY_REQUESTS, quota.to_string()))?;
    let run = state
        .db
        .run_for(&key, &id)
        .await?
        .ok_or_else(|| Failure::not_found("run"))?;
    Ok((StatusCode::CREATED, Json(run_info(&run))))
}

async fn list_runs(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
) -> Answer<Json<Vec<RunInfo>>> {
    let runs = state.db.runs_for(&key).await?;
    Ok(Json(runs.iter().map(run_info).collect()))
}

async fn run_for(state: &AppState, key: &KeyRow, id: &str) -> Answer<RunRow> {
    state
        .db
        .run_for(key, id)
        .await?
        .ok_or_else(|| Failure::not_found(&format!("run `{id}` for this key")))
}

async fn run_status(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(id): UrlPath<String>,
) -> Answer<Json<RunInfo>> {
    Ok(Json(run_info(&run_for(&state, &key, &id).await?)))
}

async fn delete_run(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(id): UrlPath<String>,
) -> Answer<StatusCode> {
    let run = run_for(&state, &key, &id).await?;
    // A submitter's deletion leaves its scores on the leaderboard; an admin
    // curating the board removes them too.
    state
        .db
        .delete_run(&run.id, key.role == Role::Admin)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The submitter's view of every record of a run.
async fn view_records(
    state: &Shared,
    key: &KeyRow,
    run: &RunRow,
) -> Answer<(Vec<serde_json::Value>, Vec<ResultRecord>)> {
    let d = state
        .db
        .dataset_by_id(&run.dataset_id)
        .await?
        .ok_or_else(|| Failure::not_found("dataset"))?;
    let tasks = tasks_of(state, &d).await?;
    let by_id: BTreeMap<&str, &pdl_task::Task> = tasks
        .iter()
        .map(|t| (t.row.instance_id.as_str(), t))
        .collect();
    let mut views = Vec::new();
    let mut records = Vec::new();
    for stored in state.db.results(key, run).await? {
        let record: ResultRecord = serde_json::from_str(&stored.record).map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("stored record {} is unreadable: {e}", stored.seq),
            )
        })?;
        let task = by_id.get(record.instance_id.as_str()).copied();
        let view = submitter_record(&record, task, d.public_ladders);
        // The report is rendered from the submitter's view only.
        if let Ok(r) = serde_json::from_value::<ResultRecord>(view.clone()) {
            records.push(r);
        }
        views.push(view);
    }
    Ok((views, records))
}

async fn run_report(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(id): UrlPath<String>,
) -> Answer<Json<RunReport>> {
    let run = run_for(&state, &key, &id).await?;
    let (records, _) = view_records(&state, &key, &run).await?;
    Ok(Json(RunReport {
        run: run_info(&run),
        records,
    }))
}

async fn run_report_html(
    State(state): State<Shared>,
    Extension(key): Extension<KeyRow>,
    UrlPath(id): UrlPath<String>,
) -> Answer<Response> {
    let run = run_for(&state, &key, &id).await?;
    let (_, records) = view_records(&state, &key, &run).await?;
    let report = pdl_report::RunReport::from_records(
        Path::new(&format!("run-{}", run.id)),
        None,
        &records,
        &BTreeMap::new(),
    );
    let html = pdl_report::render::render_html(&report);
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;

    fn documented() -> BTreeSet<(String, String)> {
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(OPENAPI_YAML).unwrap();
        let mut out = BTreeSet::new();
        for (path, item) in doc["paths"].as_mapping().expect("paths") {
            for (method, _) in item.as_mapping().expect("operations") {
                out.insert((
                    method.as_str().unwrap().to_string(),
                    path.as_str().unwrap().to_string(),
                ));
            }
        }
        out
    }

    #[test]
    fn the_openapi_description_lists_exactly_the_routes_the_router_serves() {
        let routes: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(documented(), routes, "docs/openapi.yaml and ROUTES differ");

        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let data_dir = prepare_data_dir(dir.path()).unwrap();
            let db = Db::open(&database_url(&data_dir, None)).await.unwrap();
            let key = crate::keys::new_key();
            db.create_key("probe", Role::Admin, &hash_key(&key), Quotas::default())
                .await
                .unwrap();
            let state = Arc::new(AppState {
                db,
                data_dir,
                tasks: Arc::new(TaskCache::default()),
                limits: Limits::default(),
                windows: Mutex::new(HashMap::new()),
                uploading: Mutex::new(HashSet::new()),
                uploads: Arc::new(tokio::sync::Semaphore::new(MAX_UPLOADS_AT_ONCE)),
            });
            let log: Arc<Log> = Arc::new(|_| {});
            let app = router(state, log);
            let paths: BTreeSet<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
            for path in paths {
                let uri = path.replace("{name}", "x").replace("{id}", "x");
                for method in ["get", "post", "delete"] {
                    let request = Request::builder()
                        .method(method.to_uppercase().as_str())
                        .uri(&uri)
                        .header("authorization", format!("Bearer {key}"))
                        .body(Body::empty())
                        .unwrap();
                    let response = app.clone().oneshot(request).await.unwrap();
                    let status = response.status();
                    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                        .await
                        .unwrap();
                    let unrouted = String::from_utf8_lossy(&body).contains("no such route");
                    let served = ROUTES.contains(&(method, path));
                    if served {
                        assert!(
                            !unrouted && status != StatusCode::METHOD_NOT_ALLOWED,
                            "{method} {path}: {status}"
                        );
                    } else {
                        assert!(
                            status == StatusCode::METHOD_NOT_ALLOWED,
                            "{method} {path} is served but not documented: {status}"
                        );
                    }
                }
            }
            // Every API route but health needs a key.
            for (method, path) in ROUTES.iter().filter(|(_, p)| *p != "/api/health") {
                let request = Request::builder()
                    .method(method.to_uppercase().as_str())
                    .uri(path.replace("{name}", "x").replace("{id}", "x"))
                    .body(Body::empty())
                    .unwrap();
                let status = app.clone().oneshot(request).await.unwrap().status();
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
            }
        });
    }
}
