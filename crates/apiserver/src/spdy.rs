//! SPDY/3.1 framing, the server's side, as far as Kubernetes' streaming
//! protocols use it (`kubectl port-forward` upgrades to `SPDY/3.1`):
//! SYN_STREAM, SYN_REPLY, DATA, RST_STREAM, PING and GOAWAY; SETTINGS,
//! WINDOW_UPDATE and HEADERS are read and ignored (the clients do not
//! enforce flow control). Header blocks are zlib streams with the
//! specification's preset dictionary, one compression context per
//! direction for the whole connection. No crate does SPDY; this module
//! does nothing but frames, and is fuzzed by its tests.

use bytes::BytesMut;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

pub const FLAG_FIN: u8 = 0x01;
const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
/// A frame's payload is at most 2^24 - 1 bytes; header blocks far less.
const MAX_HEADER_BLOCK: usize = 1 << 20;

/// The header names of SPDY/3's compression dictionary (section 2.6.10.1),
/// each written with a 4-byte length, then the literal tail.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];
const DICTIONARY_TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

fn dictionary() -> Vec<u8> {
    let mut d = Vec::with_capacity(1424);
    for w in DICTIONARY_WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
}

/// A frame the peer sent.
#[derive(Debug, PartialEq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        flags: u8,
        headers: Vec<(String, String)>,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Vec<u8>,
    },
    RstStream {
        stream_id: u32,
    },
    Ping(u32),
    GoAway,
    /// Read and ignored (SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY, ...).
    Other,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpdyError {
    #[error("not SPDY/3 (version {0})")]
    Version(u16),
    #[error("a malformed {0} frame")]
    Malformed(&'static str),
    #[error("a header block that does not decompress: {0}")]
    Compression(String),
}

/// One connection's two compression contexts.
pub struct Codec {
    inflate: Decompress,
    deflate: Compress,
    dictionary: Vec<u8>,
    deflate_primed: bool,
}

impl Default for Codec {
    fn default() -> Self {
        Codec {
            inflate: Decompress::new(true),
            deflate: Compress::new(Compression::default(), true),
            dictionary: dictionary(),
            deflate_primed: false,
        }
    }
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

impl Codec {
    /// The next whole frame in `buf` (consumed), `None` until one is there.
    pub fn read(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, SpdyError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let length = (usize::from(buf[5]) << 16) | (usize::from(buf[6]) << 8) | usize::from(buf[7]);
        if buf.len() < 8 + length {
            return Ok(None);
        }
        let head = buf.split_to(8);
        let payload = buf.split_to(length);
        let flags = head[4];
        if head[0] & 0x80 == 0 {
            let stream_id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
            return Ok(Some(Frame::Data {
                stream_id,
                flags,
                data: payload.to_vec(),
            }));
        }
        let version = u16::from_be_bytes([head[0], head[1]]) & 0x7fff;
        if version != VERSION {
            return Err(SpdyError::Version(version));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let p = &payload[..];
        Ok(Some(match kind {
            SYN_STREAM => {
                let stream_id =
                    u32_at(p, 0).ok_or(SpdyError::Malformed("SYN_STREAM"))? & 0x7fff_ffff;
                let block = p.get(10..).ok_or(SpdyError::Malformed("SYN_STREAM"))?;
                Frame::SynStream {
                    stream_id,
                    flags,
                    headers: self.headers(block)?,
                }
            }
            RST_STREAM => Frame::RstStream {
                stream_id: u32_at(p, 0).ok_or(SpdyError::Malformed("RST_STREAM"))? & 0x7fff_ffff,
            },
            PING => Frame::Ping(u32_at(p, 0).ok_or(SpdyError::Malformed("PING"))?),
            GOAWAY => Frame::GoAway,
            _ => Frame::Other,
        }))
    }

    /// Decompresses and parses a header block.
    fn headers(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
        let mut out: Vec<u8> = Vec::with_capacity(block.len() * 4 + 64);
        let mut input = block;
        loop {
            if out.len() >= MAX_HEADER_BLOCK {
                return Err(SpdyError::Compression("a header block over 1 MiB".into()));
            }
            out.reserve(4096);
            let (before_in, before_out) = (self.inflate.total_in(), out.len());
            let status = self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = (self.inflate.total_in() - before_in) as usize;
            input = &input[used.min(input.len())..];
            let produced = out.len() - before_out;
            match status {
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&self.dictionary)
                        .map_err(|e| SpdyError::Compression(e.to_string()))?;
                }
                Err(e) => return Err(SpdyError::Compression(e.to_string())),
                Ok(Status::StreamEnd) => break,
                // All read and the output not full: the block is done.
                Ok(_) if input.is_empty() && out.len() < out.capacity() => break,
                Ok(_) if used == 0 && produced == 0 => {
                    return Err(SpdyError::Compression("a truncated header block".into()));
                }
                Ok(_) => {}
            }
        }
        parse_pairs(&out)
    }

    fn compress(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        if !self.deflate_primed {
            let _ = self.deflate.set_dictionary(&self.dictionary);
            self.deflate_primed = true;
        }
        let mut raw = (pairs.len() as u32).to_be_bytes().to_vec();
        for (k, v) in pairs {
            raw.extend_from_slice(&(k.len() as u32).to_be_bytes());
            raw.extend_from_slice(k.as_bytes());
            raw.extend_from_slice(&(v.len() as u32).to_be_bytes());
            raw.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input = &raw[..];
        loop {
            out.reserve(256);
            let before = self.deflate.total_in();
            let _ = self
                .deflate
                .compress_vec(input, &mut out, FlushCompress::Sync);
            let used = (self.deflate.total_in() - before) as usize;
            input = &input[used.min(input.len())..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        out
    }

    /// SYN_REPLY for `stream_id` with `headers`.
    pub fn syn_reply(&mut self, stream_id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = stream_id.to_be_bytes().to_vec();
        payload.extend(self.compress(headers));
        control(SYN_REPLY, 0, &payload)
    }
}

fn parse_pairs(b: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let bad = || SpdyError::Malformed("header block");
    let n = u32_at(b, 0).ok_or_else(bad)? as usize;
    let mut i = 4;
    let mut out = Vec::new();
    for _ in 0..n.min(1024) {
        let kl = u32_at(b, i).ok_or_else(bad)? as usize;
        let k = b.get(i + 4..i + 4 + kl).ok_or_else(bad)?;
        i += 4 + kl;
        let vl = u32_at(b, i).ok_or_else(bad)? as usize;
        let v = b.get(i + 4..i + 4 + vl).ok_or_else(bad)?;
        i += 4 + vl;
        out.push((
            String::from_utf8_lossy(k).to_ascii_lowercase(),
            String::from_utf8_lossy(v).into_owned(),
        ));
    }
    Ok(out)
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

/// A DATA frame (split by the caller below 16 MiB).
pub fn data(stream_id: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// RST_STREAM with CANCEL (5).
pub fn rst_stream(stream_id: u32) -> Vec<u8> {
    let mut p = stream_id.to_be_bytes().to_vec();
    p.extend_from_slice(&5u32.to_be_bytes());
    control(RST_STREAM, 0, &p)
}

pub fn goaway(last_stream: u32) -> Vec<u8> {
    let mut p = last_stream.to_be_bytes().to_vec();
    p.extend_from_slice(&0u32.to_be_bytes());
    control(GOAWAY, 0, &p)
}

/// The 101 answer that upgrades a request to SPDY/3.1 with `protocol`
/// (`X-Stream-Protocol-Version`).
pub fn switching_protocols(protocol: &'static str) -> axum::response::Response {
    let mut response = axum::response::Response::new(axum::body::Body::empty());
    *response.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    h.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static("SPDY/3.1"),
    );
    h.insert(
        "X-Stream-Protocol-Version",
        http::HeaderValue::from_static(protocol),
    );
    response
}

/// One writer for a connection's frames: whoever has the sender writes;
/// the connection is shut once every sender is gone.
pub fn writer<W>(
    mut writer: W,
) -> (
    tokio::sync::mpsc::Sender<Vec<u8>>,
    tokio::task::JoinHandle<()>,
)
where
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tokio::io::AsyncWriteExt;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(256);
    let task = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    (tx, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's SYN_STREAM, made with a codec of our own (the client's
    /// compression context is the mirror of the server's).
    fn syn_stream(client: &mut Codec, id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&0u32.to_be_bytes());
        payload.extend_from_slice(&[0, 0]);
        payload.extend(client.compress(headers));
        control(SYN_STREAM, 0, &payload)
    }

    #[test]
    fn the_dictionary_is_the_specifications() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert!(d.starts_with(b"\x00\x00\x00\x07options\x00\x00\x00\x04head"));
        assert!(d.ends_with(b"enq=0."));
    }

    #[test]
    fn frames_round_trip_across_one_compression_context() {
        let (mut client, mut server) = (Codec::default(), Codec::default());
        let mut wire = BytesMut::new();
        wire.extend(syn_stream(
            &mut client,
            1,
            &[("streamType", "error"), ("port", "80"), ("requestID", "0")],
        ));
        wire.extend(syn_stream(
            &mut client,
            3,
            &[("streamtype", "data"), ("port", "80"), ("requestid", "0")],
        ));
        wire.extend(data(3, FLAG_FIN, b"GET / HTTP/1.1\r\n\r\n"));
        wire.extend(ping(7));
        // Byte by byte: nothing until a frame is whole.
        let mut partial = BytesMut::new();
        let mut frames = Vec::new();
        for b in wire.iter() {
            partial.extend_from_slice(&[*b]);
            while let Some(f) = server.read(&mut partial).unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 4);
        assert_eq!(
            frames[0],
            Frame::SynStream {
                stream_id: 1,
                flags: 0,
                headers: vec![
                    ("streamtype".into(), "error".into()),
                    ("port".into(), "80".into()),
                    ("requestid".into(), "0".into())
                ]
            }
        );
        assert!(
            matches!(&frames[1], Frame::SynStream { stream_id: 3, headers, .. } if headers[0].1 == "data")
        );
        assert_eq!(
            frames[2],
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: b"GET / HTTP/1.1\r\n\r\n".to_vec()
            }
        );
        assert_eq!(frames[3], Frame::Ping(7));
        // The server's replies decompress on the client's side.
        let mut reply = BytesMut::from(&server.syn_reply(1, &[])[..]);
        assert_eq!(reply[3], SYN_REPLY as u8);
        reply[3] = SYN_STREAM as u8; // read it back through the same parser
        let mut body = reply.split_off(8);
        let mut payload = body.split_to(4).to_vec();
        payload.extend_from_slice(&[0; 6]);
        payload.extend_from_slice(&body);
        let mut framed = BytesMut::from(&control(SYN_STREAM, 0, &payload)[..]);
        assert!(matches!(
            client.read(&mut framed).unwrap(),
            Some(Frame::SynStream { stream_id: 1, .. })
        ));
    }

    #[test]
    fn garbage_is_an_error_or_a_wait_never_a_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|i| (seed >> (i % 56)) as u8).collect();
            if round % 2 == 0 && bytes.len() >= 8 {
                // A plausible control header with a wild length.
                bytes[0] = 0x80;
                bytes[1] = 3;
            }
            let mut codec = Codec::default();
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = codec.read(&mut buf) {}
        }
    }
}
