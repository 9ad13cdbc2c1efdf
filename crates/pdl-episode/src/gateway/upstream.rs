//! The connection to the real model provider ([`Upstream`]): one HTTP/1.1 client
//! with a connection pool and rustls, the real key, and retries with exponential
//! backoff for 429, 5xx and connection failures.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, Request, Response, StatusCode, Uri};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::{GatewayError, UpstreamConfig};
use crate::provider::ApiKind;

/// The `anthropic-version` sent when the client sent none.
const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// How long connecting may take, within the request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why no upstream response could be had.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made (after the retries).
    Connect(String),
    /// The upstream did not answer within the request timeout.
    Timeout(Duration),
    /// The request failed after it was sent.
    Failed(String),
}

/// The real model provider.
pub(crate) struct Upstream {
    pub(crate) api: ApiKind,
    pub(crate) base_url: String,
    url: Uri,
    key: Option<HeaderValue>,
    key_text: Option<String>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    pub(crate) timeout: Duration,
    max_retries: u32,
    base_delay: Duration,
    max_delay: Duration,
}

impl Upstream {
    /// Checks the configuration and builds the client.
    pub(crate) fn new(config: &UpstreamConfig) -> Result<Upstream, GatewayError> {
        let base_url = config.base_url.trim_end_matches('/').to_string();
        let invalid = |reason: &str| GatewayError::InvalidUpstream {
            url: config.base_url.clone(),
            reason: reason.to_string(),
        };
        let url: Uri = format!("{base_url}{}", config.api.upstream_suffix())
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| invalid(&e.to_string()))?;
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(invalid("the scheme must be http or https")),
        };
        if url.authority().is_none() {
            return Err(invalid("no host"));
        }
        let key = match &config.api_key {
            Some(key) => {
                let value = match config.api {
                    ApiKind::OpenAi => format!("Bearer {key}"),
                    ApiKind::Anthropic => key.clone(),
                };
                let mut value =
                    HeaderValue::from_str(&value).map_err(|_| GatewayError::InvalidApiKey)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };

        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT.min(config.request_timeout)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(https, &config.extra_root_certificates)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Ok(Upstream {
            api: config.api,
            base_url,
            url,
            key,
            key_text: config.api_key.clone(),
            client,
            timeout: config.request_timeout,
            max_retries: config.max_retries,
            base_delay: config.retry_base_delay,
            max_delay: config.retry_max_delay,
        })
    }

    /// The real API key, to redact it.
    pub(crate) fn key_text(&self) -> Option<&str> {
        self.key_text.as_deref()
    }

    /// Sends `body` with the client headers the policy let through, retrying
    /// 429, 5xx and connection failures, and returns the response once its
    /// headers have arrived. The body is the caller's to read.
    pub(crate) async fn send(
        &self,
        client_headers: &[(&'static str, HeaderValue)],
        body: Bytes,
    ) -> Result<Response<Incoming>, SendError> {
        let mut attempt = 0u32;
        loop {
            let request = self.request(client_headers, body.clone());
            let outcome = tokio::time::timeout(self.timeout, self.client.request(request)).await;
            let retry_in = match outcome {
                Err(_) => return Err(SendError::Timeout(self.timeout)),
                Ok(Ok(response)) => {
                    let status = response.status();
                    if !(status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
                        || attempt >= self.max_retries
                    {
                        return Ok(response);
                    }
                    retry_after(response.headers())
                        .unwrap_or_else(|| self.backoff(attempt))
                        .min(self.max_delay)
                }
                Ok(Err(e)) => {
                    let message = error_chain(&e);
                    if !e.is_connect() {
                        return Err(SendError::Failed(message));
                    }
                    if attempt >= self.max_retries {
                        return Err(SendError::Connect(message));
                    }
                    self.backoff(attempt)
                }
            };
            attempt += 1;
            tokio::time::sleep(retry_in).await;
        }
    }

    /// The wait before retry number `attempt + 1`.
    fn backoff(&self, attempt: u32) -> Duration {
        self.base_delay
            .saturating_mul(2u32.saturating_pow(attempt.min(16)))
            .min(self.max_delay)
    }

    fn request(
        &self,
        client_headers: &[(&'static str, HeaderValue)],
        body: Bytes,
    ) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.url.clone();
        let headers = request.headers_mut();
        for (name, value) in client_headers {
            headers.insert(HeaderName::from_static(name), value.clone());
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("pdl-episode/", env!("CARGO_PKG_VERSION"))),
        );
        match self.api {
            ApiKind::OpenAi => {
                if let Some(key) = &self.key {
                    headers.insert(header::AUTHORIZATION, key.clone());
                }
            }
            ApiKind::Anthropic => {
                if let Some(key) = &self.key {
                    headers.insert(HeaderName::from_static("x-api-key"), key.clone());
                }
                headers
                    .entry(HeaderName::from_static("anthropic-version"))
                    .or_insert(HeaderValue::from_static(DEFAULT_ANTHROPIC_VERSION));
            }
        }
        request
    }
}

/// The wait an upstream asks for in `retry-after-ms` or `retry-after` (seconds).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms.min(1e9) / 1000.0));
    }
    number("retry-after").map(|s| Duration::from_secs_f64(s.min(1e6)))
}

/// An error and its causes, joined with `: `.
pub(crate) fn error_chain(error: &dyn StdError) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// TLS with the ring provider: for an https upstream, the platform's roots plus
/// `extra_roots`; for a plain http one, no roots (TLS is never used).
fn tls_config(https: bool, extra_roots: &[Vec<u8>]) -> Result<rustls::ClientConfig, GatewayError> {
    use rustls::pki_types::CertificateDer;
    let tls_error = |e: rustls::Error| GatewayError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    if !https {
        return Ok(builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth());
    }
    let extra = extra_roots
        .iter()
        .map(|der| CertificateDer::from(der.clone()));
    let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider)
        .map_err(tls_error)?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> UpstreamConfig {
        UpstreamConfig::new(ApiKind::OpenAi, url)
    }

    #[test]
    fn base_urls_are_checked() {
        let upstream = Upstream::new(&config("http://127.0.0.1:9/v1/")).unwrap();
        assert_eq!(upstream.url, "http://127.0.0.1:9/v1/chat/completions");
        for bad in ["ftp://host/v1", "not a url", "/v1"] {
            let err = Upstream::new(&config(bad)).err().unwrap();
            assert!(
                matches!(err, GatewayError::InvalidUpstream { .. }),
                "{bad}: {err}"
            );
        }
        let err = Upstream::new(&config("http://h/v1").with_api_key("bad\nkey"))
            .err()
            .unwrap();
        assert!(matches!(err, GatewayError::InvalidApiKey));
        let mut bad_root = config("https://h/v1");
        bad_root.extra_root_certificates = vec![b"not a certificate".to_vec()];
        let err = Upstream::new(&bad_root).err().unwrap();
        assert!(matches!(err, GatewayError::Tls(_)), "{err}");
    }

    #[test]
    fn retry_after_headers_are_read_in_seconds_or_milliseconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.insert("retry-after-ms", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut cfg = config("http://h/v1");
        cfg.retry_base_delay = Duration::from_millis(100);
        cfg.retry_max_delay = Duration::from_millis(350);
        let upstream = Upstream::new(&cfg).unwrap();
        let waits: Vec<_> = (0..4).map(|a| upstream.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
    }
}
