//! The service's database ([`Db`]): API keys, datasets, runs, the durable job
//! queue and the result records, in SQLite (a file in the data folder, the
//! default) or PostgreSQL, with one schema and one set of queries for both
//! (sqlx's `Any` driver; placeholders are `$1`, `$2`, … on both).
//!
//! Migrations ([`MIGRATIONS`]) are applied on start, each once, in order; the
//! versions applied are kept in `schema_migrations`.
//!
//! The queue: a run's predictions are one job each (`jobs`, unique by run and
//! sequence number). A worker claims a job with a lease ([`Db::claim`]: a
//! conditional update that succeeds for one worker only), renews it while it
//! grades ([`Db::renew`]), and records the result ([`Db::complete`]) in one
//! transaction that marks the job done only while the worker still holds it
//! and inserts the record with `ON CONFLICT DO NOTHING` on the primary key
//! (run, sequence number): a record is stored once, whatever crashes and
//! restarts happen around it. A job whose lease ran out (its worker was
//! killed) is claimed again.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

/// A database error, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("database: {what}: {source}")]
pub struct DbError {
    /// What was being done.
    pub what: &'static str,
    /// The driver's error.
    #[source]
    pub source: sqlx::Error,
}

trait Context<T> {
    fn ctx(self, what: &'static str) -> Result<T, DbError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn ctx(self, what: &'static str) -> Result<T, DbError> {
        self.map_err(|source| DbError { what, source })
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A random identifier: `bytes` random bytes in hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the system's random source works");
    hex::encode(buf)
}

/// The schema, one migration per entry (version, statements). Types are
/// those both databases accept: TEXT, BIGINT, DOUBLE PRECISION.
pub const MIGRATIONS: &[(i64, &[&str])] = &[
    (
        1,
        &[
            "CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            role TEXT NOT NULL,
            key_hash TEXT NOT NULL UNIQUE,
            created_at BIGINT NOT NULL,
            runs_per_day BIGINT NOT NULL,
            predictions_per_run BIGINT NOT NULL,
            upload_bytes_per_day BIGINT NOT NULL,
            requests_per_minute BIGINT NOT NULL)",
            "CREATE TABLE datasets (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            file TEXT NOT NULL,
            tasks BIGINT NOT NULL,
            public_ladders BIGINT NOT NULL,
            created_by TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            bytes BIGINT NOT NULL)",
            "CREATE TABLE dataset_grants (
            dataset_id TEXT NOT NULL,
            key_id TEXT NOT NULL,
            PRIMARY KEY (dataset_id, key_id))",
            "CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            key_id TEXT NOT NULL,
            dataset_id TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            bytes BIGINT NOT NULL,
            total BIGINT NOT NULL,
            finished_at BIGINT)",
            "CREATE INDEX runs_by_key ON runs (key_id, created_at)",
            "CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            entry TEXT NOT NULL,
            state TEXT NOT NULL,
            queued_at BIGINT NOT NULL,
            lease_owner TEXT,
            lease_until BIGINT NOT NULL,
            attempts BIGINT NOT NULL,
            UNIQUE (run_id, seq))",
            "CREATE INDEX jobs_by_state ON jobs (state, lease_until)",
            "CREATE TABLE results (
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            instance_id TEXT NOT NULL,
            model TEXT NOT NULL,
            reward DOUBLE PRECISION NOT NULL,
            verdict TEXT NOT NULL,
            record TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (run_id, seq))",
        ],
    ),
    (
        2,
        &[
            // What each key has used, never refunded: deleting a run or a
            // dataset leaves its charge here, and quota checks read only this.
            "CREATE TABLE usage (
            id TEXT PRIMARY KEY,
            key_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            amount BIGINT NOT NULL,
            created_at BIGINT NOT NULL)",
            "CREATE INDEX usage_by_key ON usage (key_id, kind, created_at)",
            "INSERT INTO usage (id, key_id, kind, amount, created_at)
            SELECT 'run-' || id, key_id, 'run', 1, created_at FROM runs",
            "INSERT INTO usage (id, key_id, kind, amount, created_at)
            SELECT 'run-bytes-' || id, key_id, 'bytes', bytes, created_at FROM runs",
            "INSERT INTO usage (id, key_id, kind, amount, created_at)
            SELECT 'dataset-bytes-' || id, created_by, 'bytes', bytes, created_at FROM datasets",
            // The leaderboard's rows: kept when a submitter deletes a run, so
            // no one keeps only their best runs on the board.
            "CREATE TABLE scores (
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            run_created_at BIGINT NOT NULL,
            dataset_id TEXT NOT NULL,
            key_id TEXT NOT NULL,
            model TEXT NOT NULL,
            reward DOUBLE PRECISION NOT NULL,
            verdict TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (run_id, seq))",
            "CREATE INDEX scores_by_dataset ON scores (dataset_id)",
            // Whose job it is, kept when its run is deleted while it is being
            // graded: the key stays busy until the grading ends.
            "ALTER TABLE jobs ADD COLUMN key_id TEXT",
            "UPDATE jobs SET key_id = (SELECT key_id FROM runs WHERE runs.id = jobs.run_id)",
            "INSERT INTO scores (run_id, seq, run_created_at, dataset_id, key_id, model, reward, verdict, created_at)
            SELECT res.run_id, res.seq, r.created_at, r.dataset_id, r.key_id, res.model, res.reward, res.verdict, res.created_at
            FROM results res JOIN runs r ON r.id = res.run_id",
        ],
    ),
];

/// The window quotas count over: a day, in milliseconds.
pub const QUOTA_WINDOW_MS: i64 = 86_400_000;

/// What one request would use of its key's quotas.
#[derive(Debug, Clone, Copy, Default)]
pub struct Charge {
    /// Runs started.
    pub runs: i64,
    /// Bytes uploaded.
    pub bytes: i64,
}

/// A request that would take its key over a quota; the message says which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quota: {0}")]
pub struct QuotaExceeded(pub String);

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// Roles of API keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Uploads datasets, sees every run.
    Admin,
    /// Submits predictions to the datasets granted to it.
    Submitter,
}

impl Role {
    /// The role's name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Submitter => "submitter",
        }
    }

    /// The role a name stands for.
    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "admin" => Some(Role::Admin),
            "submitter" => Some(Role::Submitter),
            _ => None,
        }
    }
}

/// Per-key limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Quotas {
    /// Runs a key may start in any 24 hours.
    pub runs_per_day: i64,
    /// Predictions in one run.
    pub predictions_per_run: i64,
    /// Bytes a key may upload (predictions and datasets) in any 24 hours.
    pub upload_bytes_per_day: i64,
    /// Requests a key may make in any minute.
    pub requests_per_minute: i64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            runs_per_day: 100,
            predictions_per_run: 10_000,
            upload_bytes_per_day: 2 << 30,
            requests_per_minute: 600,
        }
    }
}

/// An API key as stored (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// Its identifier.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its limits.
    pub quotas: Quotas,
}

/// A dataset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetRow {
    /// Its identifier.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The canonical JSONL file, relative to the data folder.
    pub file: String,
    /// Tasks in it.
    pub tasks: i64,
    /// Whether submitters may see ladder rung names and landed rungs.
    pub public_ladders: bool,
    /// When it was uploaded (ms).
    pub created_at: i64,
    /// The names of the keys granted (empty: every submitter).
    pub grants: Vec<String>,
}

/// A run as stored, with its progress.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// Its identifier.
    pub id: String,
    /// The key that submitted it.
    pub key_id: String,
    /// That key's name.
    pub key_name: String,
    /// Its dataset's name.
    pub dataset: String,
    /// Its dataset's identifier.
    pub dataset_id: String,
    /// When it was submitted (ms).
    pub created_at: i64,
    /// When its last record was stored (ms).
    pub finished_at: Option<i64>,
    /// Predictions in it.
    pub total: i64,
    /// Records stored.
    pub done: i64,
    /// Jobs being graded now.
    pub running: i64,
    /// Mean reward of the records but harness errors.
    pub mean_reward: Option<f64>,
    /// Records per verdict.
    pub verdicts: BTreeMap<String, i64>,
}

/// A claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    /// Its identifier.
    pub id: String,
    /// Its run.
    pub run_id: String,
    /// Its place in the run.
    pub seq: i64,
    /// The prediction, as stored ([`crate::worker::StoredEntry`] JSON).
    pub entry: String,
    /// Claims so far, this one included.
    pub attempts: i64,
    /// The run's dataset.
    pub dataset_id: String,
    /// The key that submitted the run.
    pub key_id: String,
    /// When the run was submitted (ms).
    pub run_created_at: i64,
}

/// A stored result record.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResult {
    /// Its place in the run.
    pub seq: i64,
    /// The record's JSON.
    pub record: String,
}

/// One row of a leaderboard.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardRow {
    /// The name of the key whose runs these are: one submitter's model name
    /// never merges into another's row.
    pub submitter: String,
    /// The model.
    pub model: String,
    /// Records of it.
    pub records: i64,
    /// Runs it appears in.
    pub runs: i64,
    /// Mean reward (harness errors left out).
    pub mean_reward: Option<f64>,
}

/// The database.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    publish_every_ms: i64,
}

/// How often, by default, a submitter's view of a run moves on (ms).
pub const DEFAULT_PUBLISH_EVERY_MS: i64 = 10_000;

impl Db {
    /// Connects to `url` (`sqlite://PATH?mode=rwc` or `postgres://…`) and
    /// applies the migrations not yet applied.
    pub async fn open(url: &str) -> Result<Db, DbError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        };
        // SQLite: one connection, so writers never meet a busy database.
        let max = if backend == Backend::Sqlite { 1 } else { 8 };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(std::time::Duration::from_secs(30))
            .connect(url)
            .await
            .ctx("connect")?;
        let db = Db {
            pool,
            backend,
            publish_every_ms: DEFAULT_PUBLISH_EVERY_MS,
        };
        if backend == Backend::Sqlite {
            sqlx::query("PRAGMA journal_mode=WAL")
                .execute(&db.pool)
                .await
                .ctx("enable WAL")?;
        }
        db.migrate().await?;
        Ok(db)
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Sets how often a submitter's view of a run moves on: a record stored
    /// at `t` shows from the first multiple of `every_ms` after the run's
    /// start that is not before `t`. When a record appears then tells its
    /// grading's time only to that step (a test run's time is a channel out
    /// of the hidden tests); admins see every record at once.
    pub fn with_publish_every(mut self, every_ms: i64) -> Db {
        self.publish_every_ms = every_ms.max(1);
        self
    }

    /// The latest storing time of the records `key` may see of a run that
    /// started at `created_at`, at `now`.
    pub fn visible_until(&self, key: &KeyRow, created_at: i64, now: i64) -> i64 {
        if key.role == Role::Admin {
            return i64::MAX;
        }
        let every = self.publish_every_ms;
        created_at + (now - created_at).max(0) / every * every
    }

    async fn migrate(&self) -> Result<(), DbError> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
        )
        .execute(&self.pool)
        .await
        .ctx("create schema_migrations")?;
        for (version, statements) in MIGRATIONS {
            let applied: i64 =
                sqlx::query("SELECT COUNT(*) AS n FROM schema_migrations WHERE version = $1")
                    .bind(*version)
                    .fetch_one(&self.pool)
                    .await
                    .ctx("read schema_migrations")?
                    .try_get("n")
                    .ctx("read schema_migrations")?;
            if applied > 0 {
                continue;
            }
            let mut tx = self.pool.begin().await.ctx("begin migration")?;
            for statement in *statements {
                sqlx::query(statement)
                    .execute(&mut *tx)
                    .await
                    .ctx("apply migration")?;
            }
            sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
                .bind(*version)
                .bind(now_ms())
                .execute(&mut *tx)
                .await
                .ctx("record migration")?;
            tx.commit().await.ctx("commit migration")?;
        }
        Ok(())
    }

    /// The migration versions applied.
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, DbError> {
        let rows = sqlx::query("SELECT version FROM schema_migrations ORDER BY version")
            .fetch_all(&self.pool)
            .await
            .ctx("read schema_migrations")?;
        rows.iter()
            .map(|r| r.try_get::<i64, _>("version"))
            .collect::<Result<_, _>>()
            .ctx("read schema_migrations")
    }

    // ---- keys ----

    /// Stores a new key by its hash. Fails when the name is taken.
    pub async fn create_key(
        &self,
        name: &str,
        role: Role,
        key_hash: &str,
        quotas: Quotas,
    ) -> Result<String, DbError> {
        let id = random_hex(8);
        sqlx::query(
            "INSERT INTO api_keys (id, name, role, key_hash, created_at, runs_per_day, predictions_per_run, upload_bytes_per_day, requests_per_minute)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&id)
        .bind(name)
        .bind(role.name())
        .bind(key_hash)
        .bind(now_ms())
        .bind(quotas.runs_per_day)
        .bind(quotas.predictions_per_run)
        .bind(quotas.upload_bytes_per_day)
        .bind(quotas.requests_per_minute)
        .execute(&self.pool)
        .await
        .ctx("create key")?;
        Ok(id)
    }

    fn key_row(row: &AnyRow) -> Result<KeyRow, sqlx::Error> {
        let role: String = row.try_get("role")?;
        Ok(KeyRow {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            role: Role::parse(&role).unwrap_or(Role::Submitter),
            quotas: Quotas {
                runs_per_day: row.try_get("runs_per_day")?,
                predictions_per_run: row.try_get("predictions_per_run")?,
                upload_bytes_per_day: row.try_get("upload_bytes_per_day")?,
                requests_per_minute: row.try_get("requests_per_minute")?,
            },
        })
    }

    /// The key with this hash.
    pub async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRow>, DbError> {
        let row = sqlx::query("SELECT * FROM api_keys WHERE key_hash = $1")
            .bind(key_hash)
            .fetch_optional(&self.pool)
            .await
            .ctx("find key")?;
        row.as_ref().map(Self::key_row).transpose().ctx("read key")
    }

    /// The keys with these names; names that match none are returned apart.
    pub async fn keys_by_name(
        &self,
        names: &[String],
    ) -> Result<(Vec<KeyRow>, Vec<String>), DbError> {
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for name in names {
            let row = sqlx::query("SELECT * FROM api_keys WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await
                .ctx("find key")?;
            match row {
                Some(row) => found.push(Self::key_row(&row).ctx("read key")?),
                None => missing.push(name.clone()),
            }
        }
        Ok((found, missing))
    }

    // ---- datasets ----

    /// Stores a dataset's row and grants in one transaction. Fails when the
    /// name is taken.
    #[expect(clippy::too_many_arguments)]
    pub async fn create_dataset(
        &self,
        id: &str,
        name: &str,
        file: &str,
        tasks: i64,
        public_ladders: bool,
        created_by: &str,
        bytes: i64,
        grants: &[KeyRow],
        charged_to: &KeyRow,
    ) -> Result<Result<(), QuotaExceeded>, DbError> {
        let mut tx = self.pool.begin().await.ctx("begin")?;
        if let Err(quota) = Self::charge(&mut tx, charged_to, Charge { runs: 0, bytes }).await? {
            tx.rollback().await.ctx("roll back dataset")?;
            return Ok(Err(quota));
        }
        sqlx::query(
            "INSERT INTO datasets (id, name, file, tasks, public_ladders, created_by, created_at, bytes)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(id)
        .bind(name)
        .bind(file)
        .bind(tasks)
        .bind(i64::from(public_ladders))
        .bind(created_by)
        .bind(now_ms())
        .bind(bytes)
        .execute(&mut *tx)
        .await
        .ctx("create dataset")?;
        for key in grants {
            sqlx::query("INSERT INTO dataset_grants (dataset_id, key_id) VALUES ($1, $2)")
                .bind(id)
                .bind(&key.id)
                .execute(&mut *tx)
                .await
                .ctx("grant dataset")?;
        }
        tx.commit().await.ctx("commit dataset")?;
        Ok(Ok(()))
    }

    /// True when a dataset has this name.
    pub async fn dataset_name_taken(&self, name: &str) -> Result<bool, DbError> {
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM datasets WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .ctx("find dataset")?
            .try_get("n")
            .ctx("find dataset")?;
        Ok(n > 0)
    }

    async fn dataset_from_row(&self, row: &AnyRow) -> Result<DatasetRow, DbError> {
        let id: String = row.try_get("id").ctx("read dataset")?;
        let grants = sqlx::query(
            "SELECT k.name AS name FROM dataset_grants g JOIN api_keys k ON k.id = g.key_id
             WHERE g.dataset_id = $1 ORDER BY k.name",
        )
        .bind(&id)
        .fetch_all(&self.pool)
        .await
        .ctx("read grants")?
        .iter()
        .map(|r| r.try_get::<String, _>("name"))
        .collect::<Result<Vec<_>, _>>()
        .ctx("read grants")?;
        Ok(DatasetRow {
            name: row.try_get("name").ctx("read dataset")?,
            file: row.try_get("file").ctx("read dataset")?,
            tasks: row.try_get("tasks").ctx("read dataset")?,
            public_ladders: row
                .try_get::<i64, _>("public_ladders")
                .ctx("read dataset")?
                != 0,
            created_at: row.try_get("created_at").ctx("read dataset")?,
            grants,
            id,
        })
    }

    /// Every dataset `key` may use (an admin: all of them), by name.
    pub async fn datasets_for(&self, key: &KeyRow) -> Result<Vec<DatasetRow>, DbError> {
        let rows = sqlx::query("SELECT * FROM datasets ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .ctx("list datasets")?;
        let mut out = Vec::new();
        for row in &rows {
            let d = self.dataset_from_row(row).await?;
            if self.may_use(key, &d).await? {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// The dataset called `name`, when `key` may use it.
    pub async fn dataset_for(
        &self,
        key: &KeyRow,
        name: &str,
    ) -> Result<Option<DatasetRow>, DbError> {
        let row = sqlx::query("SELECT * FROM datasets WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .ctx("find dataset")?;
        let Some(row) = row else { return Ok(None) };
        let d = self.dataset_from_row(&row).await?;
        Ok(self.may_use(key, &d).await?.then_some(d))
    }

    /// The dataset with this identifier.
    pub async fn dataset_by_id(&self, id: &str) -> Result<Option<DatasetRow>, DbError> {
        let row = sqlx::query("SELECT * FROM datasets WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx("find dataset")?;
        match row {
            Some(row) => Ok(Some(self.dataset_from_row(&row).await?)),
            None => Ok(None),
        }
    }

    async fn may_use(&self, key: &KeyRow, d: &DatasetRow) -> Result<bool, DbError> {
        if key.role == Role::Admin || d.grants.is_empty() {
            return Ok(true);
        }
        let n: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM dataset_grants WHERE dataset_id = $1 AND key_id = $2",
        )
        .bind(&d.id)
        .bind(&key.id)
        .fetch_one(&self.pool)
        .await
        .ctx("read grants")?
        .try_get("n")
        .ctx("read grants")?;
        Ok(n > 0)
    }

    // ---- quotas ----

    /// What `key` used of `kind` (`run` or `bytes`) since `since_ms`.
    async fn used_since<'c, E>(
        executor: E,
        key: &KeyRow,
        kind: &str,
        since_ms: i64,
    ) -> Result<i64, DbError>
    where
        E: sqlx::Executor<'c, Database = sqlx::Any>,
    {
        sqlx::query(
            "SELECT COALESCE(CAST(SUM(amount) AS BIGINT), 0) AS n FROM usage
             WHERE key_id = $1 AND kind = $2 AND created_at >= $3",
        )
        .bind(&key.id)
        .bind(kind)
        .bind(since_ms)
        .fetch_one(executor)
        .await
        .ctx("count usage")?
        .try_get("n")
        .ctx("count usage")
    }

    /// Runs `key` started in the quota window.
    pub async fn runs_used(&self, key: &KeyRow) -> Result<i64, DbError> {
        Self::used_since(&self.pool, key, "run", now_ms() - QUOTA_WINDOW_MS).await
    }

    /// Bytes `key` uploaded (predictions and datasets) in the quota window.
    pub async fn bytes_used(&self, key: &KeyRow) -> Result<i64, DbError> {
        Self::used_since(&self.pool, key, "bytes", now_ms() - QUOTA_WINDOW_MS).await
    }

    /// Writes key `key_id`'s row inside `tx` (changing nothing): that takes
    /// PostgreSQL's row lock and SQLite's write lock until `tx` ends, so the
    /// transactions of one key that call this take turns.
    async fn lock_key(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        key_id: &str,
    ) -> Result<(), DbError> {
        sqlx::query("UPDATE api_keys SET runs_per_day = runs_per_day WHERE id = $1")
            .bind(key_id)
            .execute(&mut **tx)
            .await
            .ctx("lock key")?;
        Ok(())
    }

    /// Charges `charge` to `key` inside `tx`, or says which quota it would
    /// exceed. The key's row is written first: that takes PostgreSQL's row
    /// lock and SQLite's write lock until the transaction ends, so two
    /// requests of one key are charged one after the other and never both
    /// pass a check meant for one.
    async fn charge(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        key: &KeyRow,
        charge: Charge,
    ) -> Result<Result<(), QuotaExceeded>, DbError> {
        Self::lock_key(tx, &key.id).await?;
        let since = now_ms() - QUOTA_WINDOW_MS;
        if charge.runs > 0 {
            let used = Self::used_since(&mut **tx, key, "run", since).await?;
            if used + charge.runs > key.quotas.runs_per_day {
                return Ok(Err(QuotaExceeded(format!(
                    "this key may start {} runs a day and has started {used}",
                    key.quotas.runs_per_day
                ))));
            }
        }
        if charge.bytes > 0 {
            let used = Self::used_since(&mut **tx, key, "bytes", since).await?;
            if used + charge.bytes > key.quotas.upload_bytes_per_day {
                return Ok(Err(QuotaExceeded(format!(
                    "this key may upload {} bytes a day; {used} used, this upload is {}",
                    key.quotas.upload_bytes_per_day, charge.bytes
                ))));
            }
        }
        let now = now_ms();
        for (kind, amount) in [("run", charge.runs), ("bytes", charge.bytes)] {
            if amount == 0 {
                continue;
            }
            sqlx::query(
                "INSERT INTO usage (id, key_id, kind, amount, created_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(random_hex(12))
            .bind(&key.id)
            .bind(kind)
            .bind(amount)
            .bind(now)
            .execute(&mut **tx)
            .await
            .ctx("record usage")?;
        }
        Ok(Ok(()))
    }

    // ---- runs and jobs ----

    /// Stores a run and one queued job per entry, in one transaction.
    /// The run is charged to the key's quotas (one run, `bytes`) in the same
    /// transaction; nothing is stored when a quota would be exceeded.
    pub async fn create_run(
        &self,
        key: &KeyRow,
        dataset_id: &str,
        bytes: i64,
        entries: &[String],
    ) -> Result<Result<String, QuotaExceeded>, DbError> {
        let id = random_hex(12);
        let now = now_ms();
        let mut tx = self.pool.begin().await.ctx("begin")?;
        if let Err(quota) = Self::charge(&mut tx, key, Charge { runs: 1, bytes }).await? {
            tx.rollback().await.ctx("roll back run")?;
            return Ok(Err(quota));
        }
        sqlx::query(
            "INSERT INTO runs (id, key_id, dataset_id, created_at, bytes, total, finished_at)
             VALUES ($1, $2, $3, $4, $5, $6, NULL)",
        )
        .bind(&id)
        .bind(&key.id)
        .bind(dataset_id)
        .bind(now)
        .bind(bytes)
        .bind(entries.len() as i64)
        .execute(&mut *tx)
        .await
        .ctx("create run")?;
        for (seq, entry) in entries.iter().enumerate() {
            sqlx::query(
                "INSERT INTO jobs (id, run_id, seq, entry, state, queued_at, lease_owner, lease_until, attempts, key_id)
                 VALUES ($1, $2, $3, $4, 'queued', $5, NULL, 0, 0, $6)",
            )
            .bind(random_hex(12))
            .bind(&id)
            .bind(seq as i64)
            .bind(entry)
            .bind(now)
            .bind(&key.id)
            .execute(&mut *tx)
            .await
            .ctx("queue job")?;
        }
        tx.commit().await.ctx("commit run")?;
        Ok(Ok(id))
    }

    async fn run_from_row(&self, row: &AnyRow, key: &KeyRow) -> Result<RunRow, DbError> {
        let id: String = row.try_get("id").ctx("read run")?;
        let created_at: i64 = row.try_get("created_at").ctx("read run")?;
        let until = self.visible_until(key, created_at, now_ms());
        let mut running = 0;
        // Which job is being graded tells when the one before it ended: only
        // admins see it.
        if key.role == Role::Admin {
            let counts = sqlx::query(
                "SELECT state, COUNT(*) AS n FROM jobs WHERE run_id = $1 GROUP BY state",
            )
            .bind(&id)
            .fetch_all(&self.pool)
            .await
            .ctx("count jobs")?;
            for c in &counts {
                let state: String = c.try_get("state").ctx("count jobs")?;
                if state == "running" {
                    running = c.try_get("n").ctx("count jobs")?;
                }
            }
        }
        let verdict_rows = sqlx::query(
            "SELECT verdict, COUNT(*) AS n FROM results WHERE run_id = $1 AND created_at <= $2 GROUP BY verdict",
        )
        .bind(&id)
        .bind(until)
        .fetch_all(&self.pool)
        .await
        .ctx("count results")?;
        let mut verdicts = BTreeMap::new();
        let mut done = 0;
        for v in &verdict_rows {
            let n: i64 = v.try_get("n").ctx("count results")?;
            done += n;
            verdicts.insert(v.try_get("verdict").ctx("count results")?, n);
        }
        let mean: Option<f64> = sqlx::query(
            "SELECT AVG(reward) AS m FROM results WHERE run_id = $1 AND created_at <= $2 AND verdict <> 'harness_error'",
        )
        .bind(&id)
        .bind(until)
        .fetch_one(&self.pool)
        .await
        .ctx("mean reward")?
        .try_get("m")
        .ctx("mean reward")?;
        Ok(RunRow {
            key_id: row.try_get("key_id").ctx("read run")?,
            key_name: row.try_get("key_name").ctx("read run")?,
            dataset: row.try_get("dataset").ctx("read run")?,
            dataset_id: row.try_get("dataset_id").ctx("read run")?,
            created_at,
            finished_at: if key.role == Role::Admin {
                row.try_get("finished_at").ctx("read run")?
            } else {
                row.try_get::<Option<i64>, _>("finished_at")
                    .ctx("read run")?
                    .filter(|at| *at <= until)
                    .map(|_| until)
            },
            total: row.try_get("total").ctx("read run")?,
            done,
            running,
            mean_reward: mean,
            verdicts,
            id,
        })
    }

    const RUN_SELECT: &'static str = "SELECT r.id AS id, r.key_id AS key_id, k.name AS key_name, d.name AS dataset, r.dataset_id AS dataset_id,
            r.created_at AS created_at, r.finished_at AS finished_at, r.total AS total
         FROM runs r JOIN api_keys k ON k.id = r.key_id JOIN datasets d ON d.id = r.dataset_id";

    /// The runs `key` may see (its own; an admin: every run), newest first.
    pub async fn runs_for(&self, key: &KeyRow) -> Result<Vec<RunRow>, DbError> {
        let sql = format!(
            "{} WHERE r.key_id = $1 OR $2 = 1 ORDER BY r.created_at DESC, r.id",
            Self::RUN_SELECT
        );
        let rows = sqlx::query(&sql)
            .bind(&key.id)
            .bind(i64::from(key.role == Role::Admin))
            .fetch_all(&self.pool)
            .await
            .ctx("list runs")?;
        let mut out = Vec::new();
        for row in &rows {
            out.push(self.run_from_row(row, key).await?);
        }
        Ok(out)
    }

    /// The run `id`, when `key` may see it.
    pub async fn run_for(&self, key: &KeyRow, id: &str) -> Result<Option<RunRow>, DbError> {
        let sql = format!(
            "{} WHERE r.id = $1 AND (r.key_id = $2 OR $3 = 1)",
            Self::RUN_SELECT
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .bind(&key.id)
            .bind(i64::from(key.role == Role::Admin))
            .fetch_optional(&self.pool)
            .await
            .ctx("find run")?;
        match row {
            Some(row) => Ok(Some(self.run_from_row(&row, key).await?)),
            None => Ok(None),
        }
    }

    /// The records of run `run` that `key` may see now, in submission order.
    pub async fn results(&self, key: &KeyRow, run: &RunRow) -> Result<Vec<StoredResult>, DbError> {
        let until = self.visible_until(key, run.created_at, now_ms());
        let rows = sqlx::query(
            "SELECT seq, record FROM results WHERE run_id = $1 AND created_at <= $2 ORDER BY seq",
        )
        .bind(&run.id)
        .bind(until)
        .fetch_all(&self.pool)
        .await
        .ctx("read results")?;
        rows.iter()
            .map(|r| {
                Ok(StoredResult {
                    seq: r.try_get("seq")?,
                    record: r.try_get("record")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .ctx("read results")
    }

    /// Deletes run `id` with its jobs and records (a worker grading one of
    /// its jobs then finds the job gone and stores nothing). Its scores stay
    /// on the leaderboard unless `with_scores` (an admin's deletion).
    pub async fn delete_run(&self, id: &str, with_scores: bool) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await.ctx("begin")?;
        // A job being graded stays until its grading ends, so its key stays
        // busy (one grading of a key at a time) and, unless an admin deletes,
        // its score still reaches the leaderboard; its record is not kept.
        let mut statements = vec![
            "DELETE FROM jobs WHERE run_id = $1 AND NOT (state = 'running' AND lease_until >= $2)",
            "DELETE FROM results WHERE run_id = $1",
            "DELETE FROM runs WHERE id = $1",
        ];
        if with_scores {
            statements.push("DELETE FROM jobs WHERE run_id = $1");
            statements.push("DELETE FROM scores WHERE run_id = $1");
        }
        let now = now_ms();
        for sql in statements {
            let query = sqlx::query(sql).bind(id);
            let query = if sql.contains("$2") {
                query.bind(now)
            } else {
                query
            };
            query.execute(&mut *tx).await.ctx("delete run")?;
        }
        tx.commit().await.ctx("commit delete")
    }

    /// Claims the oldest job that is queued or whose lease ran out, for
    /// `owner`, until `lease_ms` from now. At most one worker wins a job:
    /// the claim is an update conditioned on the state it read.
    pub async fn claim(&self, owner: &str, lease_ms: i64) -> Result<Option<ClaimedJob>, DbError> {
        let now = now_ms();
        // One grading of a key at a time: gradings side by side share the
        // machine (memory, processors), so one prediction's hidden test run
        // could signal to another's public run graded at the same moment.
        // Jobs of deleted runs whose grading ended without its worker
        // (their lease ran out) are forgotten.
        sqlx::query(
            "DELETE FROM jobs WHERE state = 'running' AND lease_until < $1
             AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = jobs.run_id)",
        )
        .bind(now)
        .execute(&self.pool)
        .await
        .ctx("forget jobs")?;
        let candidates = sqlx::query(
            "SELECT j.id AS id, j.run_id AS run_id, j.seq AS seq, j.entry AS entry, j.attempts AS attempts,
                    r.dataset_id AS dataset_id, r.key_id AS key_id, r.created_at AS run_created_at
             FROM jobs j JOIN runs r ON r.id = j.run_id
             WHERE (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < $1))
               AND NOT EXISTS (SELECT 1 FROM jobs busy
                               WHERE busy.key_id = r.key_id AND busy.state = 'running'
                                 AND busy.lease_until >= $1)
             ORDER BY j.queued_at, j.run_id, j.seq LIMIT 16",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .ctx("find jobs")?;
        for c in &candidates {
            let id: String = c.try_get("id").ctx("read job")?;
            let key_id: String = c.try_get("key_id").ctx("read job")?;
            let mut tx = self.pool.begin().await.ctx("begin")?;
            // The key's row is written first: PostgreSQL's row lock (SQLite's
            // write lock) makes two workers' claims for one key take turns, so
            // the check below sees the other's claim.
            Self::lock_key(&mut tx, &key_id).await?;
            let claimed = sqlx::query(
                "UPDATE jobs SET state = 'running', lease_owner = $1, lease_until = $2, attempts = attempts + 1
                 WHERE id = $3 AND (state = 'queued' OR (state = 'running' AND lease_until < $4))
                   AND NOT EXISTS (SELECT 1 FROM jobs busy
                                   WHERE busy.key_id = $5 AND busy.state = 'running'
                                     AND busy.lease_until >= $4 AND busy.id <> $3)",
            )
            .bind(owner)
            .bind(now + lease_ms)
            .bind(&id)
            .bind(now)
            .bind(&key_id)
            .execute(&mut *tx)
            .await
            .ctx("claim job")?
            .rows_affected();
            tx.commit().await.ctx("commit claim")?;
            if claimed == 1 {
                return Ok(Some(ClaimedJob {
                    run_id: c.try_get("run_id").ctx("read job")?,
                    seq: c.try_get("seq").ctx("read job")?,
                    entry: c.try_get("entry").ctx("read job")?,
                    attempts: c.try_get::<i64, _>("attempts").ctx("read job")? + 1,
                    dataset_id: c.try_get("dataset_id").ctx("read job")?,
                    run_created_at: c.try_get("run_created_at").ctx("read job")?,
                    key_id,
                    id,
                }));
            }
        }
        Ok(None)
    }

    /// Extends `owner`'s lease on job `id`; false when it no longer holds it.
    pub async fn renew(&self, id: &str, owner: &str, lease_ms: i64) -> Result<bool, DbError> {
        let n = sqlx::query(
            "UPDATE jobs SET lease_until = $1 WHERE id = $2 AND lease_owner = $3 AND state = 'running'",
        )
        .bind(now_ms() + lease_ms)
        .bind(id)
        .bind(owner)
        .execute(&self.pool)
        .await
        .ctx("renew lease")?
        .rows_affected();
        Ok(n == 1)
    }

    /// Gives job `id` back to the queue (a worker stopping before it
    /// finished); `uncount` takes back the claim's attempt (the service was
    /// asked to stop: not the job's doing).
    pub async fn release(&self, id: &str, owner: &str, uncount: bool) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = 0, attempts = attempts - $3
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .bind(i64::from(uncount))
        .execute(&self.pool)
        .await
        .ctx("release job")?;
        Ok(())
    }

    /// Stores the record of job `job` and marks the job done, in one
    /// transaction, while `owner` holds it; the record is inserted at most
    /// once per (run, seq). Returns whether this call stored it.
    #[expect(clippy::too_many_arguments)]
    pub async fn complete(
        &self,
        job: &ClaimedJob,
        owner: &str,
        instance_id: &str,
        model: &str,
        reward: f64,
        verdict: &str,
        record: &str,
    ) -> Result<bool, DbError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await.ctx("begin")?;
        let held = sqlx::query(
            "UPDATE jobs SET state = 'done', lease_owner = NULL WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(&job.id)
        .bind(owner)
        .execute(&mut *tx)
        .await
        .ctx("finish job")?
        .rows_affected();
        if held != 1 {
            tx.rollback().await.ctx("rollback")?;
            return Ok(false);
        }
        // A job whose run was deleted while it was graded leaves no record.
        let stored = sqlx::query(
            "INSERT INTO results (run_id, seq, instance_id, model, reward, verdict, record, created_at)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1)
             ON CONFLICT (run_id, seq) DO NOTHING",
        )
        .bind(&job.run_id)
        .bind(job.seq)
        .bind(instance_id)
        .bind(model)
        .bind(reward)
        .bind(verdict)
        .bind(record)
        .bind(now)
        .execute(&mut *tx)
        .await
        .ctx("store result")?
        .rows_affected();
        sqlx::query(
            "INSERT INTO scores (run_id, seq, run_created_at, dataset_id, key_id, model, reward, verdict, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (run_id, seq) DO NOTHING",
        )
        .bind(&job.run_id)
        .bind(job.seq)
        .bind(job.run_created_at)
        .bind(&job.dataset_id)
        .bind(&job.key_id)
        .bind(model)
        .bind(reward)
        .bind(verdict)
        .bind(now)
        .execute(&mut *tx)
        .await
        .ctx("store score")?;
        if stored == 0 {
            // The run is gone: so is its job.
            sqlx::query(
                "DELETE FROM jobs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM runs WHERE id = $2)",
            )
            .bind(&job.id)
            .bind(&job.run_id)
            .execute(&mut *tx)
            .await
            .ctx("forget job")?;
        }
        sqlx::query(
            "UPDATE runs SET finished_at = $1 WHERE id = $2 AND finished_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM jobs WHERE run_id = $2 AND state <> 'done')",
        )
        .bind(now)
        .bind(&job.run_id)
        .execute(&mut *tx)
        .await
        .ctx("finish run")?;
        tx.commit().await.ctx("commit result")?;
        Ok(stored == 1)
    }

    /// Per submitting key and model, the mean reward over every score of
    /// dataset `dataset_id` that `viewer` may see now: a submitter sees a
    /// score when it could see its record (the publication step), an admin
    /// at once.
    pub async fn leaderboard(
        &self,
        dataset_id: &str,
        viewer: &KeyRow,
    ) -> Result<Vec<BoardRow>, DbError> {
        let every = if viewer.role == Role::Admin {
            1
        } else {
            self.publish_every_ms
        };
        let rows = sqlx::query(
            "SELECT k.name AS submitter, s.model AS model, COUNT(*) AS records,
                    COUNT(DISTINCT s.run_id) AS runs,
                    AVG(CASE WHEN s.verdict <> 'harness_error' THEN s.reward END) AS mean_reward
             FROM scores s JOIN api_keys k ON k.id = s.key_id
             WHERE s.dataset_id = $1
               AND s.created_at <= s.run_created_at + (($2 - s.run_created_at) / $3) * $3
             GROUP BY k.name, s.model",
        )
        .bind(dataset_id)
        .bind(now_ms())
        .bind(every)
        .fetch_all(&self.pool)
        .await
        .ctx("leaderboard")?;
        let mut board = rows
            .iter()
            .map(|r| {
                Ok(BoardRow {
                    submitter: r.try_get("submitter")?,
                    model: r.try_get("model")?,
                    records: r.try_get("records")?,
                    runs: r.try_get("runs")?,
                    mean_reward: r.try_get("mean_reward")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .ctx("leaderboard")?;
        board.sort_by(|a, b| {
            b.mean_reward
                .unwrap_or(-1.0)
                .total_cmp(&a.mean_reward.unwrap_or(-1.0))
                .then_with(|| a.model.cmp(&b.model))
                .then_with(|| a.submitter.cmp(&b.submitter))
        });
        Ok(board)
    }

    /// Every stored record of every run, as (run, seq) pairs: for checks
    /// that nothing is stored twice.
    pub async fn result_keys(&self) -> Result<Vec<(String, i64)>, DbError> {
        let rows = sqlx::query("SELECT run_id, seq FROM results ORDER BY run_id, seq")
            .fetch_all(&self.pool)
            .await
            .ctx("read results")?;
        rows.iter()
            .map(|r| Ok((r.try_get("run_id")?, r.try_get("seq")?)))
            .collect::<Result<_, sqlx::Error>>()
            .ctx("read results")
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_job_is_claimed_by_one_worker_and_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
            let db = Db::open(&url).await.unwrap();
            // Opening again applies nothing twice.
            let again = Db::open(&url).await.unwrap();
            assert_eq!(again.applied_migrations().await.unwrap(), vec![1, 2]);
            let id = db
                .create_key("k", Role::Submitter, "hash", Quotas::default())
                .await
                .unwrap();
            let key = db.key_by_hash("hash").await.unwrap().unwrap();
            assert_eq!(key.id, id);
            db.create_dataset("d1", "d", "datasets/d1.jsonl", 1, false, &id, 10, &[], &key)
                .await
                .unwrap()
                .unwrap();
            let run = db
                .create_run(&key, "d1", 5, &["{}".to_string()])
                .await
                .unwrap()
                .unwrap();

            let first = db.claim("a", 60_000).await.unwrap().expect("a claims");
            assert_eq!(first.attempts, 1);
            assert!(db.claim("b", 60_000).await.unwrap().is_none(), "held by a");
            assert!(db.renew(&first.id, "a", 60_000).await.unwrap());
            assert!(!db.renew(&first.id, "b", 60_000).await.unwrap());

            // A stop gives it back uncounted.
            db.release(&first.id, "a", true).await.unwrap();
            let second = db.claim("b", 0).await.unwrap().expect("b claims");
            assert_eq!(second.attempts, 1);
            // b's lease (0 ms) runs out: c takes the job over.
            std::thread::sleep(std::time::Duration::from_millis(5));
            let third = db.claim("c", 60_000).await.unwrap().expect("c claims");
            assert_eq!(third.attempts, 2);
            // b lost its lease: it stores nothing; c stores once.
            assert!(!db
                .complete(&second, "b", "i", "m", 0.2, "graded", "{\"b\":1}")
                .await
                .unwrap());
            assert!(db
                .complete(&third, "c", "i", "m", 0.2, "graded", "{\"c\":1}")
                .await
                .unwrap());
            assert!(!db
                .complete(&third, "c", "i", "m", 0.2, "graded", "{\"c\":2}")
                .await
                .unwrap());
            assert!(db.claim("d", 60_000).await.unwrap().is_none(), "done");
            // The submitter's view moves on in steps of 10 s by default.
            let row = db.run_for(&key, &run).await.unwrap().unwrap();
            assert_eq!(row.done, 0);
            assert!(db.results(&key, &row).await.unwrap().is_empty());
            let db = db.with_publish_every(1);
            std::thread::sleep(std::time::Duration::from_millis(2));
            let row = db.run_for(&key, &row.id).await.unwrap().unwrap();
            let results = db.results(&key, &row).await.unwrap();
            assert_eq!(results.len(), 1);
            assert_eq!(results[0].record, "{\"c\":1}");
            let row = db.run_for(&key, &run).await.unwrap().unwrap();
            assert_eq!((row.total, row.done, row.running), (1, 1, 0));
            assert!(row.finished_at.is_some());
            assert_eq!(row.mean_reward, Some(0.2));
            assert_eq!(db.leaderboard("d1", &key).await.unwrap()[0].records, 1);
            db.delete_run(&run, false).await.unwrap();
            assert!(db.result_keys().await.unwrap().is_empty());
            // The submitter's deletion leaves the score on the board.
            assert_eq!(db.leaderboard("d1", &key).await.unwrap()[0].records, 1);
            assert!(db.run_for(&key, &run).await.unwrap().is_none());
            // Deleting refunds nothing.
            assert_eq!(db.runs_used(&key).await.unwrap(), 1);
            assert_eq!(db.bytes_used(&key).await.unwrap(), 15);
        });
    }

    /// A key's predictions are graded one at a time, whatever the workers;
    /// another key's go on beside them.
    #[test]
    fn one_grading_of_a_key_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
            let db = Db::open(&url).await.unwrap();
            for name in ["k", "l"] {
                db.create_key(name, Role::Submitter, name, Quotas::default())
                    .await
                    .unwrap();
            }
            let k = db.key_by_hash("k").await.unwrap().unwrap();
            let l = db.key_by_hash("l").await.unwrap().unwrap();
            let two = ["{}".to_string(), "{}".to_string()];
            db.create_run(&k, "d", 1, &two).await.unwrap().unwrap();
            db.create_run(&k, "d", 1, &two).await.unwrap().unwrap();
            let first = db.claim("a", 60_000).await.unwrap().expect("a claims");
            assert_eq!(db.claim("b", 60_000).await.unwrap(), None, "k is busy");
            let other = db.create_run(&l, "d", 1, &two).await.unwrap().unwrap();
            let beside = db.claim("b", 60_000).await.unwrap().expect("l's job");
            assert_eq!(beside.run_id, other);
            assert!(db
                .complete(&first, "a", "i", "m", 0.2, "graded", "{}")
                .await
                .unwrap());
            let next = db.claim("a", 60_000).await.unwrap().expect("k's next");
            assert_ne!(next.run_id, other);
            // Deleting a run while its job is graded does not free the key
            // before the grading ends; the score still reaches the board,
            // the record is not kept.
            let busy_run = next.run_id.clone();
            db.delete_run(&busy_run, false).await.unwrap();
            db.create_run(&k, "d", 1, &two).await.unwrap().unwrap();
            assert_eq!(
                db.claim("b", 60_000).await.unwrap(),
                None,
                "k is still busy"
            );
            assert!(!db
                .complete(&next, "a", "i", "m", 0.5, "graded", "{}")
                .await
                .unwrap());
            assert!(db
                .result_keys()
                .await
                .unwrap()
                .iter()
                .all(|(r, _)| *r != busy_run));
            db.create_key("admin", Role::Admin, "admin", Quotas::default())
                .await
                .unwrap();
            let admin = db.key_by_hash("admin").await.unwrap().unwrap();
            let board = db.leaderboard("d", &admin).await.unwrap();
            assert_eq!((board[0].submitter.as_str(), board[0].records), ("k", 2));
            let after = db.claim("b", 60_000).await.unwrap().expect("k is free");
            assert!(after.run_id != busy_run && after.run_id != other);
            db.release(&after.id, "b", false).await.unwrap();
            let next = db.claim("a", 60_000).await.unwrap().expect("claimed");
            // A lease that ran out frees the key.
            db.release(&next.id, "a", false).await.unwrap();
            let held = db.claim("a", 0).await.unwrap().expect("claimed");
            std::thread::sleep(std::time::Duration::from_millis(5));
            let taken = db.claim("c", 60_000).await.unwrap().expect("taken over");
            assert_eq!(taken.id, held.id);
        });
    }

    /// Many requests of one key at once: exactly as many pass as the quota
    /// allows, for runs and for bytes, and deleting gives nothing back.
    #[test]
    fn concurrent_requests_of_one_key_never_pass_a_quota_together() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
            let db = Db::open(&url).await.unwrap();
            let quotas = Quotas {
                runs_per_day: 3,
                upload_bytes_per_day: 1_000,
                ..Quotas::default()
            };
            db.create_key("k", Role::Submitter, "hash", quotas)
                .await
                .unwrap();
            let key = db.key_by_hash("hash").await.unwrap().unwrap();
            let race = |bytes: i64| {
                let tasks: Vec<_> = (0..12)
                    .map(|_| {
                        let (db, key) = (db.clone(), key.clone());
                        tokio::spawn(async move {
                            db.create_run(&key, "d", bytes, &["{}".to_string()])
                                .await
                                .unwrap()
                        })
                    })
                    .collect();
                async move {
                    let mut passed = Vec::new();
                    for t in tasks {
                        if let Ok(id) = t.await.unwrap() {
                            passed.push(id);
                        }
                    }
                    passed
                }
            };
            let passed = race(1).await;
            assert_eq!(passed.len(), 3, "runs a day");
            for id in &passed {
                db.delete_run(id, false).await.unwrap();
            }
            let err = db
                .create_run(&key, "d", 1, &["{}".to_string()])
                .await
                .unwrap()
                .unwrap_err();
            assert!(err.0.contains("has started 3"), "{err}");

            db.create_key("b", Role::Admin, "hash-b", quotas)
                .await
                .unwrap();
            let admin = db.key_by_hash("hash-b").await.unwrap().unwrap();
            let uploads: Vec<_> = (0..10)
                .map(|i| {
                    let (db, admin) = (db.clone(), admin.clone());
                    tokio::spawn(async move {
                        let id = format!("d{i}");
                        db.create_dataset(&id, &id, "f", 1, false, &admin.id, 300, &[], &admin)
                            .await
                            .unwrap()
                    })
                })
                .collect();
            let mut stored = 0;
            for u in uploads {
                stored += u.await.unwrap().is_ok() as i64;
            }
            assert_eq!(stored, 3, "300 bytes each under 1,000 a day");
            assert_eq!(db.bytes_used(&admin).await.unwrap(), 900);
        });
    }
}
