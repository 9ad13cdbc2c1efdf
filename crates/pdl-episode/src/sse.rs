//! Incremental parsing of server-sent events: [`SseParser`] cuts a byte stream
//! into [`SseEvent`]s, each keeping the exact bytes it was made of so that a proxy
//! can pass it on unchanged. An event may hold at most
//! [`SseParser::max_event_bytes`] bytes: a stream that never ends an event
//! cannot grow the parser's buffer without bound.

use bytes::{Bytes, BytesMut};

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The bytes of the event as received, the terminating blank line included.
    pub raw: Bytes,
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`, or `None` when the event has none
    /// (a comment or keep-alive).
    pub data: Option<String>,
}

impl SseEvent {
    /// Parses the fields of one event from its raw bytes.
    fn from_raw(raw: Bytes) -> SseEvent {
        let mut event = None;
        let mut data: Option<String> = None;
        let text = String::from_utf8_lossy(&raw);
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() || line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            match field {
                "event" => event = Some(value.to_string()),
                "data" => match &mut data {
                    Some(existing) => {
                        existing.push('\n');
                        existing.push_str(value);
                    }
                    None => data = Some(value.to_string()),
                },
                _ => {}
            }
        }
        SseEvent { raw, event, data }
    }
}

/// The default bound on one event's size.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 << 20;

/// An event grew beyond the parser's bound before it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a server-sent event grew beyond {limit} bytes without ending")]
pub struct SseOverflow {
    /// The bound.
    pub limit: usize,
}

/// Cuts a stream of bytes into server-sent events as the bytes arrive.
///
/// Lines end in `\n` or `\r\n`; an empty line ends an event.
#[derive(Debug)]
pub struct SseParser {
    buf: BytesMut,
    /// Where the first line not yet scanned starts in `buf`.
    scanned: usize,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser with nothing buffered and the default bound on one event.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// A parser whose events may hold at most `max_event_bytes` bytes.
    pub fn with_limit(max_event_bytes: usize) -> SseParser {
        SseParser {
            buf: BytesMut::new(),
            scanned: 0,
            max_event_bytes,
        }
    }

    /// The bound on one event's size.
    pub fn max_event_bytes(&self) -> usize {
        self.max_event_bytes
    }

    /// Feeds bytes and returns the events they complete, in order; an error
    /// when the unfinished event grows beyond the bound (the parser keeps
    /// nothing of it then).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseOverflow> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(offset) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            let newline = self.scanned + offset;
            let line = &self.buf[self.scanned..newline];
            let blank = line.is_empty() || line == b"\r";
            self.scanned = newline + 1;
            if blank {
                let raw = self.buf.split_to(self.scanned).freeze();
                self.scanned = 0;
                events.push(SseEvent::from_raw(raw));
            }
        }
        if self.buf.len() > self.max_event_bytes {
            self.buf.clear();
            self.scanned = 0;
            return Err(SseOverflow {
                limit: self.max_event_bytes,
            });
        }
        Ok(events)
    }

    /// Ends the stream: returns the bytes of an unterminated last event, if any.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.scanned = 0;
        if self.buf.is_empty() {
            return None;
        }
        Some(SseEvent::from_raw(self.buf.split().freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_keep_their_bytes() {
        let stream = b"event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
        for split in 1..stream.len() {
            let mut parser = SseParser::new();
            let mut events = parser.push(&stream[..split]).unwrap();
            events.extend(parser.push(&stream[split..]).unwrap());
            assert!(parser.finish().is_none());
            assert_eq!(events.len(), 4, "split at {split}");
            assert_eq!(events[0].event.as_deref(), Some("message_start"));
            assert_eq!(events[0].data.as_deref(), Some("{\"a\":1}"));
            assert_eq!(events[1].data, None);
            assert_eq!(events[2].data.as_deref(), Some("x\ny"));
            assert_eq!(events[3].data.as_deref(), Some("[DONE]"));
            let joined: Vec<u8> = events.iter().flat_map(|e| e.raw.to_vec()).collect();
            assert_eq!(joined, stream.to_vec());
        }
    }

    #[test]
    fn an_unterminated_event_is_returned_at_the_end() {
        let mut parser = SseParser::new();
        assert!(parser.push(b"data: {\"partial\":true}").unwrap().is_empty());
        let last = parser.finish().unwrap();
        assert_eq!(last.data.as_deref(), Some("{\"partial\":true}"));
        assert!(parser.finish().is_none());
    }

    #[test]
    fn an_event_that_never_ends_is_bounded() {
        let mut parser = SseParser::with_limit(64);
        assert_eq!(parser.push(b"data: ok\n\n").unwrap().len(), 1);
        assert!(parser.push(&[b'x'; 40]).unwrap().is_empty());
        assert_eq!(
            parser.push(&[b'x'; 40]).unwrap_err(),
            SseOverflow { limit: 64 }
        );
        // Nothing of the oversized event is kept.
        assert!(parser.finish().is_none());
        // Many complete events in one chunk are fine whatever their total size.
        let many = b"data: 0123456789\n\n".repeat(100);
        assert_eq!(parser.push(&many).unwrap().len(), 100);
    }
}
