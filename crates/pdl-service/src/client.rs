//! The client of the service (`pdl-swe datasets upload`, `submit`, `runs …`):
//! blocking HTTP calls that return the API's types. It never prints; progress
//! comes back through a callback.

use std::path::Path;
use std::time::Duration;

use crate::api::{ApiError, DatasetInfo, RunInfo, RunReport};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No key in the environment.
    #[error("set PDL_SWE_API_KEY to an API key (pdl-swe serve keys create prints one)")]
    NoKey,
    /// The server could not be reached or the connection broke.
    #[error("{url}: {message}")]
    Transport {
        /// The URL called.
        url: String,
        /// What happened.
        message: String,
    },
    /// The server answered with an error.
    #[error("the server refused ({status}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The answer was not what the API promises.
    #[error("{url}: unexpected answer: {message}")]
    Unexpected {
        /// The URL called.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// A local file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl ClientError {
    /// True when the server said the input was wrong or not allowed (4xx).
    pub fn is_client_fault(&self) -> bool {
        matches!(self, ClientError::Refused { status, .. } if (400..500).contains(status))
    }
}

/// A connection to one server with one key.
pub struct Client {
    base: String,
    key: String,
    agent: ureq::Agent,
}

/// Largest answer read (a report of many predictions).
const MAX_ANSWER_BYTES: u64 = 1 << 30;

impl Client {
    /// A client of `server` (`http://host:port`) with `key`.
    pub fn new(server: &str, key: &str) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(600)))
            .build();
        Client {
            base: server.trim_end_matches('/').to_string(),
            key: key.to_string(),
            agent: config.into(),
        }
    }

    /// A client of `server` with the key in `PDL_SWE_API_KEY`.
    pub fn from_env(server: &str) -> Result<Client, ClientError> {
        match std::env::var("PDL_SWE_API_KEY") {
            Ok(key) if !key.trim().is_empty() => Ok(Client::new(server, key.trim())),
            _ => Err(ClientError::NoKey),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }

    fn finish(
        &self,
        url: &str,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Vec<u8>, ClientError> {
        let mut response = result.map_err(|e| ClientError::Transport {
            url: url.to_string(),
            message: e.to_string(),
        })?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .map_err(|e| ClientError::Transport {
                url: url.to_string(),
                message: e.to_string(),
            })?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let message = serde_json::from_slice::<ApiError>(&body)
            .map(|e| e.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(500).collect());
        Err(ClientError::Refused { status, message })
    }

    fn get(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let url = self.url(path);
        let r = self
            .agent
            .get(&url)
            .header("Authorization", &self.bearer())
            .call();
        self.finish(&url, r)
    }

    fn json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        bytes: &[u8],
    ) -> Result<T, ClientError> {
        serde_json::from_slice(bytes).map_err(|e| ClientError::Unexpected {
            url: url.to_string(),
            message: e.to_string(),
        })
    }

    fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let bytes = self.get(path)?;
        self.json(&self.url(path), &bytes)
    }

    fn post(
        &self,
        path: &str,
        query: &[(&str, String)],
        body: &[u8],
    ) -> Result<Vec<u8>, ClientError> {
        let url = self.url(path);
        let mut request = self
            .agent
            .post(&url)
            .header("Authorization", &self.bearer())
            .header("Content-Type", "application/octet-stream");
        for (k, v) in query {
            request = request.query(*k, v);
        }
        let r = request.send(body);
        self.finish(&url, r)
    }

    /// Uploads the dataset at `path` (`.jsonl`, `.parquet`, or a `.tar` of
    /// task trees) as `name`, for the keys named in `grants` (none: every
    /// submitter); `public_ladders` shows rung names to submitters.
    pub fn upload_dataset(
        &self,
        name: &str,
        path: &Path,
        grants: &[String],
        public_ladders: bool,
    ) -> Result<DatasetInfo, ClientError> {
        let bytes = std::fs::read(path).map_err(|source| ClientError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let filename = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "dataset".into());
        let mut query = vec![
            ("name", name.to_string()),
            ("filename", filename),
            ("public_ladders", public_ladders.to_string()),
        ];
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl") | Some("ndjson") => query.push(("format", "jsonl".into())),
            Some("parquet") => query.push(("format", "parquet".into())),
            Some("tar") => query.push(("format", "tar".into())),
            _ => {}
        }
        if !grants.is_empty() {
            query.push(("grants", grants.join(",")));
        }
        let bytes = self.post("/api/datasets", &query, &bytes)?;
        self.json(&self.url("/api/datasets"), &bytes)
    }

    /// The datasets this key may use.
    pub fn datasets(&self) -> Result<Vec<DatasetInfo>, ClientError> {
        self.get_json("/api/datasets")
    }

    /// Submits the predictions file at `path` against `dataset`.
    pub fn submit(&self, dataset: &str, path: &Path) -> Result<RunInfo, ClientError> {
        let bytes = std::fs::read(path).map_err(|source| ClientError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let filename = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "predictions".into());
        let query = [("dataset", dataset.to_string()), ("filename", filename)];
        let bytes = self.post("/api/runs", &query, &bytes)?;
        self.json(&self.url("/api/runs"), &bytes)
    }

    /// This key's runs (an admin: every run).
    pub fn runs(&self) -> Result<Vec<RunInfo>, ClientError> {
        self.get_json("/api/runs")
    }

    /// One run's progress.
    pub fn run(&self, id: &str) -> Result<RunInfo, ClientError> {
        self.get_json(&format!("/api/runs/{}", encode(id)))
    }

    /// One run's report.
    pub fn report(&self, id: &str) -> Result<RunReport, ClientError> {
        self.get_json(&format!("/api/runs/{}/report", encode(id)))
    }

    /// Deletes a run with its records.
    pub fn delete(&self, id: &str) -> Result<(), ClientError> {
        let url = self.url(&format!("/api/runs/{}", encode(id)));
        let r = self
            .agent
            .delete(&url)
            .header("Authorization", &self.bearer())
            .call();
        self.finish(&url, r).map(|_| ())
    }

    /// Polls run `id` every `every` until it is finished, handing each state
    /// to `progress`; `stop` ends the wait early (returning the last state).
    pub fn wait(
        &self,
        id: &str,
        every: Duration,
        progress: &mut dyn FnMut(&RunInfo),
        stop: &dyn Fn() -> bool,
    ) -> Result<RunInfo, ClientError> {
        loop {
            let run = self.run(id)?;
            progress(&run);
            if run.finished() || stop() {
                return Ok(run);
            }
            std::thread::sleep(every);
        }
    }
}

/// A path segment with everything but unreserved characters escaped.
fn encode(segment: &str) -> String {
    let mut out = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
