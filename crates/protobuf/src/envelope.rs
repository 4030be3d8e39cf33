//! The `k8s\0` + `runtime.Unknown` envelope around every protobuf object,
//! and the length-prefixed frames of watch streams.

use prost::Message;

use crate::Error;

/// The prefix of every protobuf body: `k8s` and a zero byte.
pub const MAGIC: [u8; 4] = [0x6b, 0x38, 0x73, 0x00];

/// `runtime.TypeMeta` (apimachinery/pkg/runtime/generated.proto).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `runtime.Unknown`: the envelope.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

impl Unknown {
    pub fn type_meta(&self) -> (String, String) {
        let meta = self.type_meta.clone().unwrap_or_default();
        (
            meta.api_version.unwrap_or_default(),
            meta.kind.unwrap_or_default(),
        )
    }
}

/// Reads the envelope of `bytes`.
pub(crate) fn open(bytes: &[u8]) -> Result<Unknown, Error> {
    let body = bytes.strip_prefix(&MAGIC).ok_or(Error::NotProtobuf)?;
    let unknown = Unknown::decode(body).map_err(|e| Error::Malformed(e.to_string()))?;
    if let Some(encoding) = unknown
        .content_encoding
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        return Err(Error::Malformed(format!(
            "content encoding {encoding:?} is not supported"
        )));
    }
    Ok(unknown)
}

/// Wraps a message's bytes in the envelope, as kube-apiserver writes it
/// (the empty content type and encoding included).
pub(crate) fn seal(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(&MAGIC);
    unknown.encode(&mut out).unwrap_or_default();
    out
}

/// One frame of a protobuf stream: a 4-byte big-endian length, then the bytes.
pub fn frame(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// Splits the first complete frame off `buf`: its payload and the rest,
/// or None while the frame is incomplete.
pub fn read_frame(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    let payload = buf.get(4..end)?;
    Some((payload, &buf[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_round_trips_and_names_its_kind() {
        let bytes = seal("apps/v1", "Deployment", vec![1, 2, 3]);
        assert_eq!(&bytes[..4], b"k8s\0");
        let unknown = open(&bytes).unwrap();
        assert_eq!(
            unknown.type_meta(),
            ("apps/v1".to_string(), "Deployment".to_string())
        );
        assert_eq!(unknown.raw.as_deref(), Some(&[1u8, 2, 3][..]));
    }

    #[test]
    fn bytes_without_the_prefix_or_truncated_are_refused() {
        assert!(matches!(open(b"{\"kind\":1}"), Err(Error::NotProtobuf)));
        let bytes = seal("v1", "Pod", vec![0; 40]);
        assert!(matches!(
            open(&bytes[..bytes.len() - 5]),
            Err(Error::Malformed(_))
        ));
    }

    #[test]
    fn frames_split_only_when_complete() {
        let mut stream = frame(b"abc");
        stream.extend(frame(b""));
        let (first, rest) = read_frame(&stream).unwrap();
        assert_eq!(first, b"abc");
        let (second, rest) = read_frame(rest).unwrap();
        assert_eq!((second, rest), (&b""[..], &b""[..]));
        assert!(read_frame(&frame(b"abcdef")[..7]).is_none());
    }
}
